"""The Upload page: a real file is analysed at once (in memory); a bad file shows the error sentence."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from playwright.sync_api import Page

from tests.browser.conftest import (
    FIXTURES,
    ROOT,
    Server,
    assert_no_exception,
    open_page,
    screenshot,
    wait_for_app,
)
from tests.conftest import dataset

HEADER = "job_id,user,team,cluster,gpu_model,gpu_count,start,end,state"


def upload(page: Page, server: Server, path: Path) -> str:
    open_page(page, server, "upload")
    page.get_by_test_id("stFileUploaderDropzoneInput").set_input_files(str(path))
    page.wait_for_selector("[data-testid='stAlert']", timeout=60_000)
    wait_for_app(page)
    assert_no_exception(page)
    return page.get_by_test_id("stMain").inner_text()


def test_a_jobs_table_is_analysed_at_once(page: Page, server: Server) -> None:
    body = upload(page, server, FIXTURES / "jobs.csv")
    screenshot(page, "upload-jobs-csv")
    assert "Read jobs.csv as jobs_csv: 5 jobs, 3 training_runs." in body
    # by hand: H100 8×10 + 1×12 + 4×24 = 188 GPU-h × $2.99 = $562.12, L4 2×6 h × $0.71 = $8.52,
    # A10G 1×12 h × $1.006 = $12.07 (shipped on-demand prices): $582.71 over 212 GPU-hours;
    # dash-3 is a FAILED training run, so its $8.52 is waste; no telemetry, so utilization is n/a
    assert "$582.71" in body
    assert "$8.52" in body
    assert "n/a" in body
    assert "212.0" in body  # GPU-hours: 80 + 12 + 12 + 12 + 96


def test_a_real_nvidia_smi_log_shows_its_utilization(page: Page, server: Server) -> None:
    real = dataset("nvidia-smi-csv/eobo0530_vlm_optimization_gpu_log.csv")
    body = upload(page, server, real)
    screenshot(page, "upload-nvidia-smi")
    assert "Read eobo0530_vlm_optimization_gpu_log.csv as" in body
    assert "samples" in body
    assert "Utilization over time" in body


def test_a_bad_file_shows_the_error_and_what_to_do(page: Page, server: Server, tmp_path: Path) -> None:
    bad = tmp_path / "broken_jobs.csv"
    bad.write_text(
        HEADER
        + "\nj1,a,t,c,T4,1,2025-01-01,2025-01-02,COMPLETED\nj2,a,t,c,T4,two,2025-01-01,2025-01-02,COMPLETED\n"
    )
    body = upload(page, server, bad)
    screenshot(page, "upload-bad-file")
    error = page.get_by_test_id("stAlertContentError").inner_text()
    # the page shows the CLI's own sentence (error: FILE:LINE: reason), with the uploaded file's name
    cli = subprocess.run(
        [sys.executable, "-m", "gpuledger", "ingest", str(bad), "--db", str(tmp_path / "scratch.duckdb")],
        cwd=ROOT,
        env=server.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cli.returncode == 1
    sentence = cli.stderr.strip().removeprefix("error: ").replace(str(bad), "broken_jobs.csv")
    assert sentence.startswith("broken_jobs.csv:3: ") and "gpu_count" in sentence
    assert sentence in error
    assert "Fix line 3 (or choose the right file)" in error and "upload it again" in error
    assert "Spend" not in body
