"""Copied to the root of build/mutation/ as `conftest.py` by `scripts/mutation.sh` (never used by
the normal test run).

mutmut runs, for each mutant, only the tests that called the mutated function during one run of
the whole selection. The keys layer caches what it computed per type, per code object and per
object (the handler table, `library_class`, the bytecode analysis, the key memo), so in one run
only the first test to meet a type would be recorded as calling, say, `resolve`. Forgetting those
caches before every test makes each test compute what it relies on, so the record is complete.
The caches are transparent: forgetting them never changes a key.
"""

import gc
import json
import os
import sys
from pathlib import Path

import pytest

from eqxstable._keys import (
    _cells,
    _code,
    _context,
    _dtypes,
    _imports,
    _memo,
    _origin,
    _state,
    _values,
)


# mutmut's trampolines add frames to every call, so a key 200 levels deep (`MAX_DEPTH`) needs
# more than Python's default 1000 frames, as it does not outside this copy.
sys.setrecursionlimit(5000)


@pytest.fixture(autouse=True)
def _forget_key_caches():
    _context.HANDLERS.clear()
    _context._CLASS_HANDLERS.clear()
    _memo.memo.clear()
    _code._reads.clear()
    _cells._sealed.clear()
    _imports._imports.clear()
    _state._slot_names.clear()
    _origin._classes.clear()
    _origin.library_file.cache_clear()  # pyright: ignore[reportFunctionMemberAccess]
    _dtypes._FIXED.clear()
    _values.field_names.cache_clear()  # pyright: ignore[reportFunctionMemberAccess]
    yield


def pytest_collection_finish(session) -> None:
    """Everything imported so far is frozen out of the garbage collector: pytest collects several
    times at the end of each session (1.5 s over JAX's heap, in each of thousands of workers).

    And no test module may have started JAX's backend while it was collected (an array made at
    import): its threads do not survive the fork, so every worker that uses JAX would hang until
    mutmut's timeout, which counts the mutant as killed."""
    gc.freeze()
    from jax._src import xla_bridge

    if getattr(xla_bridge, "_backends", None):
        raise RuntimeError(
            "scripts/mutation.sh: collecting the tests started JAX's backend (an array made when "
            "a test module is imported?); make it inside the test, or every worker hangs."
        )


# mutmut's own runs (the clean run, the stats run, the forced failure) run every test; a mutant's
# run stops once the tests it ran were recorded as taking this long (`MUTATION_BUDGET_S`).
_WHOLE_RUNS = ("", "stats", "fail", "list_all_tests", "mutant_generation")


def pytest_collection_modifyitems(items: list) -> None:
    """The fastest tests first (by the durations mutmut recorded), so that `-x` stops a killed
    mutant's run early. A mutant runs them only within a budget of recorded test time: in a
    freshly forked worker the tests run two to three times slower than recorded, and a surviving
    mutant of a function every key goes through would otherwise run 400 tests (45 s). A mutant
    that only a test past the budget would kill counts as survived: the score is a lower bound."""
    path = Path("mutmut-stats.json")
    if not path.exists():
        return
    durations = json.loads(path.read_text()).get("duration_by_test", {})
    items.sort(key=lambda item: durations.get(item.nodeid, 0.0))
    if os.environ.get("MUTANT_UNDER_TEST", "") in _WHOLE_RUNS:
        return
    budget, spent, keep = float(os.environ.get("MUTATION_BUDGET_S", "5")), 0.0, 0
    for item in items:
        spent += durations.get(item.nodeid, 0.0)
        if keep and spent > budget:
            break
        keep += 1
    del items[keep:]
