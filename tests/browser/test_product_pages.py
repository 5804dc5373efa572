"""The dashboard as a product, in real Chromium at 1440×900: every figure checked against the CLI's ``--json``
for the same filters (``summary --json``, ``jobs --json``, ``recommend --total --json``), and a screenshot of
each page in test-artifacts/ (product-*.png) for a person to look at.

The ledger is the browser suite's (conftest.py): a two-day demo fleet (2026-11-21 – 2026-11-22) and
tests/fixtures/dashboard/jobs.csv (2026-11-16 – 2026-11-21).
"""

from __future__ import annotations

import json
import re

from playwright.sync_api import Page

from tests.browser.conftest import Server, assert_no_exception, screenshot, wait_for_app

VIEW = "since=2026-11-21&until=2026-11-22"
PREVIOUS = ("--since", "2026-11-19", "--until", "2026-11-20")  # the two days before VIEW
BAD_TEXT = re.compile(r"\bNone\b|\bnan\b|\bNaN\b|-0\.0\b|\$-0\.00")


def goto(page: Page, server: Server, path: str = "", query: str = "") -> str:
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(f"{server.url}/{path}" + (f"?{query}" if query else ""))
    wait_for_app(page)
    assert_no_exception(page)
    return main_text(page)


def shots(page: Page, name: str) -> None:
    """product-NAME.png at 1440×900 (what one sees first) and product-NAME-full.png, the whole page (the
    viewport stretched to the page's height: Streamlit scrolls inside its own container)."""
    screenshot(page, f"product-{name}")
    height = page.evaluate(
        '() => Math.max(...[...document.querySelectorAll(\'[data-testid="stMain"], '
        '[data-testid="stMainBlockContainer"]\')].map(e => e.scrollHeight))'
    )
    page.set_viewport_size({"width": 1440, "height": min(max(900, int(height) + 80), 12000)})
    page.wait_for_timeout(500)
    screenshot(page, f"product-{name}-full")
    page.set_viewport_size({"width": 1440, "height": 900})


def main_text(page: Page) -> str:
    return page.locator("[data-testid='stMain']").inner_text()


def assert_clean(text: str) -> None:
    found = BAD_TEXT.search(text)
    assert found is None, (
        f"{found.group(0)!r} on the page: …{text[max(0, found.start() - 80) : found.end() + 80]}…"
    )


def metric(page: Page, label: str) -> tuple[str, str | None]:
    box = page.get_by_test_id("stMetric").filter(
        has=page.get_by_test_id("stMetricLabel").get_by_text(label, exact=True)
    )
    value = box.get_by_test_id("stMetricValue").inner_text().strip()
    d = box.get_by_test_id("stMetricDelta")
    return value, (d.inner_text().strip() if d.count() else None)


def money(v: float) -> str:
    return f"${v:,.2f}"


def money_delta(now: float, before: float) -> str:
    diff = now - before
    sign = "-" if diff < 0 else "+"
    text = f"{sign}${abs(diff):,.2f}"
    return text + (f" ({100.0 * diff / before:+,.1f} %)" if before else "")  # no % against $0


def json_cli(server: Server, *args: str) -> object:
    return json.loads(server.cli(*args, "--json").stdout)


def test_overview_deltas_actions_and_capacity(page: Page, server: Server) -> None:
    text = goto(page, server, "", VIEW)
    shots(page, "overview")
    assert_clean(text)
    now = json_cli(server, "summary", "--since", "2026-11-21", "--until", "2026-11-22")
    before = json_cli(server, "summary", *PREVIOUS)
    for label, key in (("Spend", "spend_usd"), ("Waste $", "waste_usd")):
        value, d = metric(page, label)
        assert value == money(now[key])
        assert d is not None and d.endswith(money_delta(now[key], before[key])), (label, d)
    value, d = metric(page, "GPU-hours")
    assert value == f"{now['gpu_hours']:,.1f}"
    assert d is not None and d.startswith(f"{now['gpu_hours'] - before['gpu_hours']:+,.1f}")
    assert "change vs 2026-11-19 – 2026-11-20" in text
    # capacity utilization beside held-GPU utilization, and lower: unheld capacity counts at 0 %
    held, _ = metric(page, "Held-GPU utilization")
    cap, _ = metric(page, "Capacity utilization")
    assert held == f"{now['mean_util_pct']:.1f} %"
    assert float(cap.split()[0]) < float(held.split()[0])
    # the top actions: the first three recurring items of recommend --json, with their $/week
    recs = [r for r in json_cli(server, "recommend", *VIEW_ARGS) if r["usd_per_week"] is not None][:3]
    for r in recs:
        assert f"{money(r['usd_per_week'])} / week" in text
        assert r["kind_label"] in text
    total = json_cli(server, "recommend", "--total", *VIEW_ARGS)
    assert f"save {money(total['total_usd_per_week'])} / week" in text
    assert f"{total['coverage']['addressed_pct']:.1f} % of this view's waste" in text
    page.get_by_role("link", name="All recommendations").click()
    page.wait_for_url("**/recommendations**")
    assert "since=2026-11-21" in page.url


VIEW_ARGS = ("--since", "2026-11-21", "--until", "2026-11-22")


def test_overview_never_draws_unallocated_as_a_team(page: Page, server: Server) -> None:
    goto(page, server, "", VIEW)
    legend = page.locator("[data-testid='stPlotlyChart'] .legend").first.text_content() or ""
    assert "unallocated capacity (no team)" in legend
    assert "unallocated" not in legend.replace("unallocated capacity (no team)", "")
