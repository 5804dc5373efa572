"""The Budgets page and the Overview's budget card in real Chromium: each figure is ``gpuledger budgets --json``'s
for the same settings (issue 47), and a viewer with no budget is told how to add one."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Page

from tests.browser.conftest import Server, assert_clean
from tests.browser.test_product_pages import goto, json_cli, money, shots

BUDGETS = """
[[budget]]
team = "llm-core"
amount_usd = 3000
period = "week"

[[budget]]
fleet = true
amount_usd = 400000
period = "month"
"""


def test_budgets_page_and_overview_card_show_the_cli_figures(page: Page, server: Server) -> None:
    path = Path(server.env["GPULEDGER_SETTINGS"])
    original = path.read_text()
    try:
        text = goto(page, server, "budgets")
        assert "No budget for this view" in text
        path.write_text(original + BUDGETS)
        rows = json_cli(server, "budgets")
        assert isinstance(rows, list) and [r["name"] for r in rows] == ["team:llm-core", "fleet"]
        text = goto(page, server, "budgets")
        shots(page, "budgets")
        assert_clean(text)
        for r in rows:
            want = (
                f"{r['name']}, {r['period_label']}: {money(r['spent_usd'])} of {money(r['budget_usd'])} "
                f"({r['spent_pct']:.1f} %) · forecast {money(r['forecast_usd'])} "
                f"({money(r['forecast_low_usd'])} – {money(r['forecast_high_usd'])})"
            )
            assert want in text, (want, text[:2000])
        assert page.locator(".js-plotly-plot").count() == len(rows)
        overview = goto(page, server, "")
        assert "Budgets · as of" in overview
        assert f"{money(rows[0]['spent_usd'])} of {money(rows[0]['budget_usd'])}" in overview
    finally:
        path.write_text(original)
