"""Keyword arguments bound to the function's signature, as `equinox.filter_jit` binds them.

`f(x=a, y=b)` is then the call `f(a, b)`: the same program as `f(a, b)`, and under
`donate="all-except-first"` the first argument is never donated however it was passed.

`inspect.Signature.bind` costs microseconds, so it runs once per way of calling (the number of
positional arguments and the names of the keyword ones); what it did is kept as a plan: which
keyword arguments become positional, in order. Calls without keyword arguments need no binding.
"""

import inspect
from typing import Any


# The plan of a call whose keyword arguments all stay keyword arguments.
_UNCHANGED: tuple[str, ...] = ()


class Binder:
    """`binder(args, kwargs) -> (args, kwargs)` with keyword arguments bound to `fun`'s signature.

    **Arguments:**

    - `fun`: the function (or callable) whose signature binds the arguments. A callable without
        a signature (some builtins) is called with its arguments as given.
    """

    __slots__ = ("_signature", "_plans")

    def __init__(self, fun: Any):
        # Only the signature is kept: programs live as long as the process, and the function
        # (a module) may hold large arrays.
        try:
            self._signature: inspect.Signature | None = inspect.signature(fun)
        except Exception:  # TypeError, ValueError, or whatever a custom `__signature__` raises
            self._signature = None
        self._plans: dict[tuple, tuple[str, ...]] = {}

    def __call__(self, args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
        plan = self._plans.get((len(args), *kwargs))
        if plan is None:
            plan = self._plan(args, kwargs)
        if not plan:
            return args, kwargs
        kwargs = dict(kwargs)
        return args + tuple([kwargs.pop(name) for name in plan]), kwargs

    def _plan(self, args: tuple, kwargs: dict[str, Any]) -> tuple[str, ...]:
        signature = self._signature
        if signature is None:
            plan = _UNCHANGED
        else:
            # Raises `TypeError` for arguments that do not fit, as calling the function would.
            bound = signature.bind(*args, **kwargs)
            names = list(signature.parameters)
            plan = tuple(names[len(args) : len(bound.args)])
        self._plans[(len(args), *kwargs)] = plan
        return plan
