"""A miss costs a trace, not a compile (issue 20): a new cache entry whose trace produced a
program already compiled (the same jaxpr by value, input types, shardings, donation, JAX
configuration) runs that program. Counted with JAX's compile log (the `compiles` fixture, which
starts each test with no compiled program to find) and `cache_info().compiles`; every result is
checked against eager JAX or Equinox."""

import itertools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import eqxstable as es
from eqxstable._jit._fingerprint import AVAILABLE

from .helpers import enable_x64


# On a JAX without what the fingerprint reads (jax 0.5: no `Traced.out_tree`) every miss
# compiles, as before: nothing here applies (`tests/test_compat.py` notices on newer JAX).
pytestmark = pytest.mark.skipif(not AVAILABLE, reason="no reuse by fingerprint on this JAX")


def _closure(d):
    def f(x):
        return x * d["a"] + jax.nn.relu(x)

    return f


@pytest.mark.counts_traces
def test_rebuilt_closures_over_equal_fresh_dicts_compile_once(compiles):
    wrappers = [es.filter_jit(_closure({"a": 2.0})) for _ in range(5)]
    outs = [float(w(jnp.asarray(-1.0))) for w in wrappers]
    assert outs == [-2.0] * 5
    assert compiles.count("f") == 1
    # Each wrapper traced once (identity-keyed dicts), four of them ran the first's program.
    infos = [w.cache_info() for w in wrappers]
    assert [(i.traces, i.compiles) for i in infos] == [(1, 1)] + [(1, 0)] * 4
    first, *reused = [w.misses[0] for w in wrappers]
    assert first.compiled and first.saved_seconds == 0.0
    assert all(not m.compiled and m.saved_seconds > 0 for m in reused)
    # Their reasons say what happened: traced, not compiled.
    assert first.reason.endswith("traced and compiled.")
    assert all(m.reason.endswith("which it ran (no compile).") for m in reused)
    # A changed value traces to another jaxpr: compiled again, with the right answer.
    changed = es.filter_jit(_closure({"a": 3.0}))
    assert float(changed(jnp.asarray(-1.0))) == -3.0
    assert compiles.count("f") == 2
    assert changed.cache_info().compiles == 1
    # The guests' next calls are plain hits.
    assert float(wrappers[3](jnp.asarray(2.0))) == 6.0
    assert wrappers[3].cache_info()[:2] == (1, 1)


def _sweep(jit, lrs, steps=3):
    """A learning-rate sweep as a new user writes it: the model, the optimizer and the step are
    rebuilt for each trial."""
    results, made = [], []
    x = jnp.linspace(-1.0, 1.0, 16).reshape(8, 2)
    y = jnp.sum(x**2, axis=1, keepdims=True)
    for lr in lrs:
        model = eqx.nn.MLP(2, 1, 8, 2, key=jax.random.PRNGKey(0))
        optim = optax.inject_hyperparams(optax.adam)(learning_rate=lr)
        opt_state = optim.init(eqx.filter(model, eqx.is_array))

        @jit
        def step(model, opt_state, x, y):
            def loss_fn(model):
                return jnp.mean((jax.vmap(model)(x) - y) ** 2)

            loss, grads = eqx.filter_value_and_grad(loss_fn)(model)
            params = eqx.filter(model, eqx.is_array)
            updates, opt_state = optim.update(grads, opt_state, params)
            return eqx.apply_updates(model, updates), opt_state, loss

        losses = []
        for _ in range(steps):
            model, opt_state, loss = step(model, opt_state, x, y)
            losses.append(float(loss))
        results.append((losses[-1], jax.tree.leaves(eqx.filter(model, eqx.is_array))))
        made.append(step)
    return results, made[-1]


@pytest.mark.counts_traces
def test_an_inject_hyperparams_sweep_compiles_once(compiles):
    lrs = (1e-3, 1e-2, 1e-1)
    stable, last = _sweep(es.filter_jit, lrs)
    assert compiles.count("step") == 1
    assert last.cache_info().compiles == 0 and last.cache_info().traces == 1
    reference, _ = _sweep(eqx.filter_jit, lrs)
    for (loss, leaves), (ref_loss, ref_leaves) in zip(stable, reference):
        assert loss == ref_loss
        for a, b in zip(leaves, ref_leaves):
            np.testing.assert_array_equal(a, b)
    # The learning rates did differ.
    assert len({loss for loss, _ in stable}) == 3


def _scale(c):
    return lambda x: x * c


@pytest.mark.parametrize(
    "first, second",
    [
        # A constant baked into the jaxpr, by its bits.
        (lambda: (_scale(2.0), jnp.ones(3)), lambda: (_scale(3.0), jnp.ones(3))),
        (
            lambda: (_scale(jnp.arange(3.0)), jnp.ones(3)),
            lambda: (_scale(jnp.arange(3.0) + 1), jnp.ones(3)),
        ),
        # Shape, dtype and weak type of an input.
        (lambda: (_scale(2.0), jnp.ones(3)), lambda: (_scale(2.0), jnp.ones(4))),
        (lambda: (_scale(2.0), jnp.ones(3)), lambda: (_scale(2.0), jnp.ones(3, jnp.bfloat16))),
        (
            lambda: (_scale(2.0), jnp.asarray(1.0)),
            lambda: (_scale(2.0), jnp.asarray(1.0, jnp.float32) * 1),
        ),
    ],
    ids=["literal", "constant-array", "shape", "dtype", "weak-type"],
)
def test_different_programs_never_share(first, second):
    # Wrappers of equivalent functions share one program by key; start with none.
    es.clear_caches()
    wrappers = [es.filter_jit(lambda fn, x: fn(x)) for _ in range(2)]
    for wrapper, (fn, x) in zip(wrappers, (first(), second())):
        out = wrapper(fn, x)
        expected = fn(x)
        assert out.dtype == expected.dtype and out.shape == expected.shape
        assert jax.typeof(out).weak_type == jax.typeof(expected).weak_type
        np.testing.assert_array_equal(out, expected)
        assert wrapper.cache_info()[:2] == (0, 1)
        assert wrapper.cache_info().compiles == 1


def test_weak_and_strong_inputs_do_not_share():
    # A weakly typed scalar times a bfloat16 array stays bfloat16; a strong float32 promotes.
    wrappers = [es.filter_jit(lambda a, b: a * b) for _ in range(2)]
    b = jnp.ones(2, jnp.bfloat16)
    weak = wrappers[0](jnp.asarray(2.0), b)
    strong = wrappers[1](jnp.asarray(2.0, jnp.float32) * 1, b)
    assert weak.dtype == jnp.bfloat16 and strong.dtype == jnp.float32
    assert [w.cache_info().compiles for w in wrappers] == [1, 1]


def test_donation_does_not_share(compiles):
    def double(x):
        return 2 * x

    kept = es.filter_jit(double)
    donated = es.filter_jit(lambda x: 2 * x, donate="all")
    assert kept(jnp.ones(3)).tolist() == [2.0] * 3
    assert donated(jnp.ones(3)).tolist() == [2.0] * 3
    assert donated.cache_info().compiles == 1


def test_x64_does_not_share():
    wrappers = [es.filter_jit(lambda x: x + 1) for _ in range(2)]
    assert wrappers[0](np.ones(2)).dtype == jnp.float32
    with enable_x64(True):
        assert wrappers[1](np.ones(2)).dtype == jnp.float64
    assert [w.cache_info().compiles for w in wrappers] == [1, 1]


def test_two_different_functions_share_a_program(compiles):
    def f(x):
        return jnp.sin(x) * 2

    def g(y):
        return jnp.sin(y) * 2

    jf, jg = es.filter_jit(f), es.filter_jit(g)
    assert jf(jnp.ones(2)).tolist() == jg(jnp.ones(2)).tolist()
    assert compiles.count("f") == 1 and compiles.count("g") == 0
    rows = {line.split()[0]: line.split() for line in es.report().splitlines()[2:]}
    # calls, hits, misses, compiles
    assert rows[jg.name][1:5] == ["1", "0", "1", "0"]
    assert rows[jf.name][1:5] == ["1", "0", "1", "1"]


def test_non_array_outputs_come_from_the_program_they_match():
    # The output's non-array parts are part of the fingerprint: a different one compiles.
    outs = [es.filter_jit(lambda x, t=tag: (x + 1, t))(jnp.ones(2)) for tag in ("a", "b", "a")]
    assert [t for _, t in outs] == ["a", "b", "a"]


@pytest.mark.parametrize(
    "first, second",
    [
        (
            lambda: np.dtype([("a", "f4"), ("b", "f4")]),
            lambda: np.dtype([("c", "i4"), ("d", "i4")]),
        ),
        (lambda: np.dtype("f4", metadata={"unit": "m"}), lambda: np.dtype("f4", metadata={"u": 1})),
        (lambda: np.dtype(("f4", (2,))), lambda: np.dtype(("i4", (2,)))),
        (lambda: np.dtype(("f4", (2,))), lambda: np.dtype("V8")),
        (lambda: frozenset([8, 16]), lambda: frozenset([16, 8])),
    ],
    ids=["structured", "metadata", "subarray", "subarray-void", "frozenset-order"],
)
def test_a_guest_returns_its_own_non_array_outputs(first, second):
    # Equal jaxprs, non-array outputs that a loose key would take as the same: the second call
    # must return its own, exactly (field names, metadata, iteration order).
    wrapper = es.filter_jit(lambda x, s: (x * 2, s))
    x = jnp.ones(2)
    for make in (first, second):
        static = make()
        out = wrapper(x, static)[1]
        assert out == static and type(out) is type(static)
        if isinstance(static, frozenset):
            assert list(out) == list(static)
        else:
            assert out.metadata == static.metadata and out.names == static.names


def _returns_dict(keys):
    box = [keys]  # A closure over a new list: a key of its own, the same trace.

    def f(x):
        return {k: x * (i + 1) for i, k in enumerate(box[0])}

    return f


def test_rebuilt_functions_returning_dicts_share_a_program(compiles):
    # JAX hands out a dict node's keys as a new list each time: the program is found by them.
    x = jnp.ones(2)
    for _ in range(3):
        out = es.filter_jit(_returns_dict(("loss", "y")))(x)
        assert list(out) == ["loss", "y"] and np.array_equal(out["y"], 2 * x)
    assert compiles.count("f") == 1
    # Keys equal by `==` but of other types make other outputs: never shared.
    for k in (1, 1.0, True):
        ((got, value),) = es.filter_jit(_returns_dict((k,)))(x).items()
        assert type(got) is type(k) and np.array_equal(value, x)
    assert compiles.count("f") == 4


@pytest.mark.parametrize("keys", [(1, 1.0), (1.0, True), (True, 1), (0.0, -0.0)])
def test_a_guest_returns_its_own_key_paths(keys):
    # JAX's `==` calls `DictKey(1)` and `DictKey(1.0)` equal; the key level keeps the two calls
    # apart, and their equal jaxprs must not hand the second the first's key path.
    def paths(tree):
        leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
        return [(path, 2 * v) for path, v in leaves]

    wrapper = es.filter_jit(paths)
    x = jnp.ones(2)
    for k in keys:
        (got,) = wrapper({k: x})[0][0]
        (want,) = paths({k: x})[0][0]
        assert type(got.key) is type(want.key) and str(got.key) == str(want.key)


def test_a_guest_at_a_new_shape_traces_its_own_objects():
    # Two closures that agree at one shape and not at another: the second reuses the first's
    # program where their traces are equal, and traces its own objects everywhere else.
    def make(d):
        def f(x):
            return x * (d["big"] if x.shape[0] > 2 else d["small"])

        return f

    f1 = es.filter_jit(make({"small": 1.0, "big": 2.0}))
    f2 = es.filter_jit(make({"small": 1.0, "big": 5.0}))
    f3 = es.filter_jit(make({"small": 1.0, "big": 7.0}))
    assert f1(jnp.ones(2)).tolist() == [1.0, 1.0]
    assert f2(jnp.ones(2)).tolist() == [1.0, 1.0]
    assert f3(jnp.ones(2)).tolist() == [1.0, 1.0]
    assert (f2.cache_info().compiles, f3.cache_info().compiles) == (0, 0)
    # A guest, then the owner, at a new shape: each traces its own objects.
    assert f2(jnp.ones(3)).tolist() == [5.0] * 3
    assert f1(jnp.ones(3)).tolist() == [2.0] * 3
    assert f3(jnp.ones(3)).tolist() == [7.0] * 3
    assert f2(jnp.ones(2)).tolist() == [1.0, 1.0]
    assert f1(jnp.ones(2)).tolist() == [1.0, 1.0]
    assert f3(jnp.ones(2)).tolist() == [1.0, 1.0]


def test_a_guest_under_a_gradient_uses_its_own_rule():
    # Equal primal programs, different `custom_jvp` rules: the rule only matters to a
    # transformation, which must see the guest's own.
    def make(k):
        @jax.custom_jvp
        def g(x):
            return jnp.sin(x)

        g.defjvp(lambda primals, tangents: (jnp.sin(primals[0]), k * tangents[0]))
        return lambda x: g(x)

    first = es.filter_jit(make(2.0))
    second = es.filter_jit(make(7.0))
    x = jnp.asarray(0.5)
    assert float(first(x)) == float(second(x)) == float(jnp.sin(x))
    assert second.cache_info().compiles == 0
    assert float(jax.grad(second)(x)) == 7.0
    assert float(jax.grad(first)(x)) == 2.0
    assert float(jax.jit(jax.grad(second))(x)) == 7.0


@pytest.mark.parametrize("retrace_first", ["guest", "owner"])
def test_after_jax_clear_caches_a_guest_traces_its_own_objects(retrace_first):
    # The guest's call that JAX traces again (its caches were cleared) must not be filed as
    # the owner's trace: a gradient through the owner then uses the owner's rule.
    def make(k):
        @jax.custom_jvp
        def g(x):
            return jnp.sin(x)

        g.defjvp(lambda primals, tangents: (jnp.sin(primals[0]), k * tangents[0]))
        return g

    # A token of an earlier test with the same fingerprint, traced again since, takes no guests.
    es.clear_caches()
    owner, guest = make(2.0), make(7.0)
    wrapper = es.filter_jit(lambda x, g: g(x))
    x = jnp.asarray(0.5)
    assert float(wrapper(x, owner)) == float(wrapper(x, guest)) == float(jnp.sin(x))
    assert wrapper.cache_info().compiles == 1
    jax.clear_caches()
    first, second = (guest, owner) if retrace_first == "guest" else (owner, guest)
    assert float(wrapper(x, first)) == float(wrapper(x, second)) == float(jnp.sin(x))
    assert float(jax.grad(lambda x: wrapper(x, owner))(x)) == 2.0
    assert float(jax.grad(lambda x: wrapper(x, guest))(x)) == 7.0


@pytest.mark.counts_traces
@pytest.mark.parametrize("later_owner_calls", [1, 2])
def test_after_jax_clear_caches_a_guest_never_runs_its_owners_new_trace(later_owner_calls):
    # Each function reads its own counter while traced (identity-keyed: two entries), and their
    # first traces are equal, so the second is a guest. Once JAX dropped the trace, the owner's
    # call traces again under the shared token and reads its counter's new state: the guest's
    # next call must trace its own objects (as under Equinox), never run that new program.
    es.clear_caches()
    c1, c2 = itertools.count(0), itertools.count(0)
    t1 = t2 = 0

    def f1(x):
        nonlocal t1
        t1 += 1
        return x + next(c1)

    def f2(x):
        nonlocal t2
        t2 += 1
        return x + next(c2)

    w1, w2 = es.filter_jit(f1), es.filter_jit(f2)
    x = jnp.zeros(2)
    assert float(w1(x)[0]) == float(w2(x)[0]) == 0.0
    assert (w1.cache_info().compiles, w2.cache_info().compiles) == (1, 0)
    assert (t1, t2) == (1, 1)
    jax.clear_caches()
    next(c1)  # Advanced elsewhere: the owner's next trace reads 2.
    for _ in range(later_owner_calls):
        assert float(w1(x)[0]) == 2.0
    assert (t1, t2) == (2, 1)
    assert float(w2(x)[0]) == 1.0
    assert (t1, t2) == (2, 2)
    # From then on both are hits of their own programs.
    assert float(w1(x)[0]) == 2.0 and float(w2(x)[0]) == 1.0
    assert (t1, t2) == (2, 2)


def test_verify_mode_accepts_a_reused_program():
    wrappers = [es.filter_jit(_closure({"a": 2.0}), verify=True) for _ in range(2)]
    for w in wrappers:
        assert float(w(jnp.asarray(1.0))) == 3.0
        assert float(w(jnp.asarray(2.0))) == 6.0
    assert wrappers[1].cache_info().compiles == 0


def test_cache_clear_drops_the_programs_a_later_miss_would_reuse(compiles):
    first = es.filter_jit(_closure({"a": 2.0}))
    assert float(first(jnp.asarray(1.0))) == 3.0
    first.cache_clear()
    second = es.filter_jit(_closure({"a": 2.0}))
    assert float(second(jnp.asarray(1.0))) == 3.0
    assert second.cache_info().compiles == 1
    assert compiles.count("f") == 2
