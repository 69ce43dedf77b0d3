"""A NaN is unequal to every other NaN object, and a container compares its items by `is` first:
`intern` handing out another NaN, or a container holding one, changes what `==` answers
(`[nan_a] == [nan_b]` is False, `[nan_b] == [nan_b]` True). Found by CI's hypothesis run of
`test_static_readback.py` (`[(nan, nan, frozenset({200}))]`)."""

import copy
import decimal
import struct
import warnings

import equinox as eqx
import ml_dtypes
import numpy as np
from hypothesis import given, settings, strategies as st

import eqxstable as es


def _nan(payload: int) -> float:
    # A quiet NaN with this payload: a new object each call.
    return struct.unpack("<d", struct.pack("<Q", 0x7FF8_0000_0000_0000 | payload))[0]


payloads = st.integers(0, 2**51 - 1)
shapes = st.sampled_from(
    [
        lambda n: n,
        lambda n: (n,),
        lambda n: (n, 1.0, frozenset({2})),
        lambda n: tuple([n] * 9),  # a run of floats (`K-scalar-run`)
        lambda n: complex(n, 0.0),
        lambda n: (np.float32(n),),
        lambda n: (np.float64(n), "a"),
    ]
)


@settings(deadline=None, max_examples=60)
@given(payloads, shapes)
def test_intern_never_hands_out_another_nan(payload, shape):
    first, second = shape(_nan(payload)), shape(_nan(payload))
    es.intern(first)
    got = es.intern(second)
    assert got is second
    # Keys still say they compute the same thing: a program is shared, only never the object.
    assert es.stable_key(first) == es.stable_key(second)


def test_intern_still_shares_equal_values_without_a_nan():
    a, b = (1.0, 2.0, frozenset({3})), (1.0, 2.0, frozenset({3}))
    assert es.intern(a) is a and es.intern(b) is a


def test_nat_is_not_substituted():
    a, b = (np.datetime64("NaT"),), (np.datetime64("NaT"),)
    es.intern(a)
    assert es.intern(b) is b


class _Plain(eqx.Module):
    value: object = eqx.field(static=True)


@settings(deadline=None, max_examples=30)
@given(payloads)
def test_a_stabilized_module_reads_back_its_own_nan(payload):
    def read(value):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Equinox warns about a list in a static field.
            return es.stabilize(_Plain(value)).value

    read([(_nan(payload), frozenset({200}))])
    given_ = [(_nan(payload), frozenset({200}))]
    other = copy.deepcopy(given_)
    assert given_ == other
    assert read(given_) == other


# attack11a finding 01: the NaN rule is "a value unequal to itself (or whose `==` raises) is
# never substituted", whatever its kind: `Decimal` NaNs (any payload, signalling too), the NaNs
# of dtypes NumPy does not make (`ml_dtypes`: kind "V"), NaT of both NumPy time kinds, and NumPy
# complex NaNs.
def _decimal_nan(payload: int, signalling: bool) -> decimal.Decimal:
    return decimal.Decimal(f"{'s' if signalling else ''}NaN{payload}")


self_unequal = st.one_of(
    st.builds(lambda p, s: lambda: _decimal_nan(p, s), st.integers(0, 999), st.booleans()),
    st.sampled_from(
        [
            lambda: ml_dtypes.bfloat16("nan"),
            lambda: ml_dtypes.float8_e4m3fn("nan"),
            lambda: ml_dtypes.float8_e5m2("nan"),
            lambda: np.float16("nan"),
            lambda: np.complex64(complex("nan")),
            lambda: np.datetime64("NaT"),
            lambda: np.timedelta64("NaT"),
        ]
    ),
)
wraps = st.sampled_from([lambda x: (x,), lambda x: (x, "a", 1), lambda x: ((x,), 2.0)])


@settings(deadline=None, max_examples=60)
@given(self_unequal, wraps)
def test_intern_never_hands_out_another_value_unequal_to_itself(make, wrap):
    first, second = wrap(make()), wrap(make())
    es.intern(first)
    got = es.intern(second)
    assert got is second
    assert es.intern(second) is second


class _Stable(es.StableModule):
    value: object = es.field(static=True)


class _StableLeaf(es.StableModule):
    value: object


@settings(deadline=None, max_examples=40)
@given(self_unequal, st.sampled_from([lambda x: x, lambda x: [x, 1], lambda x: (x, 1)]))
def test_a_stable_module_reads_back_its_own_value_unequal_to_itself(make, wrap):
    # attack11a finding 02: a NumPy NaN or NaT in a static field was filed by its bytes, so a
    # later module read back an earlier module's NaN object (`[nan_a] == [nan_b]` is False).
    for cls in (_Stable, _StableLeaf):
        cls(wrap(make()))
        given_ = wrap(make())
        got = cls(given_).value
        if isinstance(given_, (list, tuple)):
            assert got == given_
            assert got[0] is given_[0]
        else:
            assert got is given_


def test_equal_values_of_those_kinds_are_still_shared():
    for make in (lambda: decimal.Decimal("1.5"), lambda: ml_dtypes.bfloat16(1.5)):
        a, b = (make(),), (make(),)
        assert es.intern(a) is a and es.intern(b) is a
