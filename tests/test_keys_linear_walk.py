"""What one key walks (`_keys/_context.py`, issue 18 point 6, issue 19 "the cost of a key is
bounded"): each object once, whatever the number of paths to it, and as deep as it goes.

An object in a cycle through an object above it (user functions reaching each other through
their globals, as lineax's do when it is run from its checkout) was walked again at every path
to it: 1,355 objects took 50,000 walks, the budget, so the key was equal to nothing and every
call traced again. It is now named by number when met again. An object deeper than 100 levels
(a linked list 150 nodes long) had a key equal to nothing; it is now walked from the top in cuts,
so the same unchanged object hits and an equal chain of tuples shares."""

import dataclasses
import importlib.util
import sys
from typing import Any

import jax.numpy as jnp
import pytest
from hypothesis import given, settings, strategies as st

import eqxstable as es
from eqxstable._keys import compute, too_many_objects

from .helpers import started_walks


def _chain(depth: int, leaf: Any = 0.5, box: Any = lambda v, n: (v, n)) -> Any:
    node = None
    for i in range(depth):
        node = box(leaf if i == 0 else i, node)
    return node


def _make(node: Any) -> Any:
    def f(x):
        # The deepest leaf, found at trace time.
        n = node
        while n[1] is not None:
            n = n[1]
        return x + n[0]

    return f


@pytest.mark.counts_traces
def test_a_closure_over_a_deep_tuple_chain_hits_and_shares():
    traces = 0

    def make(node):
        inner = _make(node)

        def f(x):
            nonlocal traces
            traces += 1
            return inner(x)

        return f

    node = _chain(150)
    f = es.filter_jit(make(node))
    for _ in range(3):
        assert float(f(jnp.float32(1.0))) == 1.5
    assert traces == 1
    # An equal chain rebuilt: a chain of tuples cannot change, so it shares the program.
    assert float(es.filter_jit(make(_chain(150)))(jnp.float32(2.0))) == 2.5
    assert traces == 1
    # Another deepest leaf: another program.
    assert float(es.filter_jit(make(_chain(150, 0.25)))(jnp.float32(2.0))) == 2.25
    assert traces == 2


@pytest.mark.counts_traces
def test_a_deep_list_chain_as_a_static_closure_hits_until_it_changes():
    traces = 0

    def apply(x, fn):
        nonlocal traces
        traces += 1
        return fn(x)

    node = _chain(150, box=lambda v, n: [v, n])
    fn = _make(node)
    jitted = es.filter_jit(apply)
    for _ in range(3):
        assert float(jitted(jnp.float32(1.0), fn)) == 1.5
    assert traces == 1
    # The deepest list changed in place, 150 levels down: seen, traced again.
    last = node
    while last[1] is not None:
        last = last[1]
    last[0] = 0.75
    assert float(jitted(jnp.float32(1.0), fn)) == 1.75
    assert traces == 2
    assert float(jitted(jnp.float32(1.0), fn)) == 1.75
    assert traces == 2
    # An equal list chain rebuilt is another object (it can change apart): another trace.
    rebuilt = _make(_chain(150, 0.75, box=lambda v, n: [v, n]))
    assert float(jitted(jnp.float32(1.0), rebuilt)) == 1.75
    assert traces == 3


def test_a_very_deep_chain_never_recurses_past_the_limit():
    node = _chain(5 * sys.getrecursionlimit())
    key, watch = compute(node)
    assert not too_many_objects(key) and watch.valid()
    assert key == compute(_chain(5 * sys.getrecursionlimit()))[0]
    assert key != compute(_chain(5 * sys.getrecursionlimit(), 0.25))[0]


def _write_module(tmp_path: Any, name: str, n: int) -> Any:
    """`n` user functions, each calling the next two and the last calling the first: every one
    in a cycle, reached by a number of paths that grows as Fibonacci's."""
    lines = []
    for i in range(n):
        calls = " + ".join(f"f{j}(x - 1)" for j in (i + 1, i + 2) if j < n) or "f0(x - 1)"
        lines.append(f"def f{i}(x):\n    return x if x <= 0 else {calls}\n")
    path = tmp_path / f"{name}.py"
    path.write_text("\n".join(lines))
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.counts_traces
def test_functions_reaching_each_other_cost_what_they_are(tmp_path, monkeypatch):
    # 40 functions: about 10**8 paths, 40 objects. Walked by path, the key ran past the budget,
    # was equal to nothing and every call traced again.
    module = _write_module(tmp_path, "eqxstable_linear_walk_fib", 40)
    walks = started_walks(monkeypatch)
    key, watch = compute(module.f0)
    # Each function (and what it holds) walked once: linear in the 40, never in the paths.
    assert 40 <= sum(w.walked for w in walks) <= 10 * 40
    assert not too_many_objects(key) and watch.valid()
    assert compute(module.f0)[0] == key
    traces = 0

    def apply(x, fn):
        nonlocal traces
        traces += 1
        return x + fn(0)

    jitted = es.filter_jit(apply)
    for _ in range(3):
        assert float(jitted(jnp.float32(1.0), module.f0)) == 1.0
    assert traces == 1
    # A global rebound, many paths away: seen.
    module.f39 = lambda x: 2.0
    assert compute(module.f0)[0] != key


@dataclasses.dataclass(frozen=True)
class _Node:
    label: Any
    out: tuple = ()


def _graph(labels: list, edges: list) -> _Node:
    """Frozen nodes wired after they are made (cycles, shared nodes): node 0 is the root."""
    nodes = [_Node(label) for label in labels]
    for node, out in zip(nodes, edges):
        object.__setattr__(node, "out", tuple(nodes[j] for j in out))
    return nodes[0]


def _bisimilar(a: _Node, b: _Node) -> bool:
    """Whether the two graphs unfold to the same tree from their roots (labels by exact type
    and value, children in order): what equal keys must imply."""
    pairs, done = [(a, b)], set()
    while pairs:
        x, y = pairs.pop()
        if (id(x), id(y)) in done:
            continue
        done.add((id(x), id(y)))
        if type(x.label) is not type(y.label) or x.label != y.label or len(x.out) != len(y.out):
            return False
        pairs.extend(zip(x.out, y.out))
    return True


def _exact(spec: tuple) -> tuple:
    # `1 == 1.0` and `0.0 == -0.0`: the labels by exact type and text.
    labels, edges = spec
    return [(type(x), repr(x)) for x in labels], edges


@st.composite
def _graphs(draw: Any) -> tuple:
    # A backbone 0 -> 1 -> ... (deeper than `MAX_DEPTH` at times), with edges to any node:
    # shared nodes, cycles through the root and through nodes in between.
    n = draw(st.integers(1, 260))
    labels = draw(st.lists(st.sampled_from([0, 1, 1.0, -0.0, 0.0, "a"]), min_size=n, max_size=n))
    edges = []
    for i in range(n):
        extra = draw(st.lists(st.integers(0, n - 1), max_size=2))
        edges.append(([i + 1] if i + 1 < n else []) + extra)
    return labels, edges


@settings(max_examples=60, deadline=None)
@given(_graphs(), _graphs())
def test_equal_keys_are_equal_graphs(one, two):
    a, b = _graph(*one), _graph(*two)
    ka, wa = compute(a)
    kb, _ = compute(b)
    assert not too_many_objects(ka) and wa.valid()
    # The same graph built again: the same key (a rebuilt structure shares its program).
    assert compute(_graph(*one))[0] == ka
    if ka == kb:
        assert _bisimilar(a, b)
    if _exact(one) == _exact(two):
        assert ka == kb


@settings(max_examples=30, deadline=None)
@given(_graphs(), st.data())
def test_a_rewired_edge_is_another_key(one, data):
    # One more edge anywhere (every node is on the backbone): another graph, another key.
    labels, edges = one
    i = data.draw(st.integers(0, len(labels) - 1))
    j = data.draw(st.integers(0, len(labels) - 1))
    rewired = [list(e) for e in edges]
    rewired[i].append(j)
    a, b = _graph(labels, edges), _graph(labels, rewired)
    assert not _bisimilar(a, b)
    assert compute(a)[0] != compute(b)[0]


def test_a_shared_tower_stays_fast(monkeypatch):
    # `node = [node, node]` 30 levels: 31 lists, 2**30 paths.
    node: list = []
    for _ in range(30):
        node = [node, node]
    walks = started_walks(monkeypatch)
    key, watch = compute(lambda x: (x, node))
    # Each list walked once (and the function): never once per path.
    assert 31 <= sum(w.walked for w in walks) <= 2 * 31
    assert not too_many_objects(key) and watch.valid()
