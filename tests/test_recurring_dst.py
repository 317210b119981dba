"""Cron schedules across daylight saving time, at function level: the successor chain (
fire_after again and again from a time before the shift, as the start hook walks it) against
what docs/howto/recurring.rst promises, against one continuous iteration of the same
expression, and against the backward walk of fires_between. Australia/Lord_Howe shifts by
30 minutes (2026-04-05: 02:00 +11:00 -> 01:30 +10:30; 2026-10-04: 02:00 +10:30 -> 02:30
+11:00); Europe/Berlin by an hour (2026-03-29 and 2026-10-25)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from django_delayq.recurring.definitions import parse
from django_delayq.recurring.fire_times import _CronSim, fire_after, fires_between

LORD_HOWE = "Australia/Lord_Howe"


def ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def chain(cron: str, zone: str, start: datetime, end: datetime) -> list[int]:
    """The fire times in (start, end] as the successor chain finds them: each one
    fire_after() of the one before, cronsim started again every time."""
    definition = parse("x", {"task": "a.b", "cron": cron, "tz": zone})
    fires, t = [], ms(start)
    while (t := fire_after(definition, t)) <= ms(end):
        fires.append(t)
    return fires


def continuous(cron: str, zone: str, start: datetime, end: datetime) -> list[int]:
    """The same fire times from one iteration of cronsim, never restarted."""
    from zoneinfo import ZoneInfo

    fires = []
    for moment in _CronSim(cron, start.astimezone(ZoneInfo(zone))):
        if ms(moment) > ms(end):
            return fires
        fires.append(ms(moment))
    raise AssertionError("unreachable")  # pragma: no cover


def shown(fires: list[int], zone: str) -> list[str]:
    """Each fire time as 'local wall clock with its offset = UTC'."""
    from zoneinfo import ZoneInfo

    out = []
    for fire in fires:
        moment = datetime.fromtimestamp(fire / 1000, UTC)
        local = moment.astimezone(ZoneInfo(zone)).strftime("%m-%d %H:%M%z")
        out.append(f"{local} = {moment:%m-%d %H:%M}Z")
    return out


def walked(cron: str, zone: str, start: datetime, end: datetime) -> list[str]:
    """The chain, shown, after checking that continuous iteration and the backward walk
    (fires_between) find exactly the same times."""
    fires = chain(cron, zone, start, end)
    assert fires == continuous(cron, zone, start, end)
    definition = parse("x", {"task": "a.b", "cron": cron, "tz": zone})
    assert fires_between(definition, ms(start), ms(end), 10**6) == fires
    assert len(fires) == len(set(fires))
    return shown(fires, zone)


# -- Australia/Lord_Howe: 30 minutes ----------------------------------------------------


def test_lord_howe_autumn_hour_two_runs_both_half_hours():
    """2026-04-05: 01:30-02:00 repeats, 02:00 +10:30 happens once (15:30 UTC) and runs.
    cronsim 2.8 alone stepped from 01:00 +11:00 an hour of real time to the second 01:30,
    then to 02:30, and skipped it: fire_times.py's _CronSim steps to the next wall-clock hour."""
    start, end = datetime(2026, 4, 3, 12, tzinfo=UTC), datetime(2026, 4, 5, 17, tzinfo=UTC)
    assert walked("*/30 2 * * *", LORD_HOWE, start, end) == [
        "04-04 02:00+1100 = 04-03 15:00Z",
        "04-04 02:30+1100 = 04-03 15:30Z",
        "04-05 02:00+1030 = 04-04 15:30Z",  # skipped before the fix
        "04-05 02:30+1030 = 04-04 16:00Z",
        "04-06 02:00+1030 = 04-05 15:30Z",
        "04-06 02:30+1030 = 04-05 16:00Z",
    ]


def test_lord_howe_spring_gap_leaves_the_real_half_hour():
    """2026-10-04: 02:00-02:30 does not exist; the real 02:30 +11:00 (15:30 UTC, the shift)
    runs once, and 02:00 is not run apart from it."""
    start, end = datetime(2026, 10, 2, 12, tzinfo=UTC), datetime(2026, 10, 4, 17, tzinfo=UTC)
    assert walked("*/30 2 * * *", LORD_HOWE, start, end) == [
        "10-03 02:00+1030 = 10-02 15:30Z",
        "10-03 02:30+1030 = 10-02 16:00Z",
        "10-04 02:30+1100 = 10-03 15:30Z",
        "10-05 02:00+1100 = 10-04 15:00Z",
        "10-05 02:30+1100 = 10-04 15:30Z",
    ]


def test_lord_howe_spring_backward_walk_keeps_the_half_hour_before_the_gap():
    """fires_between walks backwards: from hour 2 (which began at the shift, 02:30 +11:00)
    cronsim 2.8 stepped back an hour of real time to 01:29 and lost 01:30 +10:30."""
    start, end = datetime(2026, 10, 2, 12, tzinfo=UTC), datetime(2026, 10, 4, 17, tzinfo=UTC)
    assert walked("*/30 1 * * *", LORD_HOWE, start, end) == [
        "10-03 01:00+1030 = 10-02 14:30Z",
        "10-03 01:30+1030 = 10-02 15:00Z",
        "10-04 01:00+1030 = 10-03 14:30Z",
        "10-04 01:30+1030 = 10-03 15:00Z",  # lost by the backward walk before the fix
        "10-05 01:00+1100 = 10-04 14:00Z",
        "10-05 01:30+1100 = 10-04 14:30Z",
    ]


@pytest.mark.parametrize(
    ("cron", "start", "night"),
    [
        # Fixed times (cronsim's Debian rules): skipped -> at the shift; repeated -> once.
        ("0 2 * * *", datetime(2026, 10, 3, 12, tzinfo=UTC), ["10-04 02:30+1100 = 10-03 15:30Z"]),
        ("45 1 * * *", datetime(2026, 4, 4, 12, tzinfo=UTC), ["04-05 01:45+1100 = 04-04 14:45Z"]),
        # A wildcard hour: every real half hour, both 01:30s, nothing in the gap.
        (
            "*/30 * * * *",
            datetime(2026, 4, 4, 14, tzinfo=UTC),
            [
                "04-05 01:30+1100 = 04-04 14:30Z",
                "04-05 01:30+1030 = 04-04 15:00Z",
                "04-05 02:00+1030 = 04-04 15:30Z",
            ],
        ),
        (
            "*/30 * * * *",
            datetime(2026, 10, 3, 14, 30, tzinfo=UTC),
            ["10-04 01:30+1030 = 10-03 15:00Z", "10-04 02:30+1100 = 10-03 15:30Z"],
        ),
    ],
)
def test_lord_howe_fixed_times_and_wildcard_hours(cron, start, night):
    end = datetime.fromtimestamp(ms(start) / 1000 + 6 * 3600, UTC)
    assert walked(cron, LORD_HOWE, start, end)[: len(night)] == night


# -- Europe/Berlin: an hour -------------------------------------------------------------

SPRING = datetime(2026, 3, 28, 23, tzinfo=UTC)  # 00:00 CET on the night of the shift
AUTUMN = datetime(2026, 10, 24, 22, tzinfo=UTC)  # 00:00 CEST


@pytest.mark.parametrize(
    ("cron", "start", "expected"),
    [
        ("30 2 * * *", SPRING, ["03-29 03:00+0200 = 03-29 01:00Z"]),  # at the shift
        ("30 2 * * *", AUTUMN, ["10-25 02:30+0200 = 10-25 00:30Z"]),  # the first 02:30
        (
            "0 * * * *",
            SPRING,
            ["03-29 01:00+0100 = 03-29 00:00Z", "03-29 03:00+0200 = 03-29 01:00Z"],
        ),
        (
            "0 * * * *",
            AUTUMN,
            [
                "10-25 01:00+0200 = 10-24 23:00Z",
                "10-25 02:00+0200 = 10-25 00:00Z",
                "10-25 02:00+0100 = 10-25 01:00Z",  # both 02:00s: every real hour
                "10-25 03:00+0100 = 10-25 02:00Z",
            ],
        ),
        (
            "*/30 * * * *",
            SPRING,
            [
                "03-29 00:30+0100 = 03-28 23:30Z",
                "03-29 01:00+0100 = 03-29 00:00Z",
                "03-29 01:30+0100 = 03-29 00:30Z",
                "03-29 03:00+0200 = 03-29 01:00Z",
                "03-29 03:30+0200 = 03-29 01:30Z",
            ],
        ),
        (
            "*/30 * * * *",
            AUTUMN,
            [
                "10-25 00:30+0200 = 10-24 22:30Z",
                "10-25 01:00+0200 = 10-24 23:00Z",
                "10-25 01:30+0200 = 10-24 23:30Z",
                "10-25 02:00+0200 = 10-25 00:00Z",
                "10-25 02:30+0200 = 10-25 00:30Z",
                "10-25 02:00+0100 = 10-25 01:00Z",
                "10-25 02:30+0100 = 10-25 01:30Z",
            ],
        ),
    ],
)
def test_berlin_transitions_table(cron, start, expected):
    end = datetime.fromtimestamp(ms(start) / 1000 + 6 * 3600, UTC)
    assert walked(cron, "Europe/Berlin", start, end)[: len(expected)] == expected
