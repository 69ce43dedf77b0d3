"""A `StableModule` keeps the very list, dict, partial or changeable node a non-static field was
given, as an `equinox.Module` does (attack round 12a, finding 04): a copy holding the canonical
function missed the user's later `stages["b"] = f`, eagerly and under jit. A plain list's or
dict's functions are made canonical where they are, so rebuilt models still share a program.
Immutable containers (tuples, NamedTuples, `eqx.Module` sub-fields) still get the canonical
function, so rebuilt models keep sharing one program under plain `equinox.filter_jit`.
`es.stabilize` returns a new tree, as `jax.tree.map` does, so it copies a list or dict whose
items become canonical."""

import collections
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import pytest
from hypothesis import given, settings, strategies as st

import eqxstable as es

from .helpers import count_traces, counting_filter_jit


def _scale(s):
    return lambda x: x * s


def _shift(s):
    return lambda x, k=0.0: x * s + k


def _apply(c: Any, x):
    if isinstance(c, (list, tuple)):
        for f in c:
            x = f(x)
        return x
    if isinstance(c, dict):
        for k in sorted(c):
            x = c[k](x)
        return x
    return c(x)  # A partial.


def _container(kind: str, s: float) -> Any:
    if kind == "list":
        return [_scale(s)]
    if kind == "dict":
        return {"a": _scale(s)}
    if kind == "ordered":
        return collections.OrderedDict(a=_scale(s))
    if kind == "defaultdict":
        return collections.defaultdict(int, a=_scale(s))
    return jtu.Partial(_shift(s))  # Its function in the structure, as a static value.


def _mutate(c: Any, how: str) -> None:
    if isinstance(c, jtu.Partial):
        # A partial's own dict of keywords, changed in place.
        c.keywords["k"] = 1.0 if how == "add" else 4.0
        return
    new = _scale(3.0)
    if isinstance(c, list):
        if how == "add":
            c.append(new)
        else:
            c[0] = new
    elif how == "add":
        c["b"] = new
    else:
        c["a"] = new


class _Sub(eqx.Module):
    stages: Any

    def __call__(self, x):
        return _apply(self.stages, x)


def _place(c: Any, where: str) -> Any:
    if where == "field":
        return c
    if where == "tuple":
        return (c,)
    return _Sub(c)  # A plain module's field, inside the `StableModule`.


def _read(v: Any, where: str, x):
    if where == "field":
        return _apply(v, x)
    if where == "tuple":
        return _apply(v[0], x)
    return v(x)


class Stable(es.StableModule):
    held: Any
    where: str = eqx.field(static=True)

    def __call__(self, x):
        return _read(self.held, self.where, x)


class Plain(eqx.Module):
    held: Any
    where: str = eqx.field(static=True)

    def __call__(self, x):
        return _read(self.held, self.where, x)


_KINDS = ["list", "dict", "ordered", "defaultdict", "partial"]


@settings(max_examples=40)
@given(
    kind=st.sampled_from(_KINDS),
    where=st.sampled_from(["field", "tuple", "module"]),
    how=st.sampled_from(["add", "replace"]),
)
def test_a_later_change_to_the_given_container_is_seen(kind, where, how):
    x = jnp.ones(2)
    # An earlier model of the sweep, kept: its function is canonical.
    first = Stable(_place(_container(kind, 2.0), where), where)
    c = _container(kind, 2.0)
    m, p = Stable(_place(c, where), where), Plain(_place(c, where), where)
    assert float(m(x)[0]) == float(p(x)[0]) == 2.0
    _mutate(c, how)
    want = float(p(x)[0])
    assert float(m(x)[0]) == want
    assert float(eqx.filter_jit(lambda mod, x: mod(x))(m, x)[0]) == want
    assert float(es.filter_jit(lambda mod, x: mod(x))(m, x)[0]) == want
    held = m.held if where == "field" else m.held[0] if where == "tuple" else m.held.stages
    assert held is c
    assert float(first(x)[0]) == 2.0


def test_the_given_dict_is_held_under_jit_after_a_change():
    x = jnp.ones(2)
    first = Stable({"a": _scale(2.0)}, "field")
    stages = {"a": _scale(2.0)}
    m = Stable(stages, "field")
    run = eqx.filter_jit(lambda mod, x: mod(x))
    assert float(run(m, x)[0]) == 2.0
    stages["b"] = _scale(3.0)
    assert float(run(m, x)[0]) == 6.0
    assert m.held is stages
    assert float(run(first, x)[0]) == 2.0


class _Pair(NamedTuple):
    f: Any
    g: Any


class Shared(es.StableModule):
    mlp: eqx.nn.MLP
    layers: tuple
    pair: _Pair
    sub: _Sub

    def __call__(self, x):
        return self.sub(self.pair.g(self.pair.f(self.layers[0](self.mlp(x)))))


def _shared() -> Shared:
    mlp = eqx.nn.MLP(2, 2, 4, 2, activation=_scale(0.5), key=jax.random.key(0))
    return Shared(mlp, (_scale(2.0),), _Pair(_scale(3.0), _scale(4.0)), _Sub((_scale(5.0),)))


def test_immutable_containers_still_share_under_plain_filter_jit():
    run, traces = counting_filter_jit(lambda m, x: m(x))

    a, b = _shared(), _shared()
    assert a.mlp.activation is b.mlp.activation
    assert a.layers[0] is b.layers[0]
    assert a.pair.f is b.pair.f and a.pair.g is b.pair.g
    assert a.sub.stages[0] is b.sub.stages[0]
    x = jnp.ones(2)
    assert jnp.array_equal(run(a, x), run(b, x))
    assert traces() == 1


@pytest.mark.counts_traces
@pytest.mark.parametrize("container", [list, dict])
def test_a_rebuilt_list_or_dict_field_keeps_sharing_and_is_the_users_own(container):
    # The user's own list or dict, its functions made canonical where they are (`intern`: an
    # equivalent object): plain `eqx.filter_jit` sees one program for rebuilt modules, and the
    # module still follows a later change to the container.
    run_plain, plain_traces = counting_filter_jit(lambda m, x: m(x))
    stable = count_traces(lambda m, x: m(x))
    run_stable = es.filter_jit(stable)
    x = jnp.ones(2)
    given: Any = None
    m: Any = None
    for _ in range(2):
        given = [_scale(2.0)] if container is list else {0: _scale(2.0)}
        m = Stable(given, "field")
        assert m.held is given
        assert float(run_plain(m, x)[0]) == float(run_stable(m, x)[0]) == 2.0
    assert plain_traces() == 1
    assert stable.count == 1
    given[0] = _scale(3.0)  # A later change: followed, eagerly and under both jits.
    assert float(m(x)[0]) == float(run_plain(m, x)[0]) == float(run_stable(m, x)[0]) == 3.0


def test_stabilize_returns_new_containers_as_tree_map_does():
    x = jnp.ones(2)
    first = es.stabilize(Plain([_scale(2.0)], "field"))  # Kept: its function is canonical.
    stages = [_scale(2.0)]
    s = es.stabilize(Plain(stages, "field"))
    assert s.held is not stages  # A new list holding the canonical function.
    stages.append(_scale(3.0))
    assert float(s(x)[0]) == 2.0  # A snapshot, as `jax.tree.map(lambda f: f, stages)`.
    mapped = jax.tree.map(lambda f: f, Plain(stages, "field"))
    assert mapped.held is not stages
    # An unchanged container (nothing to substitute) is returned as it is.
    again = es.stabilize(s)
    assert again.held is s.held
    assert s.held[0] is first.held[0]


def test_a_partial_with_keywords_is_kept():
    x = jnp.ones(2)
    first = Stable(jtu.Partial(_shift(2.0), k=0.0), "field")  # Its function is canonical.
    p = jtu.Partial(_shift(2.0), k=0.0)
    m = Stable(p, "field")
    assert m.held is p
    p.keywords["k"] = 1.0
    assert float(m(x)[0]) == 3.0
    assert float(first(x)[0]) == 2.0
