"""The weekly cost report: one self-contained file (HTML with inline CSS, or Markdown) a lead can mail on.

It holds the KPI table, spend by team, the waste taxonomy by part, the top recommendations with $ per week
and the jobs that wasted the most — every figure taken from the same analytics functions that
``gpuledger summary --json``, ``jobs --json`` and ``recommend --json`` print, so the report and the CLI agree
to the cent. The HTML has no scripts and no external resources (no CDN, no web fonts); its one chart is an
inline SVG bar chart.
"""

from __future__ import annotations

import datetime as dt
import html
import re
from dataclasses import dataclass
from typing import Any

import duckdb
import polars as pl

from analytics.filters import Filters
from gpuledger.ledger.errors import LedgerError
from gpuledger.ledger.settings import Settings

TOP_RECOMMENDATIONS = 10
TOP_WASTED_JOBS = 10
FORMATS = ("html", "md")

_WEEK = re.compile(r"^(\d{4})-W(\d{2})$")

WASTE_PARTS = (
    ("productive_usd", "Productive"),
    ("idle_allocated_usd", "Idle while allocated"),
    ("underused_usd", "Under-used (below target utilization)"),
    ("failed_usd", "Failed runs"),
    ("unallocated_usd", "Unallocated capacity"),
    ("unmeasured_usd", "No telemetry (unmeasured)"),
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


@dataclass(frozen=True)
class ReportData:
    """Everything the report shows, as computed by the analytics functions."""

    title: str
    filters: Filters
    summary: dict[str, Any]
    by_team: pl.DataFrame  # team, spend_usd, waste_usd
    recommendations: pl.DataFrame  # kind, target, evidence, action, usd_per_week, confidence
    savings: dict[str, Any]  # analytics.savings.savings_total over the whole list: each dollar once
    wasted_jobs: pl.DataFrame  # job_id, team, user_name, name, gpu_model, gpu_count, cost_usd, waste_usd
    generated_at: dt.datetime


def collect(
    con: duckdb.DuckDBPyConnection, *, filters: Filters, settings: Settings, title: str | None = None
) -> ReportData:
    """Run the analyses the report needs, on one reader connection.

    summary → ``analytics.summary.summary``; spend by team → ``analytics.waste.waste_by(by="team")``
    (unallocated capacity appears as its own row, so the rows sum to spend); recommendations →
    ``analytics.recommend.recommendations``; wasted jobs → ``analytics.waste.job_waste`` by waste_usd.
    """
    from analytics.filters import horizon
    from analytics.recommend import recommendations
    from analytics.savings import savings_total
    from analytics.summary import summary
    from analytics.waste import job_waste, waste_by

    as_of = horizon(con)
    by_team = waste_by(con, by="team", filters=filters, settings=settings, as_of=as_of)
    jobs = job_waste(con, filters=filters, settings=settings, as_of=as_of)
    recs = recommendations(con, filters=filters, settings=settings, as_of=as_of)
    return ReportData(
        title=title or default_title(filters),
        filters=filters,
        summary=summary(con, filters=filters, settings=settings, as_of=as_of),
        by_team=by_team.select(pl.col("key").alias("team"), "spend_usd", "waste_usd"),
        recommendations=recs.head(TOP_RECOMMENDATIONS),
        savings=savings_total(recs),
        wasted_jobs=jobs.filter(pl.col("waste_usd") > 0)
        .sort("waste_usd", descending=True)
        .head(TOP_WASTED_JOBS),
        generated_at=dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0),
    )


def default_title(filters: Filters) -> str:
    if filters.since and filters.until:
        y, w, d = filters.since.isocalendar()
        if d == 1 and filters.until - filters.since == dt.timedelta(days=6):
            return f"GPU cost report, week {y}-W{w:02d} ({filters.since} – {filters.until})"
        return f"GPU cost report, {filters.since} – {filters.until}"
    return "GPU cost report, all data"


def build_report(
    con: duckdb.DuckDBPyConnection, *, filters: Filters, settings: Settings, fmt: str = "html"
) -> str:
    """The report as one string in ``fmt`` (``html`` or ``md``)."""
    if fmt not in FORMATS:
        raise LedgerError(f"unknown report format {fmt!r}; use one of {', '.join(FORMATS)}")
    data = collect(con, filters=filters, settings=settings)
    return render_html(data) if fmt == "html" else render_markdown(data)


# ---------------------------------------------------------------- formatting


def usd(value: float | None) -> str:
    return "n/a" if value is None else f"${value:,.2f}"


def _num(value: float | None, digits: int = 1, unit: str = "") -> str:
    if value is None:
        return "n/a"
    return f"{value:,.{digits}f}{unit}"


def kpis(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, value) rows of the KPI table, formatted exactly as on the dashboard's Overview."""
    return [
        ("Spend", usd(summary["spend_usd"])),
        ("GPU-hours", _num(summary["gpu_hours"])),
        ("Mean utilization", _num(summary["mean_util_pct"], 1, " %")),
        ("Idle GPU-hours", _num(summary["idle_gpu_hours"])),
        ("Idle $", usd(summary["idle_usd"])),
        ("Waste $", usd(summary["waste_usd"])),
        ("Jobs", f"{summary['jobs']:,}"),
        ("Unpriced GPU-hours", _num(summary.get("unpriced_gpu_hours"))),
        ("Energy", _num(summary.get("energy_kwh"), 1, " kWh")),
        ("CO2e", _num(summary.get("co2e_kg"), 1, " kg")),
        ("Training $ per 1M tokens", usd(summary.get("training_usd_per_mtok"))),
        ("Inference $ per 1M generated tokens", usd(summary.get("inference_usd_per_mtok_generated"))),
    ]


def _scope(data: ReportData) -> str:
    f = data.filters
    parts = [
        f"UTC days {f.since or 'first'} to {f.until or 'latest'}",
        "teams: " + (", ".join(f.teams) or "all"),
        "clusters: " + (", ".join(f.clusters) or "all"),
    ]
    return "; ".join(parts)


def _bars_svg(rows: list[tuple[str, float]], width: int = 560) -> str:
    """A horizontal bar chart as inline SVG (no scripts): one bar per label, value printed at its end."""
    if not rows:
        return ""
    top = max(v for _, v in rows) or 1.0
    bar_h, gap, label_w, value_w = 18, 6, 140, 110
    plot_w = width - label_w - value_w
    height = len(rows) * (bar_h + gap) + gap
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        'aria-label="spend by team">'
    ]
    for i, (label, value) in enumerate(rows):
        y = gap + i * (bar_h + gap)
        w = max(1.0, plot_w * value / top)
        out.append(
            f'<text x="{label_w - 8}" y="{y + 13}" text-anchor="end" font-size="12">{html.escape(label)}</text>'
            f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="#4f6bed"/>'
            f'<text x="{label_w + w + 6:.1f}" y="{y + 13}" font-size="12">{html.escape(usd(value))}</text>'
        )
    out.append("</svg>")
    return "".join(out)


def _table_html(
    headers: list[str], rows: list[list[str]], numeric: set[int] | None = None, *, narrow: bool = False
) -> str:
    numeric = numeric or set()
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="num">{html.escape(c)}</td>' if i in numeric else f"<td>{html.escape(c)}</td>"
            for i, c in enumerate(r)
        )
        + "</tr>"
        for r in rows
    )
    cls = ' class="narrow"' if narrow else ""
    return f"<table{cls}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _sections(data: ReportData) -> dict[str, tuple[list[str], list[list[str]], set[int]]]:
    """The report's tables as (headers, rows, numeric columns), shared by the HTML and Markdown renderers."""
    s = data.summary
    team_rows = [
        [str(r["team"] or "(none)"), usd(r["spend_usd"]), usd(r["waste_usd"])]
        for r in data.by_team.iter_rows(named=True)
    ]
    waste = s["waste"]
    spend = s["spend_usd"] or 0.0
    waste_rows = [
        [label, usd(waste[key]), _num(100.0 * waste[key] / spend if spend else None, 1, " %")]
        for key, label in WASTE_PARTS
    ]
    waste_rows.append(["Total (= spend)", usd(sum(waste[k] for k, _ in WASTE_PARTS)), ""])
    rec_rows = [
        [
            str(i + 1),
            str(r["kind"]),
            str(r["target"]),
            usd(r["usd_per_week"]),
            str(r["confidence"]),
            f"{r['evidence']} {r['action']}",
        ]
        for i, r in enumerate(data.recommendations.iter_rows(named=True))
    ]
    job_rows = [
        [
            str(r["job_id"]),
            str(r.get("team") or ""),
            str(r.get("user_name") or ""),
            str(r.get("name") or ""),
            f"{_num(r.get('gpu_count'), 0)} × {r.get('gpu_model') or '?'}",
            usd(r["cost_usd"]),
            usd(r["waste_usd"]),
        ]
        for r in data.wasted_jobs.iter_rows(named=True)
    ]
    return {
        "Key figures": (["Figure", "Value"], [list(k) for k in kpis(s)], {1}),
        "Spend by team": (["Team", "Spend", "Wasted"], team_rows, {1, 2}),
        "Where the money went (waste taxonomy)": (["Part", "Cost", "Share of spend"], waste_rows, {1, 2}),
        f"Top {TOP_RECOMMENDATIONS} recommendations (all {data.savings['items']:,} together: "
        f"{usd(data.savings['total_usd_per_week'])} / week, each dollar counted once)": (
            ["#", "Kind", "Target", "$ / week", "Confidence", "Evidence and action"],
            rec_rows,
            {3},
        ),
        f"Top {TOP_WASTED_JOBS} jobs by wasted $": (
            ["Job", "Team", "User", "Name", "GPUs", "Cost", "Wasted"],
            job_rows,
            {5, 6},
        ),
    }


CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;color:#1d2330;max-width:980px;margin:24px auto;padding:0 16px}
h1{font-size:22px;margin-bottom:4px}h2{font-size:16px;margin-top:28px;border-bottom:1px solid #d8dce6;padding-bottom:4px}
.scope{color:#5b6375;font-size:13px}table{border-collapse:collapse;width:100%;font-size:13px}
th,td{border-bottom:1px solid #e6e9f0;padding:5px 8px;text-align:left;vertical-align:top}th{background:#f4f6fa}
td.num{text-align:right;white-space:nowrap}table.narrow{width:auto;min-width:420px}.note{color:#5b6375;font-size:12px;margin-top:24px}
"""


def render_html(data: ReportData) -> str:
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(data.title)}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>{html.escape(data.title)}</h1>",
        f'<p class="scope">{html.escape(_scope(data))}. Data up to {html.escape(str(data.summary.get("as_of")))} UTC.</p>',
    ]
    for title, (headers, rows, numeric) in _sections(data).items():
        parts.append(f"<h2>{html.escape(title)}</h2>")
        if title == "Spend by team":
            chart = [
                (str(r["team"] or "(none)"), float(r["spend_usd"] or 0.0))
                for r in data.by_team.iter_rows(named=True)
            ]
            parts.append(_bars_svg(chart))
        narrow = len(headers) <= 3
        parts.append(
            _table_html(headers, rows, numeric, narrow=narrow) if rows else "<p>None in this period.</p>"
        )
    parts.append(
        f'<p class="note">Generated by gpuledger on {data.generated_at} UTC. Definitions of every figure: '
        "docs/metrics.md and docs/recommendations.md. The same numbers: <code>gpuledger summary --json</code>"
        " with the same filters.</p></body></html>"
    )
    return "\n".join(parts) + "\n"


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(data: ReportData) -> str:
    lines = [f"# {data.title}", "", f"{_scope(data)}. Data up to {data.summary.get('as_of')} UTC.", ""]
    for title, (headers, rows, numeric) in _sections(data).items():
        lines += [f"## {title}", ""]
        if not rows:
            lines += ["None in this period.", ""]
            continue
        lines.append("| " + " | ".join(headers) + " |")
        lines.append("|" + "|".join("---:" if i in numeric else "---" for i in range(len(headers))) + "|")
        lines += ["| " + " | ".join(_md_cell(c) for c in r) + " |" for r in rows]
        lines.append("")
    lines.append(f"Generated by gpuledger on {data.generated_at} UTC. Definitions: docs/metrics.md.")
    return "\n".join(lines) + "\n"
