"""The fallbacks for older JAX, Equinox and Python (`eqxstable/_compat.py`).

These run on every version: on the newest they check that the internal each fallback reads is
still where it is looked for (else keys silently fall back to identity, or every call retraces);
on the declared floors (`scripts/test-floors.sh`) they check the fallback itself.
"""

import logging
import types

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import pytest

import eqxstable as es
from eqxstable import _compat
from eqxstable._compat import (
    code_qualname,
    EXPLAINS_JIT_MISSES,
    flat_module_aux,
    jit_parts,
    LEGACY_MODULE_AUX,
    STORE_FRAMES,
)
from eqxstable._jit._node_data import node_data
from eqxstable._module._static import Static

from .helpers import count_traces, enable_x64


def body(x, n):
    return x * n


class WithStatic(eqx.Module):
    weight: jax.Array
    scale: object = eqx.field(static=True)
    name: str = eqx.field(static=True)


def test_jit_parts_reads_the_function_and_its_options():
    jitted = jax.jit(body, donate_argnums=0, static_argnums=1)
    parts = jit_parts(jitted)
    assert parts is not None
    fun, info = parts
    assert fun is body
    assert info.donate_argnums == (0,) and info.static_argnums == (1,)
    assert not es.stable_key(jitted).identity


def test_rebuilt_jax_jit_is_keyed_by_function_and_options():
    assert es.stable_key(jax.jit(body, static_argnums=1)) == es.stable_key(
        jax.jit(body, static_argnums=1)
    )
    assert es.stable_key(jax.jit(body, static_argnums=1)) != es.stable_key(
        jax.jit(body, static_argnums=1, donate_argnums=0)
    )


@pytest.mark.counts_traces
def test_rebuilt_jax_jit_as_a_static_does_not_retrace():
    traces = 0

    @es.filter_jit
    def apply(f, x):
        nonlocal traces
        traces += 1
        return f(x, 2)

    x = jnp.arange(3.0)
    assert (apply(jax.jit(body, static_argnums=1), x) == 2 * x).all()
    assert (apply(jax.jit(body, static_argnums=1), x) == 2 * x).all()
    assert traces == 1


def test_jit_parts_refuses_what_jax_jit_did_not_build():
    assert jit_parts(body) is None
    assert jit_parts(jax.vmap(body)) is None

    def fake_cache_miss():
        return fun, jit_info

    # Options found next to another function than `_fun` are not trusted.
    real = jit_parts(jax.jit(body))
    assert real is not None
    fun, jit_info = (lambda x, n: x), real[1]
    assert jit_parts(types.SimpleNamespace(_fun=body, _cache_miss=fake_cache_miss)) is None
    fun = body
    assert jit_parts(types.SimpleNamespace(_fun=body, _cache_miss=fake_cache_miss)) == real


def _module_aux(module):
    (data,) = [d for d in node_data(jtu.tree_structure(module), jtu.tree_leaves(module))]
    return data


def test_module_node_data_is_a_tuple_of_the_modules_own_objects():
    scale = object()
    module = WithStatic(jnp.ones(2), scale, "m")
    raw = jtu.tree_structure(module).node_data()[1]  # pyright: ignore
    # The fallback is active exactly where Equinox's own node data is not a plain tuple.
    assert (flat_module_aux is None) == (type(raw) is tuple)
    first, second = _module_aux(module), _module_aux(module)
    assert type(first) is tuple
    assert scale in first and "m" in first
    # Fresh per flatten, but item by item the very same objects: the jit cache's hit path.
    assert len(first) == len(second) and all(a is b for a, b in zip(first, second))


def test_a_modules_treedef_is_keyed_by_value():
    # A jitted module's static part holds its treedef, whose node data Equinox makes afresh per
    # flatten (a `_FlattenedData` before 0.13.3, keyed by its fields): two flattens are one key,
    # and a changed static field is another.
    raw = jtu.tree_structure(WithStatic(jnp.ones(2), 2, "m")).node_data()[1]  # pyright: ignore
    assert (LEGACY_MODULE_AUX is None) == (type(raw) is tuple)
    assert (LEGACY_MODULE_AUX is None) == (flat_module_aux is None)
    one = es.stable_key(jtu.tree_structure(WithStatic(jnp.ones(2), 2, "m")))
    # (The key holds the user's module class, which is keyed by identity and watched.)
    assert one == es.stable_key(jtu.tree_structure(WithStatic(jnp.zeros(3), 2, "m")))
    assert one != es.stable_key(jtu.tree_structure(WithStatic(jnp.ones(2), 3, "m")))
    assert one != es.stable_key(jtu.tree_structure(WithStatic(jnp.ones(2), 2.0, "m")))


@pytest.mark.parametrize(("old", "new", "retraces"), [(2, 2, False), (2, 3, True), (1, 1.0, True)])
@pytest.mark.counts_traces
def test_module_argument_retraces_only_when_a_static_field_changes(old, new, retraces):
    counter = count_traces(lambda m, x: m.weight * m.scale * x)
    apply = es.filter_jit(counter)
    x = jnp.arange(3.0)
    module = WithStatic(jnp.ones(3), old, "m")
    apply(module, x)
    apply(module, x)
    out = apply(WithStatic(jnp.full(3, 2.0, jnp.float32), new, "m"), x)
    assert counter.count == (2 if retraces else 1)
    assert (out == 2.0 * new * x).all() and out.dtype == jnp.float32


def test_a_converted_static_is_made_canonical_where_equinox_stores_it():
    # Equinox 0.13 stores a converter's result with `object.__setattr__`; older Equinox through
    # its initable class's `__setattr__`, which `STORE_FRAMES` lists.
    assert STORE_FRAMES is not None
    assert all("equinox" in code.co_filename for code in STORE_FRAMES)

    class Sizes(es.StableModule):
        sizes: list = eqx.field(static=True, converter=list)

    m = Sizes((1, 2))
    assert type(m.__dict__["sizes"]) is Static and m.sizes == [1, 2]
    # A static list reads back as one plain copy per module (`_module/_handed.py`): the next read
    # refuses a change to it, and the module keeps its canonical value.
    read = m.sizes
    assert type(read) is list and m.sizes is read
    read.append(3)
    with pytest.raises(TypeError, match="changed in place"):
        m.sizes  # noqa: B018
    read.pop()
    assert m.sizes == [1, 2]


class Outer:
    def method(self):
        def inner():
            pass

        return inner


def test_code_qualname_of_a_live_function():
    inner = Outer().method()
    assert code_qualname(inner.__code__) == inner.__qualname__
    assert code_qualname(inner.__code__).endswith("Outer.method.<locals>.inner")


def test_code_qualname_without_a_function():
    code = compile("def orphan():\n    pass\n", "<test>", "exec").co_consts[0]
    assert isinstance(code, types.CodeType)
    assert code_qualname(code) == "orphan"


def test_weak_convert_reads_jaxs_internal():
    # The tripwire: if JAX moves the function, dynamic fields fall back to strong types.
    assert _compat._CONVERT is not None
    x = _compat.weak_convert(jnp.asarray(2, dtype=jnp.int32), jnp.float32)
    assert x.dtype == jnp.float32 and x.weak_type
    # Weakly typed, it takes the other operand's dtype, as a Python float does.
    y = x * jnp.ones(2, dtype=jnp.bfloat16)
    assert y.dtype == jnp.bfloat16
    assert y.dtype == (2.0 * jnp.ones(2, dtype=jnp.bfloat16)).dtype


def test_weak_convert_falls_back_to_a_strong_conversion(monkeypatch):
    monkeypatch.setattr(_compat, "_CONVERT", None)
    x = _compat.weak_convert(jnp.asarray(2, dtype=jnp.int32), jnp.float32)
    assert x.dtype == jnp.float32 and not x.weak_type and float(x) == 2.0


def test_the_doctor_reads_jax_jit_misses_exactly_where_jax_explains_them():
    # The tripwire for `EXPLAINS_JIT_MISSES`: what JAX logs for a `jax.jit` miss, and when. The
    # doctor reads JAX >= 0.9's explanation (from `_LOGGER`, logged before the trace event that
    # names the function); the floor (JAX 0.5.3) logs from `jax._src.pjit` after the trace. If
    # either moves, the flag no longer says what JAX does and this fails.
    from eqxstable._doctor import _jax_jit

    seen: list[tuple[str, str]] = []
    listening = True

    class _Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            # JAX < 0.9 also explains its own functions (`jnp.ones`'s `broadcast_in_dim`).
            message = record.getMessage()
            if message.startswith("TRACING CACHE MISS") and "tripwire_fn" in message:
                seen.append(("log", record.name))

    def listener(event: str, duration_secs: float, **kwargs: str | int) -> None:
        if listening and event == "/jax/core/compile/jaxpr_trace_duration":
            seen.append(("trace", str(kwargs.get("fun_name"))))

    @jax.jit
    def tripwire_fn(x):
        return x * 2

    handler = _Collect()
    logging.getLogger("jax").addHandler(handler)
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        with jax.explain_cache_misses(True):
            tripwire_fn(jnp.ones(2))
            seen.clear()
            tripwire_fn(jnp.ones(3))  # a miss of a function JAX has seen: one explanation
    finally:
        listening = False
        logging.getLogger("jax").removeHandler(handler)
        unregister = getattr(jax.monitoring, "unregister_event_duration_listener", None)
        if unregister is not None:
            unregister(listener)
    (log,) = [i for i, (what, _) in enumerate(seen) if what == "log"]
    traces = [i for i, item in enumerate(seen) if item == ("trace", "tripwire_fn")]
    reads = seen[log][1] == _jax_jit._LOGGER and bool(traces) and log < traces[0]
    assert reads == EXPLAINS_JIT_MISSES, seen


def test_an_equations_context_keeps_its_settings_in_slots():
    # `jaxpr_key` keys an equation's context by its slots (JAX 0.5.3 makes a new context per
    # equation, with no `__eq__`); one with a `__dict__` would fall back to identity.
    (eqn,) = jax.make_jaxpr(lambda x: x + 1.0)(1.0).jaxpr.eqns
    assert not hasattr(eqn.ctx, "__dict__")
    slots = {name for c in type(eqn.ctx).__mro__ for name in c.__dict__.get("__slots__", ())}
    assert {"compute_type", "threefry_partitionable", "xla_metadata"} <= slots
    again = jax.make_jaxpr(lambda x: x + 1.0)(1.0)
    assert es.stable_key(again) == es.stable_key(jax.make_jaxpr(lambda x: x + 1.0)(1.0))


@pytest.mark.skipif(
    not hasattr(getattr(jax._src.stages, "Traced", None), "out_tree"),  # pyright: ignore
    reason="JAX < 0.6 has no `Traced.out_tree`: no reuse by fingerprint (every miss compiles)",
)
def test_the_program_fingerprint_reads_jaxs_trace_context():
    # The tripwire for reuse by fingerprint (`eqxstable/_jit/_fingerprint.py`): where JAX moves
    # `trace_context` or `trace_state_clean`, every miss compiles again (no wrong answer).
    from eqxstable._jit import _fingerprint

    assert _fingerprint.AVAILABLE
    assert _fingerprint.top_level()
    with enable_x64(True):
        with_x64 = _fingerprint.context()
    assert with_x64 != _fingerprint.context() and hash(with_x64) is not None


def test_the_fingerprint_leaves_out_the_rules_of_custom_derivatives():
    # `jax.nn.relu` is a `custom_jvp`, whose rule JAX wraps afresh on every trace: if JAX
    # renames the parameters `TRACE_ONLY` names, two equal traces get different fingerprints
    # (every miss compiles again) and this notices.
    from eqxstable._jit._fingerprint import key_of, TRACE_ONLY
    from eqxstable._keys._jaxpr import jaxpr_key

    @jax.custom_vjp
    def clip(x):
        return x

    clip.defvjp(lambda x: (x, None), lambda _, g: (g,))

    def make():
        return lambda x: clip(jax.nn.relu(x))

    keys = [jaxpr_key(jax.make_jaxpr(make())(jnp.ones(2)), key_of, TRACE_ONLY) for _ in range(2)]
    assert keys[0] is not None and keys[0] == keys[1]
    primitives = {e.primitive.name for e in jax.make_jaxpr(make())(jnp.ones(2)).jaxpr.eqns}
    assert primitives <= {name for name, _ in TRACE_ONLY}
    # Without leaving them out, the keys differ: the test above is not vacuous.
    assert jaxpr_key(jax.make_jaxpr(make())(jnp.ones(2)), key_of) != jaxpr_key(
        jax.make_jaxpr(make())(jnp.ones(2)), key_of
    )


def test_equinox_flatten_is_where_the_fingerprint_reads_it():
    # `_fingerprint.param_key` keys Equinox's `filter_primitive` `Flatten` by what it recorded;
    # if Equinox moves it, such traces are keyed by identity (no reuse, verify mode refuses the
    # programs of lineax's `linear_solve`): this test notices first.
    from eqxstable._jit import _fingerprint

    assert _fingerprint._Flatten is not None
    flatten = _fingerprint._Flatten()
    assert not flatten.called()
    flatten((1, None))
    assert flatten.called() and flatten.get() == (flatten.treedef_out, flatten.static_out)
