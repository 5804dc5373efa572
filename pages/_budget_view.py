"""The budgets as a page shows them: one line each (the Overview's card and the Budgets page's head) and the
chart of a period's spend against its budget and forecast. Figures from gpuledger/budgets/status.py, through
pages/_data.py, so they are `gpuledger budgets --json`'s."""

from __future__ import annotations

import datetime as dt
from typing import Any

import plotly.graph_objects as go
import polars as pl
import streamlit as st

from analytics.filters import Filters
from pages import _data, _ui

STATUS = {"ok": "on track", "at_risk": "forecast over budget", "over": "over budget"}
ICON = {"ok": ":material/check_circle:", "at_risk": ":material/warning:", "over": ":material/error:"}


def line(b: dict[str, Any]) -> str:
    """``team:nlp, 2026-11: $23,903.11 of $40,000.00 (59.8 %) · forecast $38,022.26 ($30,962.68 – $45,081.84)``."""
    return (
        f"**{_ui.md(b['name'])}**, {b['period_label']}: {_ui.usd(b['spent_usd'])} of {_ui.usd(b['budget_usd'])} "
        f"({b['spent_pct']:.1f} %) · forecast {_ui.usd(b['forecast_usd'])} "
        f"({_ui.usd(b['forecast_low_usd'])} – {_ui.usd(b['forecast_high_usd'])}) · {STATUS[b['status']]}"
    )


def card(filters: Filters) -> None:
    """The Overview's budget card: nothing when the view has no budget."""
    rows = _data.budgets(filters)
    if not rows:
        return
    with st.container(border=True, key="overview_budgets"):
        st.markdown(f"**Budgets** · as of {rows[0]['as_of']} · [details](budgets)")
        for b in rows:
            st.markdown(f"{ICON[b['status']]} {line(b)}")


def without_budgets(filters: Filters) -> None:
    """A view without a budget: each team's month so far and its forecast to the month's end (and the
    fleet's, with its chart, when the view names no team), as ``gpuledger budgets --forecast`` prints them."""
    rows = _data.month_forecasts(filters)
    if not rows:
        return
    r = rows[0]
    first, last = dt.date.fromisoformat(r["period_start"]), dt.date.fromisoformat(r["period_end"])
    as_of = dt.date.fromisoformat(r["as_of"])
    st.subheader(f"This month without a budget: {r['period_label']}")
    st.caption(
        f"Spent {first.day} {first:%b} – {min(as_of, last).day} {min(as_of, last):%b} (as of {r['as_of']}, the ledger's last day) and the "
        f"forecast to {last.day} {last:%b} with its 75 % interval: each day left at the team's weekly rhythm times its "
        "recent level (docs/metrics.md). A team's spend is its jobs' on every cluster; the fleet's is every "
        "team's plus the capacity no job held. The same figures: "
        + _ui.code("gpuledger budgets --forecast team:NAME --json")
        + " and "
        + _ui.code("--forecast fleet")
        + "."
    )
    _ui.dataframe(forecasts_table(rows), FORECAST_COLUMNS, key="month_forecasts")
    charted = [b for b in rows if b["scope"] == "fleet"] or rows[:3]
    for b in charted:
        who = "The fleet" if b["scope"] == "fleet" else _ui.md(b["target"])
        st.markdown(
            f"**{who}**, {b['period_label']}: {_ui.usd(b['spent_usd'])} so far · forecast "
            f"{_ui.usd(b['forecast_usd'])} ({_ui.usd(b['forecast_low_usd'])} – {_ui.usd(b['forecast_high_usd'])})"
        )
        _ui.plotly_chart(chart(b), key=f"forecast_chart_{b['name']}")


def chart(b: dict[str, Any]) -> go.Figure:
    """Cumulative spend of the period's days, the forecast to its end with the 75 % interval, and the budget
    (a ``budgets --forecast`` row has none)."""
    first, last = dt.date.fromisoformat(b["period_start"]), dt.date.fromisoformat(b["period_end"])
    as_of = dt.date.fromisoformat(b["as_of"])
    days = _data.budget_days(b["scope"], b["target"], first, min(as_of, last))
    xs, ys, total = [], [], 0.0
    d = first
    while d <= min(as_of, last):
        total += days.get(d, 0.0)
        xs.append(d)
        ys.append(total)
        d += dt.timedelta(days=1)
    fig = go.Figure()
    fig.add_scatter(x=xs, y=ys, mode="lines+markers", name="spent", line={"color": "#1f77b4"})
    if as_of < last and xs:
        fig.add_scatter(
            x=[xs[-1], last, last, xs[-1]],
            y=[ys[-1], b["forecast_high_usd"], b["forecast_low_usd"], ys[-1]],
            fill="toself",
            fillcolor="rgba(255,127,14,0.15)",
            line={"width": 0},
            name="forecast, 75 % interval",
            hoverinfo="skip",
        )
        fig.add_scatter(
            x=[xs[-1], last],
            y=[ys[-1], b["forecast_usd"]],
            mode="lines",
            line={"dash": "dash", "color": "#ff7f0e"},
            name="forecast",
        )
    if "budget_usd" in b:  # a forecast without a budget (``budgets --forecast``) draws no budget line
        fig.add_hline(y=b["budget_usd"], line={"color": "#d62728"}, annotation_text="budget")
    fig.update_layout(height=260, margin={"t": 10, "b": 10, "l": 10, "r": 10}, legend={"orientation": "h"})
    fig.update_yaxes(tickprefix="$", separatethousands=True, rangemode="tozero")
    return fig


FORECAST_COLUMNS: dict[str, object] = {
    "spent_so_far_usd": st.column_config.NumberColumn("spent so far ($)", format="dollar"),
    "forecast_usd": st.column_config.NumberColumn("forecast to the month's end ($)", format="dollar"),
    "forecast_low_usd": st.column_config.NumberColumn("75 % interval, low ($)", format="dollar"),
    "forecast_high_usd": st.column_config.NumberColumn("75 % interval, high ($)", format="dollar"),
}


def forecasts_table(rows: list[dict[str, Any]]) -> pl.DataFrame:
    """The ``budgets --forecast`` rows as the Budgets page lists them for a view without a budget."""
    return pl.DataFrame(
        [
            {
                "team": r["target"] if r["scope"] == "team" else "fleet",
                "spent_so_far_usd": r["spent_usd"],
                "forecast_usd": r["forecast_usd"],
                "forecast_low_usd": r["forecast_low_usd"],
                "forecast_high_usd": r["forecast_high_usd"],
            }
            for r in rows
        ],
        schema_overrides={
            "spent_so_far_usd": pl.Float64,
            "forecast_usd": pl.Float64,
            "forecast_low_usd": pl.Float64,
            "forecast_high_usd": pl.Float64,
        },
    )
