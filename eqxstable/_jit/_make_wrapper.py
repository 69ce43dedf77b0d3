"""Making the wrapper that [`eqxstable.filter_jit`][] returns, from a function and checked
options: its shared state (`_State`), its node data (`_Aux`) and the names it copies."""

import functools as ft
from typing import Any

import equinox as eqx

from . import _verify
from ._accounting import live_wrappers
from ._fun import split_fun
from ._state import _Aux, _State
from ._wrapper import _JitWrapper


# The user's donation mode (`donate=`) -> (`donated_args`: whose leaves a program donates, "all",
# "all-except-first" or "none"; whether "donated buffers were not usable" is hidden).
DONATE_MODES: dict[str, tuple[str, bool]] = {
    "all": ("all", True),
    "all-except-first": ("all-except-first", True),
    "warn": ("all", False),
    "warn-except-first": ("all-except-first", False),
    "none": ("none", False),
}


def make_wrapper(
    fun: Any,
    donate: str,
    max_traces: int | None,
    on_recompile: str,
    jitkwargs: dict[str, Any],
    verify: bool | None = None,
) -> _JitWrapper:
    """The wrapper of `fun` with these (already checked) options."""
    parts = split_fun(fun)
    donated_args, filter_warning = DONATE_MODES[donate]
    state = _State(fun, parts, donated_args, filter_warning, jitkwargs)
    # Decided once: reading the environment on every call would cost the hit path.
    state.verifying = _verify.enabled(verify)
    program = state.program
    options = tuple(sorted(jitkwargs.items()))
    aux = _Aux(parts.treedef, parts.template, donate, max_traces, on_recompile, options, verify)
    object.__setattr__(aux, "state", state)
    state.aux = aux
    # As `functools.update_wrapper`, but like `equinox.module_update_wrapper` without the
    # `__dict__` of a module, which holds its fields.
    names: dict[str, Any] = {}
    for name in ft.WRAPPER_ASSIGNMENTS:
        try:
            names[name] = getattr(fun, name)
        except AttributeError:
            pass
    if not isinstance(fun, eqx.Module):
        for name, value in getattr(fun, "__dict__", {}).items():
            names.setdefault(name, value)
    for name in ("_aux", "_dynamic", "__wrapped__"):
        names.pop(name, None)
    # A callable object (a module) has no names of its own: use those of its class.
    if "__name__" not in names:
        names["__name__"] = program.name
        names["__qualname__"] = program.qualname
    state.names = names
    wrapper = _JitWrapper(fun, state)
    live_wrappers.add(wrapper)
    return wrapper
