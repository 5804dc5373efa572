"""The report as an ordered list of sections (text, tables, bar charts), in the issue's order, built once from
:class:`~gpuledger.reports.content.ReportData`; the HTML, Markdown and plain-text renderers only lay it out.

Cells and sentences are plain, unescaped text: every renderer escapes all of it for its own format, so a
team called ``<script>`` or ``[click](https://evil.example)`` is inert everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuledger.ledger.palette import (
    NOT_A_TEAM,
    NOT_A_TEAM_LABELS,
    PART_COLOURS,
    SPEND_COLOUR,
    WASTE_COLOUR,
    is_team,
    team_colours,
)
from gpuledger.reports import fmt
from gpuledger.reports.content import (
    TOP_ACTIONS,
    TOP_ROWS,
    UNALLOCATED,
    WASTE_PARTS,
    ReportData,
    definitions,
    headline,
    kind_label,
    owner,
)

# colours: the one palette of pages and report (gpuledger/ledger/palette.py)


@dataclass(frozen=True)
class Table:
    headers: list[str]
    rows: list[list[str]]
    numeric: frozenset[int] = frozenset()


@dataclass(frozen=True)
class Bar:
    """One bar of a chart: its label, its segments (value, colour, legend name) and the text at its end."""

    label: str
    segments: list[tuple[float, str, str]]
    text: str


@dataclass(frozen=True)
class Section:
    title: str
    paragraphs: list[str] = field(default_factory=list)
    bars: list[Bar] = field(default_factory=list)
    table: Table | None = None
    bullets: list[str] = field(default_factory=list)
    empty: str = "None in this period."


def scope(data: ReportData) -> str:
    f = data.filters
    return "; ".join(
        [
            f"UTC days {f.since or 'first'} to {f.until or 'latest'}",
            "teams: " + (", ".join(f.teams) or "all"),
            "clusters: " + (", ".join(f.clusters) or "all"),
        ]
    )


def _period_word(data: ReportData) -> str:
    return "week" if "week " in data.title else "period"


def as_of_text(data: ReportData) -> str:
    as_of = data.summary.get("as_of")
    return f"Data up to {as_of} UTC." if as_of else "No data yet: the ledger is empty."


def _without_change(table: Table, data: ReportData) -> Table:
    """An open-ended view has no previous period: the change column goes."""
    if data.previous is not None:
        return table
    return Table(table.headers[:2], [r[:2] for r in table.rows], frozenset(i for i in table.numeric if i < 2))


def _headline(data: ReportData) -> Section:
    word = _period_word(data)
    prev = data.previous
    paragraphs = []
    if prev is not None:
        pf = prev["filters"]
        paragraphs.append(f"Change against the previous {word}, {pf['since']} – {pf['until']}.")
    return Section(
        "Headline",
        paragraphs=paragraphs,
        table=_without_change(
            Table(
                ["Figure", f"This {word}", f"Change vs previous {word}"],
                [list(r) for r in headline(data)],
                frozenset({1, 2}),
            ),
            data,
        ),
    )


def _actions(data: ReportData) -> Section:
    sv = data.savings
    recurring = sv.get("recurring_items", sv["items"])
    text = (
        f"Possible savings: {fmt.usd(sv['total_usd_per_week'])} / week from {recurring:,} recurring action(s), "
        "each dollar counted once."
    )
    if sv.get("one_off_items"):
        text += (
            f" {sv['one_off_items']:,} one-off action(s) would have saved {fmt.usd(sv['one_off_saved_usd'])} "
            "in this period (not a weekly figure)."
        )
    paragraphs = [text]
    cov = data.coverage
    if cov is not None and cov.get("addressable_usd"):
        waste, addressed = cov.get("addressable_usd"), cov.get("addressed_usd")
        paragraphs.append(
            f"Coverage: these actions address {fmt.share(addressed, waste)} of this period's waste teams "
            f"control and capacity no job held ({fmt.usd(addressed)} of {fmt.usd(waste)})."
        )
    rows = []
    for i, r in enumerate(data.recommendations.iter_rows(named=True)):
        once = r.get("recurring") is False
        money = f"{fmt.usd(r['saving_usd'])} once" if once else fmt.usd(r["usd_per_week"])
        rows.append(
            [
                str(i + 1),
                kind_label(str(r["kind"])),
                owner(r),
                money,
                str(r["confidence"]),
                f"{r['action']} {r['evidence']}",
            ]
        )
    return Section(
        f"Top {TOP_ACTIONS} actions",
        paragraphs=paragraphs,
        table=Table(
            ["#", "Action", "Owner", "$ / week", "Confidence", "What to do, and what we saw"],
            rows,
            frozenset({3}),
        ),
        empty="No action found for this period.",
    )


def _group_section(data: ReportData, title: str, frame_key: str, key: str, label: str, bars: bool) -> Section:
    frame = getattr(data, frame_key)
    spend = data.summary["spend_usd"]
    rows, chart = [], []
    colours = team_colours(frame[key].to_list()) if key == "team" else {}
    unheld = key != "user_name"
    for r in frame.iter_rows(named=True):
        name = r[key]
        shown = NOT_A_TEAM_LABELS.get(name, str(name)) if key in ("team", "user_name") else str(name)
        if name == UNALLOCATED:
            shown = NOT_A_TEAM_LABELS[UNALLOCATED].capitalize()
        held = float(r["spend_usd"] or 0.0) - float(r["unallocated_usd"] or 0.0)  # the jobs' spend
        rows.append(
            [
                shown,
                fmt.usd(r["spend_usd"]),
                fmt.share(r["spend_usd"], spend),
                fmt.usd(r["team_waste_usd"]),
                fmt.share(r["team_waste_usd"], held),
                fmt.usd(r["idle_allocated_usd"]),
                fmt.usd(r["failed_usd"]),
            ]
            + ([fmt.usd(r["unallocated_usd"])] if unheld else [])  # a user holds none: no column
            + (
                [f"{r['top_job_id']} ({r['top_job_name'] or '—'}): {fmt.usd(r['top_job_waste_usd'])}"]
                if "top_job_id" in frame.columns and r.get("top_job_id")
                else [""]
                if "top_job_id" in frame.columns
                else []
            )
        )
        if bars and not is_team(name):  # a pseudo-row: drawn, in its own grey, labelled as no team
            chart.append(
                Bar(
                    f"{NOT_A_TEAM_LABELS.get(name, str(name))}",
                    [(max(0.0, float(r["spend_usd"] or 0.0)), NOT_A_TEAM[name], NOT_A_TEAM_LABELS[name])],
                    fmt.usd(r["spend_usd"]),
                )
            )
        elif bars:
            waste = max(0.0, float(r["team_waste_usd"] or 0.0))
            rest = max(0.0, float(r["spend_usd"] or 0.0) - waste)
            chart.append(
                Bar(
                    shown,
                    [
                        (waste, WASTE_COLOUR, "waste teams control"),
                        (rest, colours.get(name, SPEND_COLOUR), f"{shown}: rest of spend"),
                    ],
                    fmt.usd(r["spend_usd"]),
                )
            )
    return Section(
        title,
        bars=chart,
        table=Table(
            [
                label,
                "Spend",
                "Share of spend",
                "Waste teams control",
                "Of the jobs' spend",
                "Idle",
                "Failed (badput)",
                *(["Capacity no job held"] if unheld else []),
                *(["Costliest wasteful job"] if "top_job_id" in frame.columns else []),
            ],
            rows,
            frozenset({1, 2, 3, 4, 5, 6, 7} if unheld else {1, 2, 3, 4, 5, 6}),
        ),
    )


def _parts(data: ReportData) -> Section:
    s = data.summary
    waste, spend = s["waste"], s["spend_usd"]
    rows = [[label, fmt.usd(waste[key]), fmt.share(waste[key], spend)] for key, label in WASTE_PARTS]
    rows.append(["Total (= spend)", fmt.usd(sum(waste[k] for k, _ in WASTE_PARTS)), ""])
    bar = Bar(
        "Spend",
        [(max(0.0, float(waste[k])), PART_COLOURS[k], label) for k, label in WASTE_PARTS],
        fmt.usd(spend),
    )
    return Section(
        "Where the money went",
        bars=[bar] if spend else [],
        table=Table(["Part", "Cost", "Share of spend"], rows, frozenset({1, 2})),
    )


def _jobs(data: ReportData) -> Section:
    rows = [
        [
            str(r["job_id"]),
            str(r.get("name") or ""),
            str(r.get("user_name") or ""),
            str(r.get("team") or ""),
            f"{fmt.num(r.get('gpu_count'), 0)} × {r.get('gpu_model') or '?'}",
            fmt.num(r["gpu_hours"]),
            fmt.usd(r["cost_usd"]),
            fmt.usd(r["waste_usd"]),
            fmt.pct(r.get("mean_util_pct")),
        ]
        for r in data.costliest_jobs.iter_rows(named=True)
    ]
    return Section(
        f"Costliest {TOP_ROWS} jobs",
        table=Table(
            ["Job", "Name", "User", "Team", "GPUs", "GPU-hours", "Cost", "Waste", "Mean utilization"],
            rows,
            frozenset({5, 6, 7, 8}),
        ),
    )


def _trends(data: ReportData) -> Section:
    if not data.trends:
        return Section(
            "Unit-cost trends of recurring run families",
            empty="No run family ran in two or more of the last weeks with a token or epoch count.",
        )
    weeks = list(data.trends[0].weeks)
    rows = []
    for t in data.trends:
        if any(v is not None for v in t.usd_per_mtok):
            rows.append([t.family, "$ / 1M tokens", *(fmt.unit_usd(v) for v in t.usd_per_mtok)])
        if any(v is not None for v in t.usd_per_epoch):
            rows.append([t.family, "$ / epoch", *(fmt.unit_usd(v) for v in t.usd_per_epoch)])
    return Section(
        "Unit-cost trends of recurring run families",
        paragraphs=["n/a: the family did not run that week, or logged no such count."],
        table=Table(["Run family", "Unit", *weeks], rows, frozenset(range(2, 2 + len(weeks)))),
    )


def _energy(data: ReportData) -> Section:
    s, p = data.summary, data.previous or {}
    word = _period_word(data)
    kwh, prev_kwh = s.get("energy_kwh"), p.get("energy_kwh")
    per = data.settings.usd_per_kwh
    rows = [
        ["Energy", fmt.num(kwh, 1, "kWh"), fmt.change(kwh, prev_kwh)],
        ["CO2e", fmt.num(s.get("co2e_kg"), 1, "kg"), fmt.change(s.get("co2e_kg"), p.get("co2e_kg"))],
        [
            "Energy $",
            fmt.usd(None if kwh is None else kwh * per),
            fmt.change(
                None if kwh is None else kwh * per, None if prev_kwh is None else prev_kwh * per, money=True
            ),
        ],
    ]
    return Section(
        "Energy and CO2e",
        table=_without_change(
            Table(["Figure", f"This {word}", f"Change vs previous {word}"], rows, frozenset({1, 2})), data
        ),
    )


def _guard(data: ReportData) -> Section:
    """The guard's line (gpuledger guard run --enforce; analytics/guard_actions.py): its own section, shown only
    in a period where the guard took a step."""
    from analytics.guard_actions import saved_line

    return Section("Idle jobs the guard acted on", paragraphs=[saved_line(data.guard or {})])


def _budgets(data: ReportData) -> Section:
    """Each budget of the view as of the report's last day: spent, budget, forecast with its interval, status
    (gpuledger/budgets/status.py: the numbers of ``gpuledger budgets --as-of``)."""
    rows = [
        [
            f"{b['name']} ({b['period_label']})",
            fmt.usd(b["spent_usd"]),
            fmt.usd(b["budget_usd"]),
            f"{b['spent_pct']:.1f} %",
            f"{fmt.usd(b['forecast_usd'])} ({fmt.usd(b['forecast_low_usd'])}–{fmt.usd(b['forecast_high_usd'])})",
            {"ok": "on track", "at_risk": "forecast over", "over": "over budget"}[b["status"]],
        ]
        for b in data.budgets
    ]
    return Section(
        "Budgets",
        paragraphs=[
            f"As of {data.budgets[0]['as_of']}; the forecast runs to the period's end (75 % interval)."
        ]
        if data.budgets
        else [],
        table=Table(
            ["Budget", "Spent", "Budget", "Used", "Forecast", "Status"], rows, frozenset({1, 2, 3, 4})
        )
        if rows
        else None,
        empty="No budget for this view ([[budget]] in the settings).",
    )


def _notes(data: ReportData) -> Section:
    return Section(
        "Data-quality notes", bullets=list(data.notes), empty="Nothing to note: every figure is complete."
    )


def _definitions(data: ReportData) -> Section:
    return Section(
        "What the figures mean",
        table=Table(["Figure", "Definition"], [[k, v] for k, v in definitions(data.settings)]),
    )


def _items(data: ReportData) -> Section:
    """New, still open and done items of the week, measured savings (gpuledger/reports/items_section.py)."""
    from gpuledger.reports.items_section import lines

    g = data.items
    if g is None:
        return Section("Actions: new, still open, done", empty="No complete week scanned yet.")
    by = lines(g)
    bullets = [
        f"{word}: {text}"
        for word, key in (
            ("New", "new"),
            ("Still open", "still_open"),
            ("Done", "done"),
            ("Measured", "measured"),
        )
        for text in by[key]
    ]
    return Section(
        f"Actions: new, still open, done ({g['week']})",
        paragraphs=[
            f"{len(g['new'])} new, {len(g['still_open'])} still open, {len(g['done'])} done this week. "
            f"Measured savings in {g['quarter']} so far: {fmt.usd(g['quarter_measured_usd'])} "
            f"(done items now save {fmt.usd(g['measured_usd_per_week'])}/week, measured)."
        ],
        bullets=bullets,
    )


def sections(data: ReportData) -> list[Section]:
    """The report's content in order: headline, actions, spend and waste (parts, teams, users, GPU models),
    costliest jobs, unit-cost trends, energy, data-quality notes, definitions."""
    return [
        _headline(data),
        _actions(data),
        _items(data),
        _parts(data),
        _group_section(data, "Spend and waste by team", "by_team", "team", "Team", bars=True),
        _group_section(
            data,
            f"Users by the waste teams control (top {TOP_ROWS})",
            "by_user",
            "user_name",
            "User",
            bars=False,
        ),
        _group_section(
            data, "Spend and waste by GPU model", "by_gpu_model", "gpu_model", "GPU model", bars=False
        ),
        _jobs(data),
        _trends(data),
        *([_budgets(data)] if data.budgets else []),
        _energy(data),
        *([_guard(data)] if data.guard else []),
        _notes(data),
        _definitions(data),
    ]


def footer(data: ReportData) -> str:
    return (
        f"Generated by gpuledger on {data.generated_at} UTC. {as_of_text(data)} "
        "The same numbers: gpuledger summary --json with the same filters; every figure is defined above."
    )
