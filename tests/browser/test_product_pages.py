"""The dashboard as a product, in real Chromium at 1440×900: every figure checked against the CLI's ``--json``
for the same filters (``summary --json``, ``jobs --json``, ``recommend --total --json``), and a screenshot of
each page in test-artifacts/ (product-*.png) for a person to look at.

The ledger is the browser suite's (conftest.py): a two-day demo fleet (2026-11-21 – 2026-11-22) and
tests/fixtures/dashboard/jobs.csv (2026-11-16 – 2026-11-21).
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Locator, Page, expect

from tests.browser.conftest import (
    NAV,
    Server,
    assert_clean,
    assert_no_exception,
    choose,
    navigate,
    new_context,
    open_page,
    screenshot,
    wait_for_app,
)

VIEW = "since=2026-11-21&until=2026-11-22"
PREVIOUS = ("--since", "2026-11-19", "--until", "2026-11-20")  # the two days before VIEW


def goto(page: Page, server: Server, path: str = "", query: str = "") -> str:
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(f"{server.url}/{path}" + (f"?{query}" if query else ""))
    wait_for_app(page)
    # a deep link as a session's first request reruns once through app.py (pages/_ui.require_router)
    page.wait_for_selector("[data-testid='stMain'] h1", timeout=60_000)
    wait_for_app(page)
    assert_no_exception(page)
    return main_text(page)


@pytest.fixture(scope="module")
def view(browser: Browser, server: Server) -> Iterator[Page]:
    """One browser session over VIEW, opened by its link on the Overview, for the tests that read a page of
    that view: each moves to its page by the sidebar link (:func:`at`), as a person does. A move costs the
    browser about a third of a fresh load, and the server runs the page once, not twice as for a deep link.
    The deep links themselves are tested too: the Overview's here, a job's and the other pages' below."""
    context = new_context(browser, viewport={"width": 1440, "height": 900})
    pg = context.new_page()
    open_page(pg, server, "", VIEW)
    yield pg
    context.close()


def at(page: Page, path: str) -> str:
    """Move ``page`` to the view's page ``path`` (unless it shows it already) and return its text."""
    heading = page.locator("[data-testid='stMain'] h1").first
    if heading.inner_text().strip() != NAV[path][1]:
        navigate(page, path)
    assert "since=2026-11-21" in page.url and "until=2026-11-22" in page.url, page.url  # the view's filters
    assert_no_exception(page)
    return main_text(page)


def shots(page: Page, name: str) -> None:
    """product-NAME.png at 1440×900 (what one sees first) and product-NAME-full.png, the whole page (the
    viewport stretched to the page's height: Streamlit scrolls inside its own container)."""
    if screenshot(page, f"product-{name}") is None:
        return  # screenshots not asked for (tests/browser/conftest.py)
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


def metric_box(page: Page, label: str) -> Locator:
    return page.get_by_test_id("stMetric").filter(
        has=page.get_by_test_id("stMetricLabel").get_by_text(label, exact=True)
    )


def metric(page: Page, label: str) -> tuple[str, str | None]:
    box = metric_box(page, label)
    value = box.get_by_test_id("stMetricValue").inner_text().strip()
    d = box.get_by_test_id("stMetricDelta")
    return value, (d.inner_text().strip() if d.count() else None)


def expect_metric(page: Page, label: str, value: str) -> None:
    """Wait (up to 60 s) for a metric to read ``value``: after a widget changes, the page's rerun may not
    have begun when the script state first reads "notRunning", so wait for the figure itself."""
    expect(metric_box(page, label).get_by_test_id("stMetricValue")).to_have_text(value, timeout=60_000)


def money(v: float) -> str:
    return f"${v:,.2f}"


def money_delta(now: float, before: float) -> str:
    diff = now - before
    sign = "-" if diff < 0 else "+"
    text = f"{sign}${abs(diff):,.2f}"
    return text + (f" ({100.0 * diff / before:+,.1f} %)" if before else "")  # no % against $0


def json_cli(server: Server, *args: str) -> object:
    return json.loads(server.cli(*args, "--json").stdout)


def test_overview_deltas_actions_and_capacity(view: Page, server: Server) -> None:
    page = view
    text = at(page, "")
    shots(page, "overview")
    assert_clean(text)
    now = json_cli(server, "summary", "--since", "2026-11-21", "--until", "2026-11-22")
    before = json_cli(server, "summary", *PREVIOUS)
    # the waste teams control (idle + under-used + badput) apart from the capacity no job held (issue 37)
    for figures in (now, before):
        w = figures["waste"]
        figures["team_waste_usd"] = w["idle_allocated_usd"] + w["underused_usd"] + w["failed_usd"]
        figures["unallocated_usd"] = w["unallocated_usd"]
    for label, key in (
        ("Spend", "spend_usd"),
        ("Waste teams control", "team_waste_usd"),
        ("Capacity no job held (platform)", "unallocated_usd"),
    ):
        value, d = metric(page, label)
        assert value == money(now[key])
        assert d is not None and d.endswith(money_delta(now[key], before[key])), (label, d)
    value, d = metric(page, "GPU-hours")
    assert value == f"{now['gpu_hours']:,.1f}"
    assert d is not None and d.startswith(f"{now['gpu_hours'] - before['gpu_hours']:+,.1f}")
    assert "changes vs 2026-11-19 – 2026-11-20" in text
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
    # unallocated capacity is drawn as itself, never as a team
    legend = page.locator("[data-testid='stPlotlyChart'] .legend").first.text_content() or ""
    assert "capacity no job held (no team)" in legend
    assert "unallocated" not in legend.replace("capacity no job held (no team)", "")
    page.get_by_role("link", name="All recommendations").click()
    page.wait_for_url("**/recommendations**")
    assert "since=2026-11-21" in page.url


VIEW_ARGS = ("--since", "2026-11-21", "--until", "2026-11-22")


JOB = "atlas/410012"  # the demo's over-allocated whisper fine-tune: 8 GPUs, idle stretches on most of them


def test_job_url_opens_the_job_with_its_timeline(page: Page, server: Server) -> None:
    text = goto(page, server, "jobs", f"job={JOB}")
    shots(page, "job")
    assert_clean(text)
    row = next(r for r in json_cli(server, "jobs") if r["job_id"] == JOB)
    assert f"Job {JOB}" in text
    assert metric(page, "Cost")[0] == money(row["cost_usd"])
    assert metric(page, "Idle $")[0] == money(row["idle_allocated_usd"])
    assert metric(page, "Waste $")[0] == money(row["waste_usd"])
    # the timeline: one utilization line per GPU (8 ≤ MAX_LINES), memory below, idle stretches shaded
    # (expect retries: plotly draws into the element a moment after Streamlit's run has ended)
    chart = page.get_by_test_id("stPlotlyChart").first
    expect(chart.locator(".scatterlayer .trace")).to_have_count(2 * int(row["gpu_count"]), timeout=30_000)
    expect(chart.locator(".shapelayer path").first).to_be_attached(timeout=30_000)
    # the stretches' $ add up to the job's idle $
    assert f"{money(row['idle_allocated_usd'])} in all" in text
    # the section is headed by the job's kind (a fine-tune is not "Training metrics")
    kind_heading = {"training": "Training metrics", "fine-tune": "Fine-tuning metrics"}[row["kind"]]
    for heading in (kind_heading, "Diagnoses", "Recommendations"):
        assert heading in text


def test_jobs_row_click_opens_the_job(view: Page, server: Server) -> None:
    page = view
    text = at(page, "jobs")
    shots(page, "jobs")
    assert_clean(text)
    first = json_cli(server, "jobs", *VIEW_ARGS)[0]  # the costliest job: the table's first row
    grid = page.get_by_test_id("stDataFrame").first
    box = grid.bounding_box()
    assert box is not None
    page.mouse.click(box["x"] + 14, box["y"] + 35 + 17)  # the first row's selection cell
    page.wait_for_url("**job=**", timeout=30_000)
    page.get_by_role("heading", name=f"Job {first['job_id']}").wait_for(timeout=60_000)
    wait_for_app(page)
    assert "since=2026-11-21" in page.url  # the view's filters stay in the job's URL


def test_waste_waterfall(view: Page, server: Server) -> None:
    page = view
    text = at(page, "waste")
    shots(page, "waste")
    assert_clean(text)
    now = json_cli(server, "summary", *VIEW_ARGS)
    assert metric(page, "Waste teams control")[0] == money(now["team_waste_usd"])
    assert metric(page, "Capacity no job held")[0] == money(now["unheld_capacity_usd"])
    assert "From spend to productive spend" in text
    # spend, five parts taken out of it, productive: seven bars, each part visible
    bars = page.get_by_test_id("stPlotlyChart").first.locator(".bars .point")
    expect(bars).to_have_count(7, timeout=30_000)
    w = now["waste"]
    # by hand: the parts sum to the spend (money never disappears), as the waterfall draws them
    assert sum(w.values()) == pytest.approx(now["spend_usd"], abs=0.01)


def test_fleet_grouped_with_drill_down_and_idle_dollars(view: Page, server: Server) -> None:
    page = view
    text = at(page, "fleet")
    assert_clean(text)
    # the demo has 112 GPUs (> 60): one heatmap row per host, a drill-down into one host's GPUs
    assert "One row per" in text and "one per host, the mean over its GPUs; 112 GPUs in the view" in text
    choose(page, "Open a host", "atlas-n00")
    expect(page.get_by_test_id("stMain")).to_contain_text("the GPUs of host", timeout=60_000)
    wait_for_app(page)
    expect(page.get_by_test_id("stPlotlyChart")).to_have_count(2, timeout=30_000)
    shots(page, "fleet")
    # one definition per label: the idle table's caption says what "idle" means there (pages/fleet.py)
    assert "Idle: at or under 5 % utilization, of any length" in main_text(page)  # the default idle_util_pct


def test_recommendations_grouped_with_coverage(view: Page, server: Server) -> None:
    page = view
    text = at(page, "recommendations")
    shots(page, "recommendations")
    assert_clean(text)
    total = json_cli(server, "recommend", "--total", *VIEW_ARGS)
    assert metric(page, "Possible savings")[0] == f"{money(total['total_usd_per_week'])} / week"
    assert metric(page, "Waste addressed")[0] == f"{total['coverage']['addressed_pct']:.1f} %"
    recs = json_cli(server, "recommend", "--limit", "0", *VIEW_ARGS)
    for r in recs:  # grouped by who acts: each owner of the CLI's list heads its group
        assert ("Team: " if r["owner_type"] == "team" else "Platform: ") + r["owner"] in text
    assert "fewer_gpus" not in text and "busy_but_unproductive" not in text
    assert "Kind" in text and "Mine" in text


def test_reports_preview_is_the_html_report_with_its_chart(page: Page, server: Server) -> None:
    text = goto(page, server, "reports")
    shots(page, "reports")
    assert_clean(text)
    week = json_cli(server, "summary", "--since", "2026-11-16", "--until", "2026-11-22")
    preview = page.get_by_test_id("stHtml").first
    assert money(week["spend_usd"]) in preview.inner_text()  # the headline: summary --json of the week
    assert preview.locator("td[bgcolor]").count() > 3  # the chart: table bars, as mail clients draw them
    for name in ("HTML (mail)", "Markdown", "CSV", "JSON", "plain text"):
        assert page.get_by_test_id("stDownloadButton").filter(has_text=name).count() == 1


def test_what_if_before_and_after(view: Page, server: Server) -> None:
    page = view
    text = at(page, "whatif")
    assert_clean(text)
    now = json_cli(server, "summary", *VIEW_ARGS)
    assert metric(page, "Spend")[0] == money(now["spend_usd"])
    first = json_cli(server, "recommend", *VIEW_ARGS)[0]
    page.get_by_test_id("stMultiSelect").filter(has_text="Take these recommendations").click()
    # the option by its words (the list's first entry is "select all")
    page.get_by_role("option").filter(has_text=f"{first['kind_label']} · {first['target']} · ").first.click()
    page.keyboard.press("Escape")
    # by hand: one item alone counts its whole saving; it comes out of the waste and the spend
    expect_metric(page, "Spend", money(now["spend_usd"] - first["saving_usd"]))
    wait_for_app(page)
    shots(page, "whatif")
    # the saving comes out of the part its kind names: the waste teams control or the capacity no job held
    after = json_cli(server, "whatif", "--take", first["id"], *VIEW_ARGS)["with_changes"]
    assert metric(page, "Waste teams control")[0] == money(after["team_waste_usd"])
    # the change is listed with its saving (the sentence "every saved dollar was waste" went with the what-if
    # rebuilt on each change's own part, 64e2e75: a saving now names the part it comes out of)
    assert f"{money(first['saving_usd'])} out of the spend" in main_text(page)


def test_upload_a_training_log_asks_for_its_gpus_and_prices_the_run(page: Page, server: Server) -> None:
    from tests.conftest import dataset

    log = dataset("hf-trainer/mistral7b-lora-translator/trainer_state.json")  # names no GPU; 20,388 s runtime
    goto(page, server, "upload")
    page.get_by_test_id("stFileUploaderDropzoneInput").set_input_files(str(log))
    page.get_by_text("Which GPUs ran it?").wait_for(timeout=60_000)
    wait_for_app(page)
    choose(page, "GPU model", "A100-80GB")
    page.get_by_role("button", name="Price the run").click()
    page.get_by_text("Priced as 1 × A100-80GB").wait_for(timeout=60_000)
    wait_for_app(page)
    shots(page, "upload-priced")
    text = main_text(page)
    assert_clean(text)
    # by hand: 20,388 s = 5.6633 h on 1 × A100-80GB at the shipped on-demand $1.79 = $10.14
    assert metric(page, "Spend")[0] == money(20388 / 3600 * 1.79)
    assert metric(page, "GPU-hours")[0] == "5.7"


def test_upload_a_checkpoint_log_without_a_runtime_takes_its_wall_time(page: Page, server: Server) -> None:
    """A checkpoint's trainer_state.json (no train_runtime) says so and asks for the wall time; 8 H100 for
    3.5 h at the shipped on-demand $2.99/GPU-h = 28 GPU-hours, $83.72 (by hand; issue 44 item 8)."""
    from tests.conftest import ROOT

    log = ROOT / "tests" / "fixtures" / "training" / "trl-sft" / "trainer_state.json"
    goto(page, server, "upload")
    page.get_by_test_id("stFileUploaderDropzoneInput").set_input_files(str(log))
    page.get_by_text("records no runtime").wait_for(timeout=60_000)
    wait_for_app(page)
    choose(page, "GPU model", "H100-SXM-80GB")
    page.get_by_role("spinbutton", name="GPUs", exact=True).fill("8")
    page.get_by_role("spinbutton", name="Wall time (hours)").fill("3.5")
    page.get_by_role("button", name="Price the run").click()
    page.get_by_text("Priced as 8 × H100-SXM-80GB for the wall time you gave (3.50 h)").wait_for(
        timeout=60_000
    )
    wait_for_app(page)
    shots(page, "upload-wall-time")
    assert_clean(main_text(page))
    assert metric(page, "Spend")[0] == money(8 * 3.5 * 2.99)
    assert metric(page, "GPU-hours")[0] == "28.0"
    assert metric(page, "Runtime")[0] == "3.5 h (typed)"


def test_upload_of_a_many_gpu_log_draws_a_line_per_host_and_opens_one(
    page: Page, server: Server, tmp_path: Path
) -> None:
    # 70 GPUs on 10 hosts: past the 60 lines a reader can tell apart, one line per host, each opening
    rows = "".join(
        f"2026-11-16 10:{m:02d}:00.000, n{g // 7}, {g % 7}, {(g * 3 + m * 11) % 100} %\n"
        for m in range(4)
        for g in range(70)
    )
    log = tmp_path / "fleet.csv"
    log.write_text("timestamp, hostname, index, utilization.gpu [%]\n" + rows)
    goto(page, server, "upload")
    page.get_by_test_id("stFileUploaderDropzoneInput").set_input_files(str(log))
    expect(page.get_by_test_id("stMain")).to_contain_text(
        "One line per host (10), the time-weighted mean over its GPUs; 70 GPUs in the file.", timeout=60_000
    )
    wait_for_app(page)
    choose(page, "Open a host", "n3")
    wait_for_app(page)
    expect(page.get_by_test_id("stPlotlyChart")).to_have_count(2, timeout=30_000)
    shots(page, "upload-many-gpus")
    assert_clean(main_text(page))


def test_upload_of_more_hosts_than_lines_pools_the_busiest_and_still_opens_them(
    page: Page, server: Server, tmp_path: Path
) -> None:
    # 80 single-GPU hosts, host hNN at NN %: the 59 least busy have a line, the other 21 share one
    rows = "".join(f"2026-11-16 10:{m:02d}:00.000, h{h:02d}, 0, {h} %\n" for m in range(2) for h in range(80))
    log = tmp_path / "hosts.csv"
    log.write_text("timestamp, hostname, index, utilization.gpu [%]\n" + rows)
    goto(page, server, "upload")
    page.get_by_test_id("stFileUploaderDropzoneInput").set_input_files(str(log))
    expect(page.get_by_test_id("stMain")).to_contain_text(
        "One line per host (80; the 59 with the most unused GPU-hours have their own line and the other 21 "
        "share one), the time-weighted mean over its GPUs; 80 GPUs in the file.",
        timeout=60_000,
    )
    wait_for_app(page)
    expect(page.get_by_test_id("stPlotlyChart").first).to_contain_text("21 other hosts", timeout=30_000)
    choose(page, "Open a host", "h75")  # the list of 80 is virtual: choose() types to bring h75 into it
    wait_for_app(page)
    expect(page.get_by_test_id("stPlotlyChart")).to_have_count(2, timeout=30_000)
    shots(page, "upload-many-hosts")
    assert_clean(main_text(page))


def test_upload_of_70_gpus_on_one_host_draws_60_lines(page: Page, server: Server, tmp_path: Path) -> None:
    # no host column: every GPU on the one host the parser assumes, drawn as 59 GPU lines and a pooled one
    uuid = "GPU-{:08d}-1111-2222-3333-444455556666"
    rows = "".join(
        f"2026-11-16 10:{m:02d}:00.000, {g}, {uuid.format(g)}, {g} %\n" for m in range(2) for g in range(70)
    )
    log = tmp_path / "gpus.csv"
    log.write_text("timestamp, index, uuid, utilization.gpu [%]\n" + rows)
    goto(page, server, "upload")
    page.get_by_test_id("stFileUploaderDropzoneInput").set_input_files(str(log))
    expect(page.get_by_test_id("stMain")).to_contain_text(
        "70 GPUs on one host: the 59 with the most unused GPU-hours have their own line and the others share one.",
        timeout=60_000,
    )
    wait_for_app(page)
    expect(page.get_by_test_id("stPlotlyChart").first).to_contain_text("11 other GPUs", timeout=30_000)
    shots(page, "upload-one-host-70-gpus")
    assert_clean(main_text(page))


# Last in the module: a saved threshold rebuilds the ledger's rollup, and restoring it makes the next reader
# rebuild it again, which cost the test after this one ~12 s.
def test_settings_edit_round_trips(page: Page, server: Server) -> None:
    path = Path(server.env["GPULEDGER_SETTINGS"])
    original = path.read_text()
    try:
        text = goto(page, server, "settings")
        shots(page, "settings")
        assert_clean(text)
        assert "Prices in force" in text and "Thresholds" in text
        field = page.get_by_role("spinbutton", name="Idle below (% utilization)")
        # a bad value: the CLI's message, nothing written
        field.fill("150")
        page.get_by_role("button", name="Save thresholds").click()
        # the message comes from the click's run: wait for it, not for a pause between runs
        expect(page.get_by_test_id("stMain")).to_contain_text(
            "setting 'thresholds.idle_util_pct': must be between 0 and 100, got 150.0", timeout=60_000
        )
        wait_for_app(page)
        assert path.read_text() == original
        # a good one: written, read back by the CLI, shown as in force
        page.get_by_role("spinbutton", name="Idle below (% utilization)").fill("10")
        page.get_by_role("button", name="Save thresholds").click()
        # the save's run writes and calls st.rerun(); the script state can read "notRunning" between the two
        # runs, so wait for the second run's message itself (a wrong message still fails after 60 s)
        expect(page.get_by_test_id("stMain")).to_contain_text(
            "thresholds.idle_util_pct 5 → 10", timeout=60_000
        )
        wait_for_app(page)
        assert tomllib.loads(path.read_text())["thresholds"]["idle_util_pct"] == 10.0
        assert page.get_by_role("spinbutton", name="Idle below (% utilization)").input_value() == "10.0"
        shots(page, "settings-saved")
        # applied: the Overview's idle $ is summary --json's under the new threshold
        goto(page, server, "", VIEW)
        now = json_cli(server, "summary", *VIEW_ARGS)
        assert f"idle while allocated {money(now['idle_usd'])}" in main_text(page)
    finally:
        path.write_text(original)
