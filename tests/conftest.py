import os
from collections.abc import Callable, Iterator
from pathlib import Path

import hypothesis
import jax
import jax.random as jr
import pytest

from .helpers import compile_log as _compile_log, CompileLog


# `pytester` runs pytest inside a test: `tests/test_pytest_plugin.py` uses it on the plugin.
pytest_plugins = ["pytester"]

# Hypothesis: JAX makes single examples slow and uneven (the first call compiles), so no deadline.
# On CI the examples are derandomised, so a failure reproduces from the log alone.
hypothesis.settings.register_profile("dev", deadline=None)
hypothesis.settings.register_profile(
    "ci", deadline=None, derandomize=True, database=None, print_blob=True
)
hypothesis.settings.load_profile("ci" if os.environ.get("CI") else "dev")

_MULTIDEVICE_DIR = Path(__file__).parent / "multidevice"
_FAKE_DEVICES_FLAG = "--xla_force_host_platform_device_count=8"
_MSG_NO_FAKE_DEVICES = (
    "`multidevice` tests need 8 CPU devices, which XLA only creates when the process starts with "
    f"XLA_FLAGS={_FAKE_DEVICES_FLAG}; run them with `bash scripts/test.sh`, which does so."
)

_MSG_VERIFY_COUNTS = (
    "verify mode traces every cache hit once more, so a trace count is not what the test "
    "expects; the test runs in the suite's normal run."
)

_HAS_FAKE_DEVICES = _FAKE_DEVICES_FLAG in os.environ.get("XLA_FLAGS", "")

# Multi-device test modules may build meshes when they are imported, which fails on one device; so
# without the flag that directory is not even collected (`scripts/test.sh` runs it separately).
collect_ignore = [] if _HAS_FAKE_DEVICES else ["multidevice"]


def pytest_report_header(config: pytest.Config) -> str:
    if _HAS_FAKE_DEVICES:
        return "eqxstable: 8 fake CPU devices, multidevice tests can run"
    return "eqxstable: tests/multidevice/ not collected (one device); scripts/test.sh runs it"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "multidevice: needs 8 (fake CPU) devices; `scripts/test.sh` runs these in their own "
        "process with XLA_FLAGS=--xla_force_host_platform_device_count=8.",
    )
    config.addinivalue_line(
        "markers",
        "counts_traces: asserts how often a function is traced; skipped in verify mode "
        "(`--eqxstable-verify`, EQXSTABLE_VERIFY=1), which traces every cache hit once more.",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Every test file under tests/multidevice/ is a multi-device test, marked or not, so that
    # `-m "not multidevice"` and `-m multidevice` split the suite cleanly.
    verifying = os.environ.get("EQXSTABLE_VERIFY", "") not in ("", "0")
    for item in items:
        if _MULTIDEVICE_DIR in Path(item.path).parents:
            item.add_marker(pytest.mark.multidevice)
        if item.get_closest_marker("multidevice") and not _HAS_FAKE_DEVICES:
            item.add_marker(pytest.mark.skip(reason=_MSG_NO_FAKE_DEVICES))
        if verifying and item.get_closest_marker("counts_traces"):
            item.add_marker(pytest.mark.skip(reason=_MSG_VERIFY_COUNTS))


@pytest.fixture
def getkey() -> Callable[[], jax.Array]:
    """A fresh PRNG key on every call, the same sequence in every test (as in Equinox's tests)."""
    key = jr.key(0)

    def _getkey() -> jax.Array:
        nonlocal key
        key, subkey = jr.split(key)
        return subkey

    return _getkey


@pytest.fixture
def small_budget() -> Iterator[None]:
    """The keys layer's object budget lowered to 2,000 (`_context.MAX_OBJECTS`), so that a
    structure of 2,010 objects is past it as a real one of 50,010 is, only faster."""
    from eqxstable._keys import _context

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_context, "MAX_OBJECTS", 2_000)
        yield


@pytest.fixture
def compiles() -> Iterator[CompileLog]:
    """JAX's compile log over the whole test: see `tests/helpers.py::compile_log`.

    A miss whose trace matches a program compiled by an earlier test would reuse it (the same
    jaxpr, the same input types): the test starts with no compiled program to find."""
    from eqxstable._jit import _reuse

    _reuse.clear()
    with _compile_log() as log:
        yield log


@pytest.fixture
def walks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The objects walked by each walk the keys layer's `top` makes (one per start of a key
    computation), in order: a count of work, never seconds."""
    from eqxstable._keys import _context

    counts: list[int] = []
    walk = _context._walk

    def counted(obj, ctx, content_ok):
        try:
            return walk(obj, ctx, content_ok)
        finally:
            counts.append(ctx.stack.walked)

    monkeypatch.setattr(_context, "_walk", counted)
    return counts
