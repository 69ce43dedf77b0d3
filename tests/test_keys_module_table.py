"""`sys.modules` read by a function is never walked (`_library_mutable.dict_`, `K-impure-library`;
attack finding 7a-07).

`sys.modules[__name__].LR`, a common way to look a name up at run time, keyed `sys.modules` as a
dict: every module's every name, and each module's dict watched. A loop variable of the script
rebound each step changed `__main__`'s dict, so every call walked all the modules again (about
25 ms a call, growing with the modules imported; Equinox 0.05 ms) and, as the key held library
state, traced again. What a reader of the module table reads no key can enumerate (any module,
by a name computed at run time): the reader is keyed as a reader of `os.getenv` is, by a key
equal to nothing that the same reader keeps through the memo."""

import sys

import jax.numpy as jnp
import pytest

import eqxstable as es
from eqxstable._keys import compute, stable_key
from eqxstable._keys._context import Ctx, top

from .helpers import started_walks


SCALE = 2.0
STEP = 0


def _reader():
    def f(x):
        return x * sys.modules[__name__].SCALE

    return f


def test_the_module_table_is_never_walked():
    ctx = Ctx()
    parts = top(_reader(), ctx, True)
    # The function and what it reads of the module `sys`: not the 900 modules imported, nor a
    # watch of each.
    assert ctx.stack.walked < 10
    assert len(ctx.states) + len(ctx.names) < 10
    assert "sys.modules" in repr(parts)
    key, watch = compute(_reader())
    assert key.identity and watch.valid()
    # On its own, the table is itself.
    assert stable_key(sys.modules) == stable_key(sys.modules)
    assert es.intern(sys.modules) is sys.modules


@pytest.mark.counts_traces
def test_a_reader_of_the_module_table_hits_while_the_script_rebinds_its_globals(monkeypatch):
    global STEP
    traces = 0

    def f(x):
        nonlocal traces
        traces += 1
        return x * sys.modules[__name__].SCALE

    jitted = es.filter_jit(f)
    assert float(jitted(jnp.float32(1.5))) == 3.0
    walks = started_walks(monkeypatch)
    for step in range(20):
        # A global of this module rebound each step, as a training loop's variable is in
        # `__main__`: the module's dict changes, and the reader does not read it.
        STEP = step
        assert float(jitted(jnp.float32(1.5))) == 3.0
    assert traces == 1
    assert jitted.cache_info().hits == 20
    # No hit keys anything again (a walk of every module, 25 to 120 ms a call, was each hit's).
    assert walks == []
    # A reader built again is never shared with the first: it traces again, as under
    # `equinox.filter_jit`, and reads the module table as it is now.
    assert float(es.filter_jit(_reader())(jnp.float32(1.5))) == 3.0
    assert stable_key(_reader()) != stable_key(_reader())
