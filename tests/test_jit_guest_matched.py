"""A guest runs its target's program only while the target holds the one trace the guest's was
compared with: the trace count is read once, where the trace was compared (attack 15, a race
suspected in `_reuse.first_call`: a count read again when the guest was made could take in a
trace the owner made at other types in between, and the guest would run a trace never
compared with its own)."""

import pytest

from eqxstable._jit._token import Detach, Guest, Token


class _Program:
    def __init__(self):
        self.runs = 0

    def jitted(self, donated, kept, dyn, token):
        self.runs += 1
        return "ran"


class _Entry:
    pass


def _target(traces: int) -> tuple[Token, _Program, _Entry]:
    program, entry = _Program(), _Entry()
    token = Token(program, entry)
    token.traces = traces
    return token, program, entry  # The caller holds them: the token's references are weak.


def test_a_guest_made_after_another_trace_of_its_target_detaches():
    target, program, _entry = _target(traces=2)  # The owner traced again after the compare.
    guest = Guest(target, None, 1)
    with pytest.raises(Detach):
        guest.jitted([], [], (), guest)
    assert program.runs == 0


def test_a_guest_runs_the_trace_it_matched():
    target, program, _entry = _target(traces=1)
    guest = Guest(target, None, 1)
    assert guest.jitted([], [], (), guest) == "ran" and program.runs == 1
    target.traces = 2  # The owner traced again: the guest detaches from now on.
    with pytest.raises(Detach):
        guest.jitted([], [], (), guest)
