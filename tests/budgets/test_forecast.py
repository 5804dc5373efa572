"""The forecast methods (gpuledger/budgets/forecast.py) and calendar periods on series worked out by hand."""

from __future__ import annotations

import datetime as dt

import pytest

from gpuledger.budgets.forecast import MIN_ORIGINS, forecast, point
from gpuledger.budgets.periods import period_bounds, period_label, previous_period

D = dt.date


def days(first: dt.date, values: list[float]) -> dict[dt.date, float]:
    return {first + dt.timedelta(days=i): v for i, v in enumerate(values)}


@pytest.mark.parametrize(
    ("day", "period", "first", "last", "label"),
    [
        (D(2026, 11, 18), "week", D(2026, 11, 16), D(2026, 11, 22), "2026-W47"),
        (D(2026, 12, 31), "week", D(2026, 12, 28), D(2027, 1, 3), "2026-W53"),
        (D(2026, 2, 14), "month", D(2026, 2, 1), D(2026, 2, 28), "2026-02"),
        (D(2024, 2, 29), "month", D(2024, 2, 1), D(2024, 2, 29), "2024-02"),
        (D(2026, 12, 5), "month", D(2026, 12, 1), D(2026, 12, 31), "2026-12"),
        (D(2026, 11, 5), "quarter", D(2026, 10, 1), D(2026, 12, 31), "2026-Q4"),
        (D(2026, 1, 1), "quarter", D(2026, 1, 1), D(2026, 3, 31), "2026-Q1"),
    ],
)
def test_periods(day, period, first, last, label):
    assert period_bounds(day, period) == (first, last)
    assert period_label(first, period) == label
    assert previous_period(first, period)[1] == first - dt.timedelta(days=1)


def test_linear_is_the_burn_rate_so_far():
    s = days(D(2026, 11, 1), [10.0] * 10)  # Nov 1..10: $100
    assert point(
        s, D(2026, 11, 1), D(2026, 11, 30), D(2026, 11, 10), "linear", D(2026, 11, 1)
    ) == pytest.approx(300.0)


def test_last_period_is_the_period_before_scaled_to_the_length():
    s = days(D(2026, 10, 1), [10.0] * 31 + [99.0] * 3)  # October $310 over 31 days
    assert point(
        s, D(2026, 11, 1), D(2026, 11, 30), D(2026, 11, 3), "last_period", D(2026, 10, 1)
    ) == pytest.approx(300.0)


def test_weekday_adds_each_day_left_at_its_weekday_mean():
    # five weeks of a working-week rhythm: $10 Monday to Friday, $2 at the weekend (2026-11-02 is a Monday)
    week = [10.0] * 5 + [2.0] * 2
    s = days(D(2026, 11, 2), week * 4 + [10.0] * 3)  # ... then Mon-Wed of the fifth week
    f = forecast(s, D(2026, 11, 30), D(2026, 12, 6), D(2026, 12, 2), method="weekday")
    assert f.spent == pytest.approx(30.0)
    assert f.total == pytest.approx(30.0 + 10 + 10 + 2 + 2)
    # the rhythm is exact, so the method's own errors over 4 days left are all 0: the interval is the point
    assert (f.low, f.high) == pytest.approx((54.0, 54.0))


def test_weekday_beats_the_burn_rate_early_in_a_week():
    week = [10.0] * 5 + [2.0] * 2
    s = days(D(2026, 11, 2), week * 4 + [10.0])  # Monday of the fifth week
    truth = sum(week)
    ours = forecast(s, D(2026, 11, 30), D(2026, 12, 6), D(2026, 11, 30), method="weekday").total
    linear = forecast(s, D(2026, 11, 30), D(2026, 12, 6), D(2026, 11, 30), method="linear").total
    assert abs(ours - truth) == pytest.approx(0.0)
    assert abs(linear - truth) == pytest.approx(70.0 - 54.0)


def test_interval_never_below_what_is_spent_and_wide_without_history():
    s = days(D(2026, 11, 30), [50.0, 10.0])  # two days of data only: fewer than MIN_ORIGINS origins
    assert MIN_ORIGINS > 0
    f = forecast(s, D(2026, 11, 30), D(2026, 12, 6), D(2026, 12, 1), method="weekday")
    rest = f.total - f.spent
    assert f.spent == 60.0
    assert (f.low, f.high) == pytest.approx((max(60.0, f.total - 0.5 * rest), f.total + 0.5 * rest))
    assert f.low >= f.spent


def test_a_period_that_has_ended_is_what_it_cost():
    s = days(D(2026, 11, 1), [1.0] * 40)
    f = forecast(s, D(2026, 11, 1), D(2026, 11, 30), D(2026, 12, 5))
    assert (f.total, f.low, f.high, f.spent) == (30.0, 30.0, 30.0, 30.0)


def test_weekday_level_is_exact_on_a_steady_rhythm_and_follows_a_new_level():
    week = [10.0] * 5 + [2.0] * 2
    steady = days(D(2026, 11, 2), week * 4 + [10.0] * 3)
    f = forecast(steady, D(2026, 11, 30), D(2026, 12, 6), D(2026, 12, 2), method="weekday_level")
    assert f.total == pytest.approx(54.0)
    # the fifth week runs at twice the rhythm: the level moves toward it, the four-week weekday mean lags
    doubled = days(D(2026, 11, 2), week * 4 + [20.0] * 3)
    level = forecast(doubled, D(2026, 11, 30), D(2026, 12, 6), D(2026, 12, 2), method="weekday_level").total
    mean = forecast(doubled, D(2026, 11, 30), D(2026, 12, 6), D(2026, 12, 2), method="weekday").total
    assert mean == pytest.approx(60.0 + 24.0)
    assert 84.0 < level < 60.0 + 48.0
