"""The one time/duration grammar of the command line (gpuledger/cli/times.py), hand-checked values."""

from __future__ import annotations

import argparse
import datetime as dt

import pytest

from gpuledger.cli import times
from gpuledger.cli.main import main

NOW = dt.datetime(2026, 12, 1, 12, 0, 0)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90), ("90s", 90), ("5m", 300), ("1.5h", 5400), ("2d", 172_800), ("1w", 604_800), ("1h30m", 5400)],
)
def test_durations(text: str, seconds: float) -> None:
    assert times.duration(text).total_seconds() == seconds


@pytest.mark.parametrize("text", ["", "0", "-5m", "5 minutes", "1x", "h", "1.5"])
def test_bad_durations_are_usage_errors(text: str) -> None:
    if text == "1.5":  # a fraction of a second is a duration, but not a whole-second Prometheus step
        assert times.duration(text).total_seconds() == 1.5
        with pytest.raises(argparse.ArgumentTypeError, match="whole number of seconds"):
            times.duration_s(text)
        return
    with pytest.raises(argparse.ArgumentTypeError, match="not a duration"):
        times.duration(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-30", dt.datetime(2026, 11, 30)),
        ("2026-11-30T08:15", dt.datetime(2026, 11, 30, 8, 15)),
        ("2026-11-30T08:15:00+02:00", dt.datetime(2026, 11, 30, 6, 15)),
        ("2026-11-30T08:15:00Z", dt.datetime(2026, 11, 30, 8, 15)),
        ("1733011200", dt.datetime(2024, 12, 1, 0, 0)),  # epoch seconds
        ("6h", dt.datetime(2026, 12, 1, 6, 0)),  # an age: 6 h before NOW
        ("7d", dt.datetime(2026, 11, 24, 12, 0)),
        ("1h30m", dt.datetime(2026, 12, 1, 10, 30)),
        ("now", NOW),
    ],
)
def test_moments(text: str, expected: dt.datetime) -> None:
    assert times.moment(text, now=NOW) == expected


def test_a_span_may_be_zero() -> None:
    assert times.span("0s") == times.span("0") == dt.timedelta(0)
    assert times.span("1m") == dt.timedelta(minutes=1)
    with pytest.raises(argparse.ArgumentTypeError):
        times.span("-1m")
    with pytest.raises(argparse.ArgumentTypeError):
        times.duration("0s")


def test_a_day_is_the_moments_utc_day() -> None:
    assert times.day("2026-11-30T23:30:00-02:00") == dt.date(2026, 12, 1)
    assert times.day("2026-11-30") == dt.date(2026, 11, 30)
    with pytest.raises(argparse.ArgumentTypeError, match="not a date"):
        times.day("yesterday")


def test_every_since_and_step_use_the_grammar(capsys: pytest.CaptureFixture[str]) -> None:
    # the same bad value is a usage error (exit 2) with the same words in every command that takes a time
    for argv in (
        ["summary", "--since", "last tuesday"],
        ["jobs", "--until", "last tuesday"],
        ["collect", "slurm", "--since", "last tuesday"],
        ["collect", "prometheus", "--url", "http://127.0.0.1:1", "--since", "last tuesday"],
    ):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 2
        assert "last tuesday" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["collect", "slurm", "--every", "5 minutes"])
    assert exit_.value.code == 2 and "not a duration" in capsys.readouterr().err
