"""The doctor's `quiet()` swaps in a profile hook (to refuse the script's own code) and gives the
profiler in place back. Under cProfile (Python 3.10, 3.11) `sys.getprofile()` is the `Profile`
object itself, a C profiler that `sys.setprofile` cannot install again: restored so, it raised a
`TypeError` the doctor swallowed, and the profile stopped at the first observed call."""

import cProfile
import pstats
import sys
import textwrap

import pytest

from eqxstable._doctor._quiet import quiet, UserCodeRefused

from .helpers import run_python


def _work() -> int:
    return sum(i * i for i in range(1000))


def _profiled(profiler: cProfile.Profile) -> set[str]:
    return {name for (_, _, name) in pstats.Stats(profiler).stats}  # pyright: ignore


def test_cprofile_keeps_profiling_after_quiet():
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        with quiet():
            pass
        _work()
    finally:
        profiler.disable()
    assert "_work" in _profiled(profiler)
    assert sys.getprofile() is None


def test_user_code_is_still_refused_under_cprofile():
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        with pytest.raises(UserCodeRefused):
            with quiet():
                _work()
        _work()
    finally:
        profiler.disable()
    assert "_work" in _profiled(profiler)


def test_a_python_profile_hook_is_given_back():
    calls = 0

    def hook(frame, event, arg):
        nonlocal calls
        calls += 1

    sys.setprofile(hook)
    try:
        with quiet():
            pass
        assert sys.getprofile() is hook
        before = calls
        _work()
        assert calls > before
    finally:
        sys.setprofile(None)


def test_a_doctored_script_under_cprofile_is_profiled_after_its_first_jitted_call(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(
        textwrap.dedent(
            """
            import equinox as eqx
            import jax.numpy as jnp

            @eqx.filter_jit
            def f(x):
                return x + 1

            def after_first_call():
                return sum(range(10))

            for _ in range(3):
                f(jnp.ones(2))
                after_first_call()
            """
        )
    )
    out = tmp_path / "run.prof"
    proc = run_python("-m", "cProfile", "-o", out, "-m", "eqxstable", "doctor", script)
    assert proc.returncode == 0, proc.stderr
    stats = pstats.Stats(str(out)).stats  # pyright: ignore
    counts = {name: s[1] for (_, _, name), s in stats.items()}
    assert counts.get("after_first_call") == 3, proc.stderr
