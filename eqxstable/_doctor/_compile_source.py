"""Which function a compile event compiles, where JAX's event does not say: the event names the
program only (`jit(<lambda>)`, shared by every lambda), but the compile runs inside JAX's
`_pjit_call_impl`/`_cached_lowering_to_hlo`, whose `jaxpr` carries the traced function's own
`debug_info.func_src_info` (`"<lambda> at /path/script.py:6"`), kept by the programs JAX derives
from a trace (a gradient's JVP or transpose). The doctor reads it from those frames while its
listener runs, so that two functions of one name (or a `filter_jit`'s derived program and a
`jax.jit` of the same name) are not taken for one another."""

import re
import sys


# The locals of JAX's compile path that hold the jaxpr being compiled.
_NAMES = ("jaxpr", "closed_jaxpr")
_SOURCE = re.compile(r"^(?P<name>.+?) at (?P<at>\S+:\d+)$")


def compiled_source() -> tuple[str, str] | None:
    """`(name, "file:line")` of the function whose jaxpr JAX is compiling now (called from a
    `jax.monitoring` listener), or `None` where JAX's frames hold no such jaxpr."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__", "").startswith("jax"):
            local = frame.f_locals
            for name in _NAMES:
                value = local.get(name)
                info = getattr(getattr(value, "jaxpr", value), "debug_info", None)
                source = getattr(info, "func_src_info", None)
                if isinstance(source, str):
                    found = _SOURCE.match(source)
                    if found is not None:
                        return found["name"], found["at"]
        frame = frame.f_back
    return None
