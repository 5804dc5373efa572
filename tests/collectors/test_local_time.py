"""Local times around a DST end (collectors/time_zones.py fall_backs, LocalClock), worked out by hand from the
zones' published rules."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import pytest

from collectors.time_zones import LocalClock, fall_backs

T = dt.datetime
H = dt.timedelta(hours=1)


@pytest.mark.parametrize(
    ("zone", "lo", "hi", "expected"),
    [
        # EU: the last Sunday of October, 01:00 UTC, one hour
        ("Europe/Paris", T(2025, 1, 1), T(2026, 12, 31), [(T(2025, 10, 26, 1), H), (T(2026, 10, 25, 1), H)]),
        # US: the first Sunday of November, 02:00 EDT = 06:00 UTC
        ("America/New_York", T(2025, 10, 1), T(2025, 12, 31), [(T(2025, 11, 2, 6), H)]),
        # Lord Howe Island goes back half an hour: first Sunday of April, 02:00 +11 = 15:00 UTC the day before
        (
            "Australia/Lord_Howe",
            T(2025, 1, 1),
            T(2025, 12, 31),
            [(T(2025, 4, 5, 15), dt.timedelta(minutes=30))],
        ),
        ("Asia/Tokyo", T(2025, 1, 1), T(2025, 12, 31), []),
        ("Europe/Paris", T(2025, 11, 1), T(2025, 12, 31), []),
        # Moldova goes back at 03:00 EEST = 00:00 UTC: a log that starts that UTC day still sees it
        ("Europe/Chisinau", T(2025, 10, 26), T(2025, 10, 27), [(T(2025, 10, 26), H)]),
    ],
)
def test_fall_backs(zone, lo, hi, expected):
    assert fall_backs(zone, lo, hi) == expected


def test_a_clock_reads_the_repeated_hour_by_pass_and_leaves_the_rest_alone():
    clock = LocalClock(ZoneInfo("Europe/Paris"))
    local = [T(2025, 10, 26, h, m) for h, m in [(1, 30), (2, 0), (2, 45), (2, 45), (2, 10), (2, 50), (3, 0)]]
    # a repeated line (02:45 twice) stays on its pass; the first step back (02:10) starts the second
    assert [clock.utc(t) for t in local] == [
        T(2025, 10, 25, 23, 30),
        T(2025, 10, 26, 0, 0),
        T(2025, 10, 26, 0, 45),
        T(2025, 10, 26, 0, 45),
        T(2025, 10, 26, 1, 10),
        T(2025, 10, 26, 1, 50),
        T(2025, 10, 26, 2, 0),
    ]
    # a time the spring-forward skips is no pass of anything: read as zoneinfo reads it (fold=0, CET)
    assert LocalClock(ZoneInfo("Europe/Paris")).utc(T(2025, 3, 30, 2, 30)) == T(2025, 3, 30, 1, 30)
