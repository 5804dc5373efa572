"""What the weekly report says, computed once and shared by every format (HTML, Markdown, plain text, CSV,
JSON).

Every figure comes from the analytics functions the CLI and the pages call — ``analytics.summary.summary``
(the headline, equal to ``gpuledger summary --json`` for the same filters, and the same for the previous
period of equal length), ``analytics.waste.waste_by`` (spend and waste by team, user and GPU model),
``analytics.jobs.jobs_table`` (the costliest jobs), ``analytics.recommend.recommendations`` with
``analytics.savings.savings_total`` (the actions and their total, each dollar once) and
``analytics.unit_costs.job_unit_costs`` (the $ per 1M tokens and $ per epoch trends) — so the report and
the CLI agree to the cent.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, replace
from typing import Any

import duckdb
import polars as pl

from analytics.filters import Filters
from analytics.job_count import job_count, with_job_of
from analytics.waste_jobs import HEADLINE_WORDS
from gpuledger.ledger.errors import LedgerError
from gpuledger.ledger.settings import Settings
from gpuledger.ledger.sql import job_count_sql
from gpuledger.ledger.text import neutral_frame
from gpuledger.reports import fmt

TOP_ACTIONS = 5
TOP_ROWS = 10  # users, jobs
TREND_WEEKS = 6  # weeks of $/1M tokens and $/epoch shown for each recurring run family
TREND_MIN_WEEKS = 2  # a run family is recurring when it ran in at least this many of them

_WEEK = re.compile(r"^(\d{4})-W(\d{2})$")

WASTE_PARTS = (
    ("productive_usd", "Productive"),
    ("idle_allocated_usd", "Idle while allocated"),
    ("underused_usd", "Under-used (below target utilization)"),
    ("failed_usd", "Failed runs (badput)"),
    ("unallocated_usd", "Capacity no job held (unallocated)"),
    ("unmeasured_usd", "No telemetry (unmeasured)"),
)
UNALLOCATED = "unallocated"
# the summary's unit costs, whichever this version of analytics.summary computes
UNIT_COST_KEYS = (
    ("usd_per_mtok", "$ per 1M tokens"),
    ("training_usd_per_mtok", "Training $ per 1M tokens"),
    ("inference_usd_per_mtok_generated", "Inference $ per 1M generated tokens"),
)


def week_range(week: str) -> tuple[dt.date, dt.date]:
    """``2026-W47`` → (Monday, Sunday) of that ISO week, UTC days."""
    m = _WEEK.match(week)
    if not m:
        raise LedgerError(f"--week: not an ISO week like 2026-W47: {week!r}")
    try:
        monday = dt.date.fromisocalendar(int(m.group(1)), int(m.group(2)), 1)
    except ValueError as exc:
        raise LedgerError(f"--week: {week!r}: {exc}") from None
    return monday, monday + dt.timedelta(days=6)


def last_full_week(as_of: dt.datetime | None) -> str:
    """The last ISO week that ended on or before the data horizon (the current week if none ended)."""
    day = (as_of or dt.datetime.now(dt.UTC).replace(tzinfo=None)).date()
    if day.isoweekday() != 7:
        day -= dt.timedelta(days=day.isoweekday())
    year, week, _ = day.isocalendar()
    return f"{year}-W{week:02d}"


def previous_period(filters: Filters) -> Filters | None:
    """The period of equal length just before the view (the week before a week), same teams/clusters/users;
    None when the view has an open end."""
    if not (filters.since and filters.until):
        return None
    days = (filters.until - filters.since).days + 1
    delta = dt.timedelta(days=days)
    return Filters(
        since=filters.since - delta,
        until=filters.until - delta,
        teams=filters.teams,
        clusters=filters.clusters,
        users=filters.users,
    )


def kind_label(kind: str) -> str:
    """A recommendation kind in words: analytics.recommend.KIND_LABELS when it has one, else the code
    title-cased ("fewer_gpus" → "Fewer Gpus")."""
    import analytics.recommend as recommend

    labels = getattr(recommend, "KIND_LABELS", None) or {}
    if labels.get(kind):
        return str(labels[kind])
    words = kind.replace("_", " ").title().split()
    return " ".join(_ACRONYMS.get(w, w) for w in words)


_ACRONYMS = {"Gpu": "GPU", "Gpus": "GPUs", "Mig": "MIG", "Cpu": "CPU"}


@dataclass(frozen=True)
class Trend:
    """One recurring run family: its $ per 1M tokens and $ per epoch in each of the last weeks (None when
    the family did not run that week or logged no such count)."""

    family: str
    weeks: tuple[str, ...]
    usd_per_mtok: tuple[float | None, ...]
    usd_per_epoch: tuple[float | None, ...]
    jobs: tuple[int, ...]


@dataclass(frozen=True)
class ReportData:
    """Everything the report shows, as computed by the analytics functions."""

    title: str
    filters: Filters
    summary: dict[str, Any]  # analytics.summary.summary: the `summary --json` object
    previous: dict[str, Any] | None  # the same for the period before (None when the view is open-ended)
    by_team: (
        pl.DataFrame
    )  # team, spend_usd, team_waste_usd + the parts (waste_by; "unallocated" is not a team)
    by_user: pl.DataFrame  # analytics.waste_users.user_waste: top TOP_ROWS by the waste teams control
    by_gpu_model: pl.DataFrame  # gpu_model, …
    recommendations: pl.DataFrame  # the top TOP_ACTIONS of analytics.recommend.recommendations
    savings: dict[str, Any]  # analytics.savings.savings_total over the whole list: each dollar once
    costliest_jobs: pl.DataFrame  # analytics.jobs.jobs_table(sort="cost"), top TOP_ROWS
    trends: tuple[Trend, ...]
    notes: tuple[str, ...]  # data-quality notes, plain sentences
    settings: Settings
    generated_at: dt.datetime
    guard: dict[str, Any] | None = (
        None  # analytics.guard_actions.guard_saved for the view; None: no guard step
    )
    items: dict[str, Any] | None = None  # the week's items: new, still open, done (reports/items_section.py)
    budgets: tuple[dict[str, Any], ...] = ()  # gpuledger.budgets.status rows as of the view's end, its teams'

    @property
    def coverage(self) -> dict[str, Any] | None:
        """``savings_total``'s coverage (the view's waste $ that at least one action addresses), when this
        version of analytics.savings computes it."""
        cov = self.savings.get("coverage")
        return cov if isinstance(cov, dict) else None


def default_title(filters: Filters) -> str:
    if filters.since and filters.until:
        y, w, d = filters.since.isocalendar()
        if d == 1 and filters.until - filters.since == dt.timedelta(days=6):
            return f"GPU cost report, week {y}-W{w:02d} ({filters.since} – {filters.until})"
        return f"GPU cost report, {filters.since} – {filters.until}"
    if filters.since:
        return f"GPU cost report, from {filters.since}"
    if filters.until:
        return f"GPU cost report, up to {filters.until}"
    return "GPU cost report, all data"


def collect(
    con: duckdb.DuckDBPyConnection, *, filters: Filters, settings: Settings, title: str | None = None
) -> ReportData:
    """Run the analyses the report needs, on one reader connection, at one data horizon."""
    from analytics.shared import sharing

    with sharing(con):  # the ledger does not change while the report is read: every figure computed once
        return _collect(con, filters=filters, settings=settings, title=title)


def _collect(
    con: duckdb.DuckDBPyConnection, *, filters: Filters, settings: Settings, title: str | None
) -> ReportData:
    from analytics.filters import horizon
    from analytics.jobs import jobs_table
    from analytics.problems import top_actions
    from analytics.recommend import recommendations
    from analytics.summary import summary
    from analytics.waste import waste_by
    from analytics.waste_users import user_waste

    as_of = horizon(con)
    kw = {"filters": filters, "settings": settings, "as_of": as_of}
    head = summary(con, **kw)
    prev_filters = previous_period(filters)
    previous = summary(con, filters=prev_filters, settings=settings, as_of=as_of) if prev_filters else None
    by_team = waste_by(con, by="team", **kw).rename({"key": "team"})
    by_user = user_waste(con, **kw, limit=TOP_ROWS)
    by_model = waste_by(con, by="gpu_model", **kw).rename({"key": "gpu_model"})
    recs = recommendations(con, **kw)
    jobs = jobs_table(con, **kw, sort="cost", limit=TOP_ROWS, percentiles=False)
    data = ReportData(
        title=title or default_title(filters),
        filters=filters,
        summary=head,
        previous=previous,
        # every name in a table as it is shown: no control character, line end or bidi override
        by_team=neutral_frame(by_team),
        by_user=neutral_frame(by_user),
        by_gpu_model=neutral_frame(by_model),
        recommendations=neutral_frame(top_actions(recs, TOP_ACTIONS)),
        savings=_savings(con, recs, kw),
        costliest_jobs=neutral_frame(jobs.filter(pl.col("cost_usd").is_not_null())),
        trends=_trends(con, filters, as_of),
        notes=(),
        settings=settings,
        generated_at=dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0),
        guard=_guard(con, filters),
        budgets=_budgets(con, filters, settings),
    )
    data = replace(data, items=_items(con, filters, settings))
    return _with_notes(con, data)


def _guard(con: duckdb.DuckDBPyConnection, filters: Filters) -> dict[str, Any] | None:
    """What the guard did in the view (its own small section of the report), None when it took no step."""
    from analytics.guard_actions import guard_saved

    found = guard_saved(
        con, since=filters.since, until=filters.until, teams=filters.teams, clusters=filters.clusters
    )
    return found if found["jobs_cancelled"] or found["jobs_warned"] else None


def _items(con: duckdb.DuckDBPyConnection, filters: Filters, settings: Settings) -> dict[str, Any] | None:
    """The view's last week of items (gpuledger/reports/items_section.py)."""
    from gpuledger.reports.items_section import items_week

    return items_week(con, filters=filters, settings=settings)


def _budgets(
    con: duckdb.DuckDBPyConnection, filters: Filters, settings: Settings
) -> tuple[dict[str, Any], ...]:
    """The budgets as of the view's last day (the report's week's Sunday), the view's teams' only when it names
    teams (a team's report shows no cluster's or fleet's budget)."""
    from gpuledger.budgets.status import budget_rows

    if not settings.budgets:
        return ()
    rows = budget_rows(con, settings, filters.until)
    if filters.teams:
        rows = [r for r in rows if r["scope"] == "team" and r["target"] in filters.teams]
    return tuple(rows)


def _savings(con: duckdb.DuckDBPyConnection, recs: pl.DataFrame, kw: dict[str, Any]) -> dict[str, Any]:
    """``recommend --total --json`` for the view: savings_total, with the coverage of the view's waste where
    this version of analytics.recommend computes it (``view_coverage``)."""
    import analytics.recommend as recommend
    from analytics.savings import savings_total

    out = dict(savings_total(recs, whole=True))  # the whole list: its counted columns as they are
    view_coverage = getattr(recommend, "view_coverage", None)
    if view_coverage is not None:
        out["coverage"] = view_coverage(con, recs, **kw)
    return out


def _trends(con: duckdb.DuckDBPyConnection, filters: Filters, as_of: dt.datetime | None) -> tuple[Trend, ...]:
    """$ per 1M tokens and $ per epoch per week for run families seen in ≥ TREND_MIN_WEEKS of the last
    TREND_WEEKS weeks up to the view's end. A run family = the run's model (training_runs.model) on one GPU
    model. A week's figure is the family's Σ in-view cost ÷ Σ in-view tokens × 10⁶ (the formula of
    ``summary``'s usd_per_mtok), over its jobs with a token count; $ per epoch likewise over epochs."""
    from analytics.unit_costs import job_unit_costs

    if filters.until is None:
        return ()
    last_monday = filters.until - dt.timedelta(days=filters.until.isoweekday() - 1)
    families = pl.DataFrame(
        con.execute(
            """SELECT r.job_id, r.model || ' on ' || coalesce(j.gpu_model, '?') AS family
               FROM training_runs r JOIN jobs j USING (job_id) WHERE r.model IS NOT NULL"""
        ).fetchall(),
        schema={"job_id": pl.Utf8, "family": pl.Utf8},
        orient="row",
    )
    if families.is_empty():
        return ()
    weeks: list[str] = []
    rows: list[pl.DataFrame] = []
    for i in range(TREND_WEEKS - 1, -1, -1):
        monday = last_monday - dt.timedelta(days=7 * i)
        y, w, _ = monday.isocalendar()
        label = f"{y}-W{w:02d}"
        weeks.append(label)
        wf = Filters(monday, monday + dt.timedelta(days=6), filters.teams, filters.clusters, filters.users)
        u = (
            job_unit_costs(con, filters=wf, as_of=as_of)
            .filter(pl.col("kind").fill_null("") != "inference")  # a generated token is other work
            .join(families, on="job_id")
        )
        u = with_job_of(con, u)
        if u.is_empty():
            continue
        rows.append(
            u.filter(pl.col("cost_usd").is_not_null())
            .with_columns(
                pl.lit(label).alias("week"),
                pl.when(pl.col("tokens_in_view") > 0).then(pl.col("cost_usd")).alias("tok_cost"),
                pl.when(pl.col("tokens_in_view") > 0).then(pl.col("tokens_in_view")).alias("tok"),
                pl.when(pl.col("usd_per_epoch").is_not_null()).then(pl.col("cost_usd")).alias("ep_cost"),
                (pl.col("cost_usd") / pl.col("usd_per_epoch")).alias("ep"),
            )
            .group_by("family", "week")
            .agg(
                (pl.col("tok_cost").sum() / pl.col("tok").sum() * 1e6).alias("usd_per_mtok"),
                (pl.col("ep_cost").sum() / pl.col("ep").sum()).alias("usd_per_epoch"),
                job_count().alias("jobs"),
            )
        )
    if not rows:
        return ()
    per = pl.concat(rows)
    seen = set(per["week"].to_list())
    first = next(i for i, w in enumerate(weeks) if w in seen)  # weeks before any family ran say nothing
    weeks = weeks[first:]
    out = []
    for fam in sorted(per["family"].unique().to_list()):
        f = {r["week"]: r for r in per.filter(pl.col("family") == fam).to_dicts()}
        if len(f) < TREND_MIN_WEEKS or weeks[-1] not in f:
            continue

        def val(week: str, key: str, f: dict[str, dict[str, Any]] = f) -> float | None:
            v = f.get(week, {}).get(key)
            return None if v is None or v != v or v in (float("inf"), float("-inf")) else float(v)

        mtok = tuple(val(w, "usd_per_mtok") for w in weeks)
        epoch = tuple(val(w, "usd_per_epoch") for w in weeks)
        if all(v is None for v in mtok + epoch):
            continue
        out.append(
            Trend(fam, tuple(weeks), mtok, epoch, tuple(int(f.get(w, {}).get("jobs") or 0) for w in weeks))
        )
    return tuple(out)


def _with_notes(con: duckdb.DuckDBPyConnection, data: ReportData) -> ReportData:
    """Data-quality notes: what the figures leave out or could not measure, as sentences with numbers."""
    from analytics.waste import job_waste

    s = data.summary
    notes: list[str] = []
    if s["jobs"] == 0:
        notes.append("No job ran in this period: every figure is 0 or n/a.")
    if s["unpriced_gpu_hours"] > 0:
        jobs = job_waste(con, filters=data.filters, settings=data.settings)
        models = sorted(
            {str(m or "unknown") for m in jobs.filter(pl.col("cost_usd").is_null())["gpu_model"].to_list()}
        )
        notes.append(
            f"{fmt.num(s['unpriced_gpu_hours'])} GPU-hours ran on GPU models without a price "
            f"({', '.join(models)}) and are not in the spend: add a [[price]] row to the settings."
        )
    unmeasured = s["waste"]["unmeasured_usd"]
    if unmeasured > 0.005 and s["spend_usd"] > 0:
        notes.append(
            f"{fmt.usd(unmeasured)} ({fmt.share(unmeasured, s['spend_usd'])} of spend) was held without "
            "utilization telemetry: whether it was idle or busy is unknown, so it is not counted as waste."
        )
    if s["mean_util_pct"] is None and s["jobs"]:
        notes.append("No utilization sample in this period: mean utilization and idle time are n/a.")
    if s["energy_kwh"] is None and s["jobs"]:
        notes.append("No power or energy reading in this period: energy and CO2e are n/a.")
    where, params = data.filters.job_where("j")
    running = con.execute(
        f"SELECT {job_count_sql('j')} FROM jobs j WHERE j.end_ts IS NULL AND j.start_ts < ? AND {where}",
        [data.filters.hi or dt.datetime(9999, 1, 1), *params],
    ).fetchall()[0][0]
    if running:
        notes.append(f"{running:,} job(s) still running are costed up to the data horizon, {s['as_of']} UTC.")
    if data.previous is not None and data.previous["jobs"] == 0:
        notes.append("No job ran in the previous period: changes against it are n/a.")
    tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    for table in sorted(t for t in tables if t.startswith("rejected")):
        n = con.execute(f'SELECT count(*) FROM "{table}"').fetchall()[0][0]
        if n:
            notes.append(f"{n:,} input row(s) were rejected at ingest (table {table}) and are in no figure.")
    return replace(data, notes=tuple(notes))


# ---------------------------------------------------------------- shared rows


def waste_figures(s: dict[str, Any], previous: dict[str, Any] | None) -> list[tuple[str, str, str]]:
    """(words, this period, change vs the period before) for the three figures every face names apart
    (analytics.waste_jobs.HEADLINE_WORDS): the report's headline, the notices' dry run and mail use it.
    ``s`` and ``previous`` are ``summary --json`` objects."""
    p = previous or {}
    return [
        (
            HEADLINE_WORDS["team_waste_usd"],
            f"{fmt.usd(s['team_waste_usd'])} "
            f"({fmt.share(s['team_waste_usd'], s['spend_usd'] - s['unheld_capacity_usd'])} of the jobs' spend)",
            fmt.change(s["team_waste_usd"], p.get("team_waste_usd"), money=True),
        ),
        (
            HEADLINE_WORDS["unheld_capacity_usd"],
            f"{fmt.usd(s['unheld_capacity_usd'])} ({fmt.share(s['unheld_capacity_usd'], s['spend_usd'])} of spend)",
            fmt.change(s["unheld_capacity_usd"], p.get("unheld_capacity_usd"), money=True),
        ),
        (
            HEADLINE_WORDS["unmeasured_usd"],
            fmt.usd(s["unmeasured_usd"]),
            fmt.change(s["unmeasured_usd"], p.get("unmeasured_usd"), money=True),
        ),
    ]


def headline(data: ReportData) -> list[tuple[str, str, str]]:
    """(figure, this period, change vs the previous period) — the report's first table."""
    s, p = data.summary, data.previous or {}
    rows = [
        ("Spend", fmt.usd(s["spend_usd"]), fmt.change(s["spend_usd"], p.get("spend_usd"), money=True)),
        *waste_figures(s, data.previous),
        (
            "Idle while allocated",
            fmt.usd(s["idle_usd"]),
            fmt.change(s["idle_usd"], p.get("idle_usd"), money=True),
        ),
        (
            "Cancelled by their users (not waste)",
            fmt.usd(s.get("cancelled_usd")),
            fmt.change(s.get("cancelled_usd"), p.get("cancelled_usd"), money=True),
        ),
        ("GPU-hours", fmt.num(s["gpu_hours"]), fmt.change(s["gpu_hours"], p.get("gpu_hours"))),
        (
            "Mean utilization (held GPUs)",
            fmt.pct(s["mean_util_pct"]),
            fmt.change(s["mean_util_pct"], p.get("mean_util_pct"), unit="points"),
        ),
        ("Jobs", f"{s['jobs']:,}", fmt.change(s["jobs"], p.get("jobs"), digits=0)),
    ]
    for key, label in UNIT_COST_KEYS:
        if key in s:
            rows.append((label, fmt.unit_usd(s[key]), fmt.change(s[key], p.get(key), money=True)))
    return rows


def owner(rec: dict[str, Any]) -> str:
    """Who acts on a recommendation, in words: its user (and team), the team for a team-wide item, or the
    cluster's operators (analytics.problems.owner_of decides which)."""
    from analytics.problems import OPERATORS, owner_of

    user, team = rec.get("user_name"), rec.get("team")
    kind, who = owner_of(rec.get("target_type"), rec.get("target"), team, user)
    if kind == OPERATORS:  # capacity nobody held: whoever runs the cluster
        return who
    if rec.get("target_type") == "team" or not user:
        return str(team or "n/a")
    return f"{user} ({team})" if team else str(user)


def definitions(settings: Settings) -> list[tuple[str, str]]:
    """Every figure of the report in words: the recipient has no docs folder, so they travel with it."""
    s = settings
    return [
        (
            "Spend",
            "GPUs × hours inside the period × the price in force for the job's GPU model, pricing tier, cluster "
            "and date, plus paid-for capacity nobody held (clusters that declare capacity). Jobs on GPU models "
            "without a price are not in it (see the data-quality notes).",
        ),
        ("GPU-hours", "Σ GPUs × hours each job held inside the period."),
        (
            "Mean utilization (held GPUs)",
            "time-weighted mean GPU utilization of the samples of GPUs held by jobs (Σ utilization × interval ÷ "
            "Σ interval); GPUs no job held are not in it.",
        ),
        (
            "Idle while allocated",
            f"the cost of GPU time in idle stretches: unbroken runs of at least {s.idle_min_minutes:g} minutes at "
            f"or below {s.idle_util_pct:g} % utilization on a GPU a job held.",
        ),
        (
            "Under-used",
            f"the unused share of measured GPU time below the {s.target_util_pct:g} % target utilization: "
            f"cost × ({s.target_util_pct:g} − utilization) ÷ {s.target_util_pct:g} for samples under the target.",
        ),
        (
            "Failed runs (badput)",
            "the whole cost of training, fine-tune and other jobs that ended FAILED, CANCELLED, TIMEOUT, OOM, "
            "NODE_FAIL, BOOT_FAIL or DEADLINE.",
        ),
        (
            "Capacity no job held (unallocated)",
            "declared capacity GPU-hours minus the GPU-hours jobs held, at the cluster's price: the platform's "
            "to release or fill, not a team's waste.",
        ),
        (
            "No telemetry (unmeasured)",
            "held time with no utilization reading: neither productive nor waste, because it is unknown.",
        ),
        (
            "Productive",
            "the rest of the measured cost: spend = productive + the waste parts + unmeasured, to the cent.",
        ),
        (
            "Waste teams control",
            "idle while allocated + under-used + failed runs (badput): time the teams' own jobs held. Capacity no "
            "job held and unmeasured time are figures of their own, never added to it.",
        ),
        (
            "Change",
            "this period's figure minus the same figure for the period of equal length just before it (the week "
            "before, for a weekly report), and that difference as a share of the earlier figure.",
        ),
        (
            "$ / week (actions)",
            "what the change would have saved on this period's jobs, priced at each job's own rate, × 7 ÷ the "
            "period's days. Two actions can concern the same dollars (stopping a notebook also reclaims its idle "
            "time), so the total counts each dollar once.",
        ),
        (
            "One-off (actions)",
            "an action on a run whose family (one user's runs sharing a name stem) ran only once in the ledger up to "
            "the data horizon: it says what it would have saved, once, not per week. Families with two or more runs, "
            "notebooks, services, a user's habits and a cluster's capacity recur. Decided by the run's history, not "
            "by the report's dates, so a week's one-offs are part of the month's.",
        ),
        (
            "Coverage",
            "the share of this period's waste dollars that at least one action addresses, each dollar once.",
        ),
        (
            "Training $ per 1M tokens",
            "the spend of training and fine-tune jobs that logged a token count ÷ their tokens inside the "
            "period × 10⁶.",
        ),
        (
            "Inference $ per 1M generated tokens",
            "the spend of inference jobs that logged generated tokens ÷ those tokens inside the period × 10⁶.",
        ),
        (
            "$ per epoch",
            "the spend of jobs that logged epochs ÷ their epochs inside the period (work is assumed spread "
            "evenly over a job).",
        ),
        (
            "Run family",
            f"the runs of one model on one GPU model; recurring = ran this week and in {TREND_MIN_WEEKS} or more "
            f"of the last {TREND_WEEKS} weeks (this one included).",
        ),
        (
            "Energy",
            "from the GPUs' energy counters, else power × time, over the jobs' samples (GPU board energy only: "
            "no CPUs, cooling or network).",
        ),
        ("CO2e", f"energy × {s.gco2e_per_kwh:g} g CO2e per kWh (the settings' grid intensity)."),
        (
            "Energy $",
            f"energy × ${s.usd_per_kwh:g} per kWh (the settings' electricity price); already inside a GPU-hour price, shown for information.",
        ),
    ]
