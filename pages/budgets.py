"""Budgets: each ``[[budget]]``'s spend so far, its forecast to the period's end with a 75 % interval, and
where it stands (the figures of ``gpuledger budgets``; docs/metrics.md "Budgets and forecasts")."""

from __future__ import annotations

import streamlit as st

from pages import _budget_view, _data, _ui, _view

filters = _view.open_page("Budgets", caption=False)
rows = _data.budgets(filters)
if not rows:
    st.info(
        'No budget for this view. Add one to the settings, e.g. `[[budget]]` with `team = "nlp"`, '
        '`amount_usd = 12000` and `period = "month"` (docs/settings.md); `gpuledger budgets --forecast '
        "team:NAME` forecasts any team without one."
    )
    _budget_view.without_budgets(filters)
    st.stop()
st.caption(
    f"As of {rows[0]['as_of']}, the ledger's last day. The forecast adds each day left at the team's weekly rhythm "
    "times its recent level; the band holds the actual total 3 times in 4 (docs/metrics.md). "
    "The same figures: `gpuledger budgets --json`."
)
for i, b in enumerate(rows):
    with st.container(border=True, key=f"budget_{i}"):
        st.markdown(f"{_budget_view.ICON[b['status']]} {_budget_view.line(b)}")
        a, c, d = st.columns(3)
        a.metric("Spent", _ui.usd(b["spent_usd"]), f"{b['spent_pct']:.1f} % of budget", delta_color="off")
        c.metric(
            "Forecast", _ui.usd(b["forecast_usd"]), f"{b['forecast_pct']:.1f} % of budget", delta_color="off"
        )
        d.metric(
            "Budget",
            _ui.usd(b["budget_usd"]),
            f"{b['days_elapsed']} of {b['days_in_period']} days",
            delta_color="off",
        )
        _ui.plotly_chart(_budget_view.chart(b), key=f"budget_chart_{i}")
