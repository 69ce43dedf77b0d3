"""A pytest plugin for `reuse_count.py`: hears every miss of every stable `filter_jit` in the run
(`eqxstable._jit._accounting.miss_listeners`) and writes how many there were, and how many
compiled nothing, to the JSON file named by `$EQXSTABLE_REUSE_COUNTS`. It imports nothing at
load time, so that pytest can still rewrite the asserts of the modules it tests."""

import json
import os


_counts = {"misses": 0, "not_compiled": 0}


def _hear(wrapper, miss):
    del wrapper
    _counts["misses"] += 1
    _counts["not_compiled"] += not miss.compiled


def pytest_configure(config):
    del config
    from eqxstable._jit import _accounting

    _accounting.miss_listeners.append(_hear)


def pytest_sessionfinish(session, exitstatus):
    del session, exitstatus
    with open(os.environ["EQXSTABLE_REUSE_COUNTS"], "w") as f:
        json.dump(_counts, f)
