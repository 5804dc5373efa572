"""Every dashboard page, loaded in real Chromium from the real server: real content, no exception box.

The Overview's spend must equal ``gpuledger summary --json``'s ``spend_usd`` for the same filters, set
through the URL query string (so a copied link reproduces the view).
"""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import (
    Server,
    assert_clean,
    assert_no_exception,
    navigate,
    open_page,
    screenshot,
)

PAGES = [
    ("", "overview", ["Spend per team per week", "Held-GPU utilization", "Where the money went"]),
    ("waste", "waste", ["By team", "By week", "Jobs that wasted the most"]),
    ("jobs", "jobs", ["Sort by", "Click a row to open the job"]),
    ("fleet", "fleet", ["Utilization per hour", "GPUs idle longest", "By GPU model"]),
    (
        "recommendations",
        "recommendations",
        ["one per problem", "/ week", "Click a line for its evidence", "Diagnoses"],
    ),
    ("training", "training", ["Runs", "$ per 1M tokens by week", "Batch size"]),
    ("upload", "upload", ["Upload a file", "Accepted formats"]),
    ("reports", "reports", ["Weekly report", "Headline", "Spend and waste by team", "HTML (mail)"]),
    ("whatif", "whatif", ["What if", "Take these recommendations", "Changes and assumptions"]),
    ("budgets", "budgets", ["Budgets", "budget", "This month without a budget", "The fleet"]),
    (
        "guard",
        "guard",
        [
            "Replay a policy over history",
            "Example policy (not configured)",
            "To turn it on",
            "What the guard did",
        ],
    ),
    ("settings", "settings", ["Prices in force", "Thresholds", "Clusters"]),
]


def metric_value(page: Page, label: str) -> str:
    metric = page.get_by_test_id("stMetric").filter(
        has=page.get_by_test_id("stMetricLabel").get_by_text(label, exact=True)
    )
    return metric.get_by_test_id("stMetricValue").inner_text().strip()


def money(value: float) -> str:
    return f"${value:,.2f}"


def test_every_page_loads_with_real_content(page: Page, server: Server, subtests: pytest.Subtests) -> None:
    """Every page, reached from the Overview by its sidebar link (each page's own URL is opened directly by
    the Product pages tests); each page is its own subtest, so one broken page does not hide the others."""
    open_page(page, server)
    for path, name, texts in PAGES:
        with subtests.test(page=name):
            if path:
                navigate(page, path)
            main = page.locator("[data-testid='stMain']")
            for text in texts:  # waits for elements drawn after the run (the Reports preview)
                expect(main).to_contain_text(text, timeout=20_000)
            screenshot(page, f"page-{name}")
            assert_no_exception(page)
            body = main.inner_text()
            assert "not available" not in body, body[:500]
            assert_clean(body)  # no None, nan or minus zero (Product pages check the same on a filtered view)
            for text in texts:
                assert text in body, f"{name}: {text!r} missing"
            if not path:  # the Overview opens on the last complete week: its spend is summary --json's
                week = server.summary("--since", "2026-11-16", "--until", "2026-11-22")
                assert metric_value(page, "Spend") == money(week["spend_usd"])


def test_filters_in_the_url_reproduce_the_view_and_survive_moving_to_another_page(
    page: Page, server: Server
) -> None:
    query = "since=2026-11-17&until=2026-11-24&team=nlp"
    open_page(page, server, query=query)
    screenshot(page, "page-overview-filtered")
    assert_no_exception(page)
    view = ("--since", "2026-11-17", "--until", "2026-11-24", "--team", "nlp")
    expected = server.summary(*view)
    # by hand: in tests/fixtures/dashboard/jobs.csv only dash-2 (team nlp, 1 × H100-SXM-80GB, 12 h, on
    # 2026-11-17) is in this view: 1 × 12 h × $2.99 (shipped on-demand H100 price) = $35.88
    assert expected["spend_usd"] == pytest.approx(1 * 12 * 2.99)
    assert metric_value(page, "Spend") == money(expected["spend_usd"])
    assert metric_value(page, "GPU-hours") == "12.0"
    sidebar = page.get_by_test_id("stSidebar").inner_text()
    assert "nlp" in sidebar
    # the sidebar link to another page keeps the view: the URL still names it, the figures are its own
    before = page.url.split("?", 1)[1]
    navigate(page, "waste")
    assert page.url.split("?", 1)[1] == before and "team=nlp" in before, page.url
    assert metric_value(page, "Waste teams control") == money(expected["team_waste_usd"])
