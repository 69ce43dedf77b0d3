"""`K-datetime`: a `timezone` is keyed by its offset and its name *as given* (attack 6, finding
12): `timezone(timedelta(0), "UTC")` names itself `UTC` as `timezone.utc` does, but its `repr` and
pickle hold the name, so `intern` must never return one for the other."""

import datetime
import pickle

from hypothesis import given, strategies as st

import eqxstable as es


# Few offsets, so that two draws often share one (and a default name is often `UTC`).
_offsets = st.sampled_from([0, 0, 60, -330, 23 * 60]).map(lambda m: datetime.timedelta(minutes=m))
_names = st.none() | st.sampled_from(["UTC", "UTC+00:00", "CET", "X", ""])


def _zone(offset: datetime.timedelta, name: str | None) -> datetime.timezone:
    return datetime.timezone(offset) if name is None else datetime.timezone(offset, name)


def test_an_explicit_name_is_kept_apart_from_the_default_one():
    named = datetime.timezone(datetime.timedelta(0), "UTC")
    assert named.tzname(None) == datetime.timezone.utc.tzname(None)
    es.intern(datetime.timezone.utc)
    got = es.intern(named)
    assert repr(got) == repr(named) and pickle.dumps(got) == pickle.dumps(named)
    moment = datetime.datetime(2020, 1, 1, tzinfo=named)
    es.intern(moment.replace(tzinfo=datetime.timezone.utc))
    assert repr(es.intern(moment)) == repr(moment)


@given(a=st.tuples(_offsets, _names), b=st.tuples(_offsets, _names))
def test_zones_share_a_key_exactly_when_rebuilt_from_the_same_arguments(a, b):
    za, zb = _zone(*a), _zone(*b)
    same = a == b  # The same offset, and the same name given (or none).
    assert (es.stable_key(za) == es.stable_key(zb)) == same
    if same:
        assert pickle.dumps(za) == pickle.dumps(zb) and repr(za) == repr(zb)
    got = es.intern(zb)
    assert repr(got) == repr(zb) and pickle.dumps(got) == pickle.dumps(zb)
    assert got.utcoffset(None) == zb.utcoffset(None) and got.tzname(None) == zb.tzname(None)
