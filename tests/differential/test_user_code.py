"""Differential situations: user modules (also reloaded), notebooks that redefine a helper,
`functools.wraps` of a library function, and user `custom_vjp`/`custom_jvp` rules redefined."""

import functools as ft

import jax
import jax.numpy as jnp
import pytest

from .harness import check, MODES, Situations


SITUATIONS = Situations()


@SITUATIONS.add
def user_module_constant_set(h):
    """`mymodule.CONST` read through the module, then the attribute is set."""
    mod = h.write_module("CONST = 2.0\n")
    h.module(
        """
    h.call(lambda x: x * mod.CONST, jnp.ones(2))
    mod.CONST = 3.0
    h.call(lambda x: x * mod.CONST, jnp.ones(2))
    """,
        mod=mod,
    )


@SITUATIONS.add
def user_module_constant_reloaded(h):
    """`importlib.reload` after the file changed: the same module object, a new `CONST`."""
    mod = h.write_module("CONST = 2.0\n")
    f = lambda x: x * mod.CONST  # noqa: E731
    h.call(f, jnp.ones(2))
    h.rewrite_module(mod, "CONST = 5.0\n")
    h.call(f, jnp.ones(2))
    h.call(lambda x: x * mod.CONST, jnp.ones(2))


@SITUATIONS.add
def user_module_function_reloaded(h):
    """A function of a user module, called through the module, redefined by a reload."""
    mod = h.write_module("def scale(x):\n    return x * 2.0\n")
    h.call(lambda x: mod.scale(x) + 1.0, jnp.ones(2))
    h.rewrite_module(mod, "def scale(x):\n    return x * 3.0\n")
    h.call(lambda x: mod.scale(x) + 1.0, jnp.ones(2))


@SITUATIONS.add
def user_module_function_reads_its_constant(h):
    """`from mymodule import scale` once; `scale` reads the module's global, which changes."""
    mod = h.write_module("K = 2.0\ndef scale(x):\n    return x * K\n")
    scale = mod.scale
    h.call(scale, jnp.ones(2))
    mod.K = 4.0
    h.call(scale, jnp.ones(2))
    h.call(lambda x: scale(x), jnp.ones(2))


@SITUATIONS.add
def user_module_monkeypatched(h):
    """A user's module function replaced by assignment (as `monkeypatch.setattr` does)."""
    mod = h.write_module("def act(x):\n    return x * 2.0\n")
    h.call(lambda x: mod.act(x), jnp.ones(2))
    mod.act = lambda x: x - 10.0
    h.call(lambda x: mod.act(x), jnp.ones(2))


@SITUATIONS.add
def user_module_reloaded_then_reimported_name(h):
    """A notebook's `from mymodule import helper` re-run after a reload."""
    mod = h.write_module("def helper(x):\n    return x + 1.0\n")
    ns = h.module(
        "from {name} import helper\nloss = lambda x: helper(x) * 2.0\n".replace(
            "{name}", mod.__name__
        )
    )
    h.call(ns["loss"], jnp.ones(2))
    h.rewrite_module(mod, "def helper(x):\n    return x + 7.0\n")
    h.module(
        "from {name} import helper\nloss = lambda x: helper(x) * 2.0\n".replace(
            "{name}", mod.__name__
        ),
        namespace=ns,
    )
    h.call(ns["loss"], jnp.ones(2))


@SITUATIONS.add
def notebook_helper_redefined(h):
    """Cell 1 defines a helper, cell 2 `loss`; cell 1 is edited and both are re-run."""
    ns = h.module("def helper(x):\n    return x * 2.0\n", filename="<cell 1>")
    h.module("def loss(x):\n    return helper(x) + 1.0\n", namespace=ns, filename="<cell 2>")
    old_loss = ns["loss"]
    h.call(old_loss, jnp.ones(2))
    h.module("def helper(x):\n    return x * 3.0\n", namespace=ns, filename="<cell 1>")
    h.module("def loss(x):\n    return helper(x) + 1.0\n", namespace=ns, filename="<cell 2>")
    h.call(ns["loss"], jnp.ones(2))
    h.call(old_loss, jnp.ones(2))


@SITUATIONS.add
def notebook_constant_cell_rerun(h):
    ns = h.module("C = 2.0\ndef loss(x):\n    return x * C\n", filename="<cell 1>")
    h.call(ns["loss"], jnp.ones(2))
    h.module("C = 3.0\ndef loss(x):\n    return x * C\n", namespace=ns, filename="<cell 1>")
    h.call(ns["loss"], jnp.ones(2))


@SITUATIONS.add
def notebook_class_redefined(h):
    """A user class re-defined in a notebook cell: a new class with the same name."""
    cell = """
    class Act(eqx.Module):
        def __call__(self, x):
            return x * {k}
    """
    ns = h.module(cell.format(k=2.0))
    h.call(ns["Act"](), jnp.ones(2))
    h.module(cell.format(k=5.0), namespace=ns)
    h.call(ns["Act"](), jnp.ones(2))


@SITUATIONS.add
def notebook_method_redefined_on_class(h):
    """A method assigned onto an existing class (`Net.__call__ = ...`), instance kept."""
    ns = h.module("""
    class Net:
        def __call__(self, x):
            return x * 2.0
    net = Net()
    """)
    h.call(ns["net"], jnp.ones(2))
    h.module("Net.__call__ = lambda self, x: x * 9.0\n", namespace=ns)
    h.call(ns["net"], jnp.ones(2))


@SITUATIONS.add
def wraps_gelu_reads_a_global(h):
    """A user function decorated with `functools.wraps(jax.nn.gelu)`: its `__module__` says
    jax, yet it is user code reading a user global."""
    h.module("""
    @ft.wraps(jax.nn.gelu)
    def act(x):
        return x * scale

    for scale in (2.0, 3.0):
        h.call(lambda x: act(x), jnp.ones(2))
    """)


@SITUATIONS.add
def wraps_gelu_over_a_cell(h):
    """Two user closures, both wrapping `jax.nn.gelu`'s metadata, over different constants."""

    def make(k):
        @ft.wraps(jax.nn.gelu)
        def act(x):
            return x * k

        return act

    h.call(make(2.0), jnp.ones(2))
    h.call(make(3.0), jnp.ones(2))


@SITUATIONS.add
def wraps_gelu_same_function_global_rebound(h):
    h.module("""
    @ft.wraps(jax.nn.gelu)
    def act(x):
        return x * scale
    scale = 2.0
    h.call(act, jnp.ones(2))
    h.call(lambda x: act(x), jnp.ones(2))
    scale = 3.0
    h.call(act, jnp.ones(2))
    h.call(lambda x: act(x), jnp.ones(2))
    """)


def _grad_of_sum(fn, x):
    return jax.grad(lambda y: jnp.sum(fn(y)))(x)


@SITUATIONS.add
def custom_vjp_rule_redefined(h):
    """`f.defvjp(fwd, bwd)` called again with another backward rule on the same object."""

    @jax.custom_vjp
    def f(x):
        return x * 1.0

    def fwd(x):
        return f(x), None

    f.defvjp(fwd, lambda res, g: (g * 2.0,))
    h.call(f, jnp.ones(2), apply=_grad_of_sum)
    h.call(lambda x: f(x), jnp.ones(2), apply=_grad_of_sum)
    f.defvjp(fwd, lambda res, g: (g * 5.0,))
    h.call(f, jnp.ones(2), apply=_grad_of_sum)
    h.call(lambda x: f(x), jnp.ones(2), apply=_grad_of_sum)  # A new caller, as a rebuild makes.


@SITUATIONS.add
def custom_vjp_rebuilt_with_other_rule(h):
    """Two `custom_vjp` objects over the same primal code and different backward rules."""

    def primal(x):
        return x * 1.0

    for k in (2.0, 5.0):
        f = jax.custom_vjp(primal)
        f.defvjp(lambda x: (primal(x), None), lambda res, g, k=k: (g * k,))
        h.call(f, jnp.ones(2), apply=_grad_of_sum)


@SITUATIONS.add
def custom_vjp_backward_reads_a_global(h):
    h.module(
        """
    @jax.custom_vjp
    def f(x):
        return x * 1.0
    f.defvjp(lambda x: (f(x), None), lambda res, g: (g * gscale,))
    for gscale in (2.0, 3.0):
        h.call(lambda x: f(x), jnp.ones(2), apply=grad_of_sum)
    """,
        grad_of_sum=_grad_of_sum,
    )


@SITUATIONS.add
def custom_jvp_rule_redefined(h):
    @jax.custom_jvp
    def f(x):
        return jnp.sin(x)

    f.defjvp(lambda primals, tangents: (f(primals[0]), tangents[0] * 2.0))
    h.call(f, jnp.ones(2), apply=_grad_of_sum)
    h.call(lambda x: f(x), jnp.ones(2), apply=_grad_of_sum)
    f.defjvp(lambda primals, tangents: (f(primals[0]), tangents[0] * 7.0))
    h.call(f, jnp.ones(2), apply=_grad_of_sum)
    h.call(lambda x: f(x), jnp.ones(2), apply=_grad_of_sum)


@SITUATIONS.add
def custom_jvp_rule_reads_a_global(h):
    h.module(
        """
    @jax.custom_jvp
    def f(x):
        return jnp.sin(x)
    @f.defjvp
    def f_jvp(primals, tangents):
        return f(primals[0]), tangents[0] * tscale
    for tscale in (2.0, 3.0):
        h.call(lambda x: f(x), jnp.ones(2), apply=grad_of_sum)
    """,
        grad_of_sum=_grad_of_sum,
    )


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("situation", SITUATIONS, ids=lambda s: s.__name__)
def test_user_code(situation, mode):
    check(situation, mode)
