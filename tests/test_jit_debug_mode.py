"""Equinox's debug mode, `EQX_ON_ERROR=breakpoint` (which `equinox.EquinoxRuntimeError`'s
message recommends): Equinox replaces `jax.jit` with a plain function at import, so the test runs
in a process of its own with the variable set. Every wrapper works there as `equinox.filter_jit`
does: a call inside another jitted function runs inline (no program, no miss), any other call
is cached and counted as always (`eqxstable/_jit/_debug_mode.py`)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[1]

_SCRIPT = r"""
import json, warnings
warnings.simplefilter("ignore")
import jax, jax.numpy as jnp, jax.monitoring
import equinox as eqx, eqxstable as es

compiles = []
COMPILE = "/jax/core/compile/backend_compile_duration"
jax.monitoring.register_event_duration_secs_listener(
    lambda e, d, **k: compiles.append(e) if e == COMPILE else None
)
traces = {"inner": 0, "outer": 0}

@es.filter_jit
def inner(x, k):
    traces["inner"] += 1
    return eqx.error_if(x * k, x < 0, "negative")

@es.filter_jit
def outer(x):
    traces["outer"] += 1
    return inner(x, 2.0) + 1

out = {}
x = jnp.arange(3.0)
n = len(compiles)
out["inner"] = inner(x, 2.0).tolist()
out["inner_compiles"] = len(compiles) - n
out["inner_again"] = inner(x, 2.0).tolist()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    n = len(compiles)
    out["outer"] = outer(x).tolist()
    out["outer_compiles"] = len(compiles) - n
out["warned"] = any("runs inline" in str(w.message) for w in caught)
out["outer_again"] = outer(x).tolist()
out["lowered"] = inner.lower(x, 3.0).compile()(x, 3.0).tolist()
out["info"] = {name: list(w.cache_info())[:4] + list(w.cache_info())[6:]
               for name, w in (("inner", inner), ("outer", outer))}
out["traces"] = traces

def f(x):
    return x + 1
rebuilt = []
for _ in range(2):
    w = es.filter_jit(lambda x: f(x))
    rebuilt.append((w(jnp.ones(1)).tolist(), w.cache_info().misses))
out["rebuilt"] = rebuilt
print(json.dumps(out))
"""


@pytest.mark.counts_traces
def test_every_wrapper_works_under_eqx_on_error_breakpoint():
    env = dict(os.environ, EQX_ON_ERROR="breakpoint", PYTHONPATH=str(ROOT))
    env.pop("EQXSTABLE_VERIFY", None)
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["inner"] == out["inner_again"] == [0.0, 2.0, 4.0]
    assert out["inner_compiles"] == 1
    # Inside `outer`'s trace `inner` runs inline, as `equinox.filter_jit` does in this mode:
    # one program (the outer one) is compiled, and `inner` makes no miss.
    assert out["outer"] == out["outer_again"] == [1.0, 3.0, 5.0]
    assert out["outer_compiles"] == 1
    assert out["warned"]
    assert out["lowered"] == [0.0, 3.0, 6.0]
    # (hits, misses, maxsize, currsize, traces, compiles, loaded): `inner` was called at the top
    # level twice (a miss, then a hit) and inline once (a hit, as under `jax.disable_jit()`);
    # `.lower()` for a new static value traced, a call and a miss, and its `.compile()` compiled
    # (attack 9b-08). Its function was traced three times: by the miss, inline, by `.lower()`.
    inner_info, outer_info = out["info"]["inner"], out["info"]["outer"]
    assert inner_info == [2, 2, 4096, 1, 2, 2, 0]
    assert outer_info == [1, 1, 4096, 1, 1, 1, 0]
    assert out["traces"] == {"inner": 3, "outer": 1}
    # A rebuilt equivalent function still finds the program (`jax.jit` replaced by a plain
    # function is no reason to key every function as a jitted one).
    assert out["rebuilt"] == [[[2.0], 1], [[2.0], 0]]
