"""Old import paths of the module layer, for pickles made before it moved into `_module/`.

A pickle names the function or class that rebuilds an object by its module's path: a
`StableModule`'s static field as `eqxstable._static._restore`, a static list of a stabilized plain
module as `eqxstable._canonical._restore_canonical`. Those files now live in
`eqxstable/_module/`; this finder makes the old paths import the same modules (never copies of
them), so that such pickles still load. Nothing is imported until an old path is asked for.
"""

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Sequence


MOVED = {
    f"eqxstable.{name}": f"eqxstable._module.{name}"
    for name in ("_access", "_canonical", "_dynamic", "_field", "_stabilize", "_static")
}


class _Alias(importlib.abc.Loader):
    def __init__(self, target: str):
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        # The import system hands back what `sys.modules` holds after this: the module itself.
        sys.modules[module.__name__] = importlib.import_module(self.target)


class MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        moved = MOVED.get(fullname)
        if moved is None:
            return None
        return importlib.util.spec_from_loader(fullname, _Alias(moved))


def install() -> None:
    if not any(isinstance(finder, MovedFinder) for finder in sys.meta_path):
        sys.meta_path.append(MovedFinder())
