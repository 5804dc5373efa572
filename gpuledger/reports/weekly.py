"""The weekly cost report: one self-contained document a lead can mail on, in five formats.

Content (gpuledger/reports/content.py, in this order): the headline with its change against the previous
week, the top actions with $ per week, owner and coverage, spend and waste by part, team, user and GPU
model, the costliest jobs, $ per 1M tokens and $ per epoch trends of recurring run families, energy and
CO2e, data-quality notes, and the definition of every figure. Every number comes from the analytics
functions behind ``gpuledger summary --json``, ``jobs --json`` and ``recommend --json``.

Formats: ``html`` (mail-safe: inline styles, table-cell bar charts, no scripts or SVG; reports/html.py),
``md`` (every string escaped; reports/markdown.py), ``txt`` (the mail's plain-text part), ``csv`` and
``json`` (reports/tabular.py). This module keeps the entry points the CLI and the Reports page use.
"""

from __future__ import annotations

import duckdb

from analytics.filters import Filters
from gpuledger.ledger.errors import LedgerError
from gpuledger.ledger.settings import Settings
from gpuledger.ledger.text import neutral_lines
from gpuledger.reports.content import (
    ReportData,
    collect,
    default_title,
    last_full_week,
    previous_period,
    week_range,
)
from gpuledger.reports.html import render_html
from gpuledger.reports.markdown import render_markdown, render_text
from gpuledger.reports.tabular import render_csv, render_json

__all__ = [
    "FORMATS",
    "ReportData",
    "build_report",
    "collect",
    "default_title",
    "last_full_week",
    "previous_period",
    "render",
    "render_csv",
    "render_html",
    "render_json",
    "render_markdown",
    "render_text",
    "week_range",
]

FORMATS = ("html", "md", "csv", "json", "txt")
RENDERERS = {
    "html": render_html,
    "md": render_markdown,
    "csv": render_csv,
    "json": render_json,
    "txt": render_text,
}
MIME = {
    "html": "text/html",
    "md": "text/markdown",
    "csv": "text/csv",
    "json": "application/json",
    "txt": "text/plain",
}


def render(data: ReportData, fmt: str) -> str:
    """``data`` in one of FORMATS."""
    if fmt not in RENDERERS:
        raise LedgerError(f"unknown report format {fmt!r}; use one of {', '.join(FORMATS)}")
    # the names in it went through neutral_frame (content.collect); this pass holds for any other text
    return neutral_lines(RENDERERS[fmt](data))


def build_report(
    con: duckdb.DuckDBPyConnection, *, filters: Filters, settings: Settings, fmt: str = "html"
) -> str:
    """The report as one string in ``fmt`` (one of FORMATS)."""
    if fmt not in RENDERERS:
        raise LedgerError(f"unknown report format {fmt!r}; use one of {', '.join(FORMATS)}")
    return render(collect(con, filters=filters, settings=settings), fmt)
