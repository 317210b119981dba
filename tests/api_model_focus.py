"""Focused runs of the API machine (tests/test_api_model.py), one per issue-17 item, with the
rule set restricted so one item does not mask another, and two runs over what 0.2.0 already
gets right (they pass there: the model raises no false alarm on them). Not collected by
default (the name does not start with test_); run it explicitly, a few minutes each:

    FOCUS=F1,F2,F8,F9,F11 ./runtests tests/api_model_focus.py -k default -p no:cacheprovider
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule, run_state_machine_as_test

from tests import test_api_model as m

pytestmark = m.pytestmark
world = m.world
A = m.APIMachine
FOCUS = os.environ.get("FOCUS", "F1,F2,F8,F9,F11,Sane,SaneTx").split(",")


class NoTxGets(A):
    """get_job() unchecked inside transactions (item 11 would be found first), HORIZON
    fixed, lost replies the only fault. (A plain method drops a rule; drain() still calls it.)"""

    def _check_gets(self):
        if self.m.depth == 0:
            super()._check_gets()

    def horizon(self, on):
        A.horizon(self, on)

    def schedule_keyed(self, key, delay, on_commit, keep):
        pass  # each focus has its own schedule rule

    @rule(kind=st.just("lost reply"))
    def fault(self, kind):
        A.fault(self, kind)


class F1(NoTxGets):
    """Item 1: no keyed on_commit call over a held key (items 2 and 9 excluded)."""

    @rule(
        key=st.sampled_from((None, *m.KEYS)),
        delay=st.sampled_from(m.DELAYS),
        on_commit=st.booleans(),
        keep=st.booleans(),
    )
    def schedule(self, key, delay, on_commit, keep):
        if key is not None and on_commit and self.m.holders(key):
            return
        A.schedule(self, key=key, delay=delay, on_commit=on_commit, keep=keep)


class F2(NoTxGets):
    """Item 2: keyed on_commit calls only, never over a Redis job (item 9 excluded)."""

    def cancel(self, data, by):
        pass

    @rule(key=st.sampled_from(m.KEYS), delay=st.sampled_from(m.DELAYS), keep=st.booleans())
    def schedule(self, key, delay, keep):
        if any(j.place == "redis" for j in self.m.holders(key)):
            return
        A.schedule(self, key=key, delay=delay, on_commit=True, keep=keep)


class F8(NoTxGets):
    """Item 8: plain calls only, HORIZON toggled."""

    def cancel(self, data, by):
        pass

    @precondition(lambda self: self.m.depth == 0)
    @rule(on=st.booleans())
    def horizon(self, on):
        A.horizon(self, on)

    @rule(
        key=st.sampled_from((None, *m.KEYS)),
        delay=st.sampled_from(m.DELAYS),
        keep=st.booleans(),
    )
    def schedule(self, key, delay, keep):
        A.schedule(self, key=key, delay=delay, on_commit=False, keep=keep)


class F9(NoTxGets):
    """Item 9: one keyed on_commit call per transaction (item 2 excluded)."""

    def cancel(self, data, by):
        pass

    @rule(
        key=st.sampled_from(m.KEYS),
        delay=st.sampled_from(m.DELAYS),
        on_commit=st.booleans(),
        keep=st.booleans(),
    )
    def schedule(self, key, delay, on_commit, keep):
        if on_commit and self.m.depth:
            if getattr(self, "keyed_in", None) is self.blocks[0]:
                return
            self.keyed_in = self.blocks[0]
        A.schedule(self, key=key, delay=delay, on_commit=on_commit, keep=keep)


class F11(A):
    """Item 11: the whole machine (it finds 11 first)."""


class Sane(A):
    """What 0.2.0 gets right: no transactions, HORIZON off, lost replies only."""

    def horizon(self, on):
        A.horizon(self, on)

    def begin(self):
        pass

    def commit(self):
        pass

    def rollback(self):
        A.rollback(self)

    def schedule_keyed(self, key, delay, on_commit, keep):
        pass

    @rule(kind=st.just("lost reply"))
    def fault(self, kind):
        A.fault(self, kind)

    @rule(
        key=st.sampled_from((None, *m.KEYS)),
        delay=st.sampled_from(m.DELAYS),
        keep=st.booleans(),
    )
    def schedule(self, key, delay, keep):
        A.schedule(self, key=key, delay=delay, on_commit=False, keep=keep)


class SaneTx(Sane):
    """... plus transactions (commit, rollback, savepoints) with plain schedules and on_commit
    jobs without keys, get_job checked outside transactions only."""

    def _check_gets(self):
        if self.m.depth == 0:
            super()._check_gets()

    def cancel(self, data, by):
        pass

    @precondition(lambda self: self.m.depth < 2)
    @rule()
    def begin(self):
        A.begin(self)

    @precondition(lambda self: self.m.depth > 0)
    @rule()
    def commit(self):
        A.commit(self)

    @precondition(lambda self: self.m.depth > 0)
    @rule()
    def rollback(self):
        A.rollback(self)

    @rule(
        key=st.sampled_from((None, *m.KEYS)),
        delay=st.sampled_from(m.DELAYS[:2]),
        on_commit=st.booleans(),
        keep=st.booleans(),
    )
    def schedule(self, key, delay, on_commit, keep):
        A.schedule(
            self, key=None if on_commit else key, delay=delay, on_commit=on_commit, keep=keep
        )


@pytest.mark.parametrize("focus", FOCUS)
def test_focus(world, focus):
    machine = globals()[focus]
    machine.world = world
    focused = settings(m.SETTINGS, max_examples=200)
    run_state_machine_as_test(machine, settings=focused)
