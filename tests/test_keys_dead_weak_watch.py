"""The key memo's weak watch: a watched value that was collected is a change, even when the name
now holds `None` (a dead weak reference also returns `None`)."""

import gc
import re

import eqxstable as es
from eqxstable import _keys


PAT = re.compile("zq+")


def uses_pat(x):
    return x * (2.0 if PAT is not None else 3.0)


def test_global_rebound_to_none_after_its_value_died():
    global PAT
    PAT = re.compile("zq+")
    before = es.stable_key(uses_pat)
    PAT = None
    re.purge()
    gc.collect()
    after = es.stable_key(uses_pat)
    _keys.clear()
    fresh = es.stable_key(uses_pat)
    assert uses_pat(1.0) == 3.0
    assert after == fresh
    assert after != before
