"""The budgets as a page shows them: one line each (the Overview's card and the Budgets page's head) and the
chart of a period's spend against its budget and forecast. Figures from gpuledger/budgets/status.py, through
pages/_data.py, so they are `gpuledger budgets --json`'s."""

from __future__ import annotations

import datetime as dt
from typing import Any

import plotly.graph_objects as go
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


def chart(b: dict[str, Any]) -> go.Figure:
    """Cumulative spend of the period's days, the forecast to its end with the 75 % interval, and the budget."""
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
    fig.add_hline(y=b["budget_usd"], line={"color": "#d62728"}, annotation_text="budget")
    fig.update_layout(height=260, margin={"t": 10, "b": 10, "l": 10, "r": 10}, legend={"orientation": "h"})
    fig.update_yaxes(tickprefix="$", separatethousands=True, rangemode="tozero")
    return fig
