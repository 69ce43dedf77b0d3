"""A dtype's key is everything code can observe of it (`K-dtype`, `_keys/_dtypes.py`), never its
`==`: NumPy calls a packed and an aligned struct equal (and hashes them alike), and no cache may
hand one's key to the other."""

from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

import eqxstable as es


FIELDS = [("a", "<i4"), ("b", "<f4")]


def _offset_of_payload(x, dt):
    # Where a field of dtype `dt` lands after a 1-byte header in an aligned record.
    outer = np.dtype([("tag", "u1"), ("payload", dt)], align=True)
    fields: Any = outer.fields
    return x + fields["payload"][1]


@pytest.mark.parametrize("first_aligned", [False, True])
def test_packed_and_aligned_structs_differ(first_aligned):
    # Made afresh here: NumPy may share equal dtypes made elsewhere, and the cache must not.
    packed = np.dtype(list(FIELDS))
    aligned = np.dtype(list(FIELDS), align=True)
    assert packed == aligned and hash(packed) == hash(aligned)
    first, second = (aligned, packed) if first_aligned else (packed, aligned)
    k1 = es.stable_key(first)
    k2 = es.stable_key(second)
    assert k1 != k2
    # The same through an array (the key of its dtype without a computation).
    assert es.stable_key(np.zeros(2, first)) != es.stable_key(np.zeros(2, second))


@pytest.mark.counts_traces
def test_filter_jit_retraces_for_the_aligned_struct():
    traces = 0

    def f(x, dt):
        nonlocal traces
        traces += 1
        return _offset_of_payload(x, dt)

    jf = es.filter_jit(f)
    x = jnp.zeros(())
    packed = np.dtype(list(FIELDS))
    aligned = np.dtype(list(FIELDS), align=True)
    for dt in (packed, aligned, packed, aligned):
        assert float(jf(x, dt)) == float(_offset_of_payload(x, dt))
    assert traces == 2


def test_intern_keeps_an_arrays_alignment():
    a = es.intern(np.zeros(2, np.dtype(list(FIELDS))))
    b = es.intern(np.zeros(2, np.dtype(list(FIELDS), align=True)))
    assert b is not a
    assert b.dtype.isalignedstruct and not a.dtype.isalignedstruct


@pytest.mark.parametrize("canonical", [False, True])
def test_a_static_arrays_canonical_copy_keeps_its_alignment(canonical):
    # The one read-only array per dtype, shape and bytes that a static value holds
    # (`StableModule`, `stabilize`): by the dtype's description, not its `==`.
    from eqxstable._module._arrays import canonical_array

    a = canonical_array(np.zeros(2, np.dtype(list(FIELDS))), canonical)
    b = canonical_array(np.zeros(2, np.dtype(list(FIELDS), align=True)), canonical)
    assert b is not a
    assert b.dtype.isalignedstruct and not a.dtype.isalignedstruct


def test_metadata_and_nested_names_are_keyed():
    plain = np.dtype("f8")
    meta1 = np.dtype("f8", metadata={"scale": 1})
    meta2 = np.dtype("f8", metadata={"scale": 2})
    empty = np.dtype("f8", metadata={})
    keys = [es.stable_key(d) for d in (plain, meta1, meta2, empty)]
    assert len(set(keys)) == 4
    arrays = [es.stable_key(np.zeros(1, d)) for d in (plain, meta1, meta2, empty)]
    assert len(set(arrays)) == 4
    # A metadata value only a computation can key (a list): keyed as what it is, watched.
    held = [1.0]
    listed = np.dtype("f8", metadata={"scale": held})
    k = es.stable_key(listed)
    held[0] = 2.0
    assert es.stable_key(listed) != k
    # A nested struct's `names` can be assigned in place: the outer dtype changes with it.
    inner = np.dtype([("x", "<i4"), ("y", "<f4")])
    outer = np.dtype([("in", inner)])
    k = es.stable_key(outer)
    inner.names = ("p", "q")
    assert es.stable_key(outer) != k


def test_string_dtype_settings_are_keyed():
    sd = getattr(getattr(np, "dtypes", None), "StringDType", None)
    if sd is None:
        pytest.skip("NumPy < 2 has no StringDType")
    dtypes = [sd(), sd(coerce=False), sd(na_object=None), sd(na_object="x"), sd(na_object=np.nan)]
    assert len({es.stable_key(d) for d in dtypes}) == len(dtypes)
    assert es.stable_key(sd()) == es.stable_key(sd())


_FORMATS = st.sampled_from(["<i4", ">i4", "<f4", "u1", "<f8", "<i2", "V3", "S2"])
_NAMES = st.lists(st.sampled_from("abc"), min_size=1, max_size=3, unique=True)


@st.composite
def _specs(draw):
    """A structured dtype from a small space, so that two draws often share everything but
    one detail: alignment, offsets, item size, titles, metadata, a nested struct, a subarray."""
    names = draw(_NAMES)
    formats = [draw(_FORMATS) for _ in names]
    if draw(st.booleans()):
        inner_names = draw(_NAMES)
        inner = np.dtype([(n, draw(_FORMATS)) for n in inner_names], align=draw(st.booleans()))
        formats[0] = inner
    if draw(st.booleans()):
        formats[-1] = (formats[-1], draw(st.sampled_from([(2,), (1, 2)])))
    spec: dict = {"names": names, "formats": formats}
    if draw(st.booleans()):
        spec["titles"] = [draw(st.sampled_from([None, "T", "U"])) for _ in names]
        if len({t for t in spec["titles"] if t is not None} | set(names)) < len(names) + len(
            [t for t in spec["titles"] if t is not None]
        ):
            spec.pop("titles")  # A title equal to a name or another title is refused.
    sizes = [np.dtype(f).itemsize for f in formats]
    if draw(st.booleans()):
        gaps = [draw(st.sampled_from([0, 1, 4])) for _ in names]
        offsets, at = [], 0
        for size, gap in zip(sizes, gaps):
            at += gap
            offsets.append(at)
            at += size
        spec["offsets"] = offsets
        spec["itemsize"] = at + draw(st.sampled_from([0, 3, 8]))
    kwargs: dict = {"align": draw(st.booleans())}
    if draw(st.booleans()):
        kwargs["metadata"] = {"k": draw(st.sampled_from([0, 1, 1.0, "1", (1,)]))}
    try:
        np.dtype(spec, **kwargs)  # pyright: ignore[reportCallIssue, reportArgumentType]
    except (ValueError, TypeError):
        assume(False)
    return spec, kwargs


def _build(spec_kwargs) -> np.dtype:
    spec, kwargs = spec_kwargs
    return np.dtype(spec, **kwargs)  # pyright: ignore[reportCallIssue, reportArgumentType]


_dtypes = _specs().map(_build)


def _observed(dt: np.dtype) -> tuple:
    return (
        repr(dt),
        str(dt.descr),
        dt.alignment,
        dt.isalignedstruct,
        dt.itemsize,
        repr(dt.metadata),
        dt.names,
        repr(dt.fields),
    )


@settings(max_examples=300, deadline=None)
@given(_dtypes, _dtypes)
def test_equal_keys_mean_the_same_dtype(a, b):
    if es.stable_key(a) == es.stable_key(b):
        assert _observed(a) == _observed(b)
    if es.stable_key(np.zeros(1, a)) == es.stable_key(np.zeros(1, b)):
        assert _observed(a) == _observed(b)


@settings(max_examples=100, deadline=None)
@given(_specs())
def test_a_dtype_made_again_has_the_same_key(spec_kwargs):
    # The description is a value: another dtype object made by the same call keys alike.
    a, b = _build(spec_kwargs), _build(spec_kwargs)
    assert _observed(a) == _observed(b)
    assert es.stable_key(a) == es.stable_key(b)
    assert es.stable_key(np.zeros(1, a)) == es.stable_key(np.zeros(1, b))
