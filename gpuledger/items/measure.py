"""What a done item saved, measured: the targeted waste's weekly mean before the change minus its weekly mean
after it (docs/metrics.md, "Measured saving"). Pure functions over a key's weekly waste.

- **before**: the complete weeks from the week the problem was first listed (after an earlier done period
  ended, from the Monday after its end: gpuledger/items/tracker.py) up to the change, the last
  ``BASELINE_WEEKS`` of them (the habit as it was just before the fix; older weeks may predate a change in
  the work itself);
- **after**: the complete weeks that start at or after the change (``--at``) and end before the item left
  ``done`` (a reopen, or someone setting another status), up to the data's last complete week. The week
  the change fell in is in neither: part of it ran the old way;
- **measured $/week** = mean(before) − mean(after), each week's waste by the same rule, target and prices
  in force (gpuledger/items/scan.py); None until there is at least one week on each side;
- **returned** ("did not hold"): an after week whose waste is at least ``RETURN_SHARE`` of the before mean
  (of the predicted $/week when there is no before week). The item reopens at the end of that week.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass

BASELINE_WEEKS = 4
RETURN_SHARE = 0.5
WEEK = dt.timedelta(days=7)


def _start(week: dt.date) -> dt.datetime:
    return dt.datetime.combine(week, dt.time())


def before_weeks(weeks: Sequence[dt.date], first_seen: dt.date, done_at: dt.datetime) -> list[dt.date]:
    """The baseline weeks: complete weeks from ``first_seen`` that end by ``done_at``, the last BASELINE_WEEKS."""
    return [w for w in weeks if w >= first_seen and _start(w) + WEEK <= done_at][-BASELINE_WEEKS:]


def after_weeks(weeks: Sequence[dt.date], done_at: dt.datetime, until: dt.datetime | None) -> list[dt.date]:
    """The weeks after the change: starting at or after ``done_at``, ending by ``until`` (None: no end)."""
    return [w for w in weeks if _start(w) >= done_at and (until is None or _start(w) + WEEK <= until)]


def returned(waste: float, baseline: float | None) -> bool:
    """Whether a week's waste after a change says the problem came back (module docstring)."""
    return baseline is not None and baseline > 0 and waste >= RETURN_SHARE * baseline


@dataclass(frozen=True)
class Measurement:
    """A done item's before/after figures ($ per week; None where a side has no week)."""

    before: tuple[dt.date, ...]
    after: tuple[dt.date, ...]
    before_usd_per_week: float | None
    after_usd_per_week: float | None
    returned_week: dt.date | None  # the first after week whose waste came back

    @property
    def usd_per_week(self) -> float | None:
        if self.before_usd_per_week is None or self.after_usd_per_week is None:
            return None
        return self.before_usd_per_week - self.after_usd_per_week

    @property
    def held(self) -> bool | None:
        """False: the waste came back ("did not hold"); None: nothing measured after the change yet."""
        if not self.after:
            return None
        return self.returned_week is None

    def saved_in(self, waste: Callable[[dt.date], float], lo: dt.date, hi: dt.date) -> float:
        """Dollars saved in the after weeks inside [lo, hi): Σ (before mean − that week's waste)."""
        if self.before_usd_per_week is None:
            return 0.0
        return sum(self.before_usd_per_week - waste(w) for w in self.after if lo <= w < hi)


def measure(
    weeks: Sequence[dt.date],
    waste: Callable[[dt.date], float],
    *,
    first_seen: dt.date,
    done_at: dt.datetime,
    until: dt.datetime | None,
    predicted_usd_per_week: float | None,
) -> Measurement:
    """The measurement of one done period [done_at, until) (module docstring)."""
    before = before_weeks(weeks, first_seen, done_at)
    after = after_weeks(weeks, done_at, until)
    base = sum(waste(w) for w in before) / len(before) if before else None
    reference = base if base is not None else predicted_usd_per_week
    back = next((w for w in after if returned(waste(w), reference)), None)
    return Measurement(
        tuple(before),
        tuple(after),
        base,
        sum(waste(w) for w in after) / len(after) if after else None,
        back,
    )
