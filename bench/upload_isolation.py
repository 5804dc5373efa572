"""Does one upload stall everyone else? A second browser's Overview while the first uploads a hostile file.

    .venv/bin/gpuledger demo --db /tmp/h34/demo.duckdb                 # a ledger to show (once)
    .venv/bin/python bench/upload_isolation.py --db /tmp/h34/demo.duckdb

Issue 34 measured it on the server before the Upload page's worker process: a 150 KB jobs CSV whose ``state``
cell is 150,000 letters took 177.7 s to refuse, in the server's own process, and a second browser's Overview
took 185.7 s (``/_stcore/health`` timed out three times). Here a real ``streamlit run app.py`` (the command
``gpuledger dashboard`` runs) and headless Debian Chromium (/usr/bin/chromium): browser B loads the Overview
``--runs`` times alone (its usual time, warm: from the page caches, as a reader who stays on the dashboard
sees it), then browser A drops the hostile file on the Upload page and, while it is read, browser B loads the
Overview ``--runs`` times again and the health check is timed. Printed: both medians, their ratio (the
target is about 1: the upload happens in a worker, gpuledger/upload/worker.py), whether A's upload was
still being read during each of B's loads (else the ratio says nothing), and what A's page said in the end.
A bench, not a test: the ratio depends on the machine's load, printed with it.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpuledger.cli.commands.dashboard import streamlit_argv  # noqa: E402
from gpuledger.ledger.db import resolve_db  # noqa: E402

_spec = importlib.util.spec_from_file_location("bench_pages", ROOT / "bench" / "pages.py")
assert _spec is not None and _spec.loader is not None
bench_pages = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_pages)  # its server start and page-load timing, the same as its table's

HEADER = "job_id,user,team,cluster,gpu_model,gpu_count,start,end,state\n"


def hostile_file(folder: Path, letters: int) -> Path:
    """Issue 34's file: one good-looking row whose ``state`` cell is ``letters`` letters long."""
    path = folder / "hostile_jobs.csv"
    path.write_text(HEADER + "j1,a,t,c,T4,1,2025-01-01,2025-01-02," + "A" * letters + "\n")
    return path


def health_s(url: str) -> float:
    """Seconds for ``/_stcore/health`` to answer (the 30-s timeout as issue 34 counted it)."""
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=30):
            pass
    except OSError:
        return float("inf")
    return time.perf_counter() - t0


def still_reading(page: object) -> bool:
    """True while browser A's upload page has not yet shown its outcome (an alert)."""
    return page.locator("[data-testid='stAlert']").count() == 0  # type: ignore[attr-defined]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", required=True, help="the ledger the Overview shows (e.g. the demo)")
    ap.add_argument(
        "--letters", type=int, default=150_000, help="length of the hostile cell (default 150,000)"
    )
    ap.add_argument(
        "--runs", type=int, default=3, help="Overview loads alone and during the upload (default 3)"
    )
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    db = resolve_db(args.db)
    env = dict(os.environ, GPULEDGER_DB=db, PYTHONPATH=str(ROOT))
    print(f"{db}; load average {os.getloadavg()[0]:.1f}; hostile cell {args.letters:,} letters")
    with tempfile.TemporaryDirectory(prefix="bench-upload-") as tmp, sync_playwright() as p:
        hostile = hostile_file(Path(tmp), args.letters)
        browser = p.chromium.launch(
            executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"]
        )
        proc, url = bench_pages._serve(streamlit_argv(0), env)
        try:
            b = browser.new_context(viewport={"width": 1400, "height": 1600}).new_page()
            bench_pages._load(b, url)  # cold: the caches fill
            alone = [bench_pages._load(b, url)[1] for _ in range(args.runs)]
            health_alone = health_s(url)
            a = browser.new_context(viewport={"width": 1400, "height": 1600}).new_page()
            bench_pages._load(a, f"{url}/upload")
            started = time.perf_counter()
            a.get_by_test_id("stFileUploaderDropzoneInput").set_input_files(str(hostile))
            a.wait_for_timeout(1000)  # the upload reaches the server and its read begins
            during, overlapped = [], []
            health_during = health_s(url)
            for _ in range(args.runs):
                during.append(bench_pages._load(b, url)[1])
                overlapped.append(still_reading(a))
            a.wait_for_selector("[data-testid='stAlert']", timeout=900_000)
            upload_s = time.perf_counter() - started
            outcome = a.locator(
                "[data-testid='stAlertContentError'], [data-testid='stAlertContentSuccess']"
            ).first.inner_text()[:300]
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            browser.close()
    usual, busy = statistics.median(alone), statistics.median(during)
    print(
        f"Overview alone:            {usual:6.2f} s (median of {args.runs}: {', '.join(f'{x:.2f}' for x in alone)})"
    )
    print(
        f"Overview during the upload: {busy:6.2f} s (median of {args.runs}: {', '.join(f'{x:.2f}' for x in during)})"
    )
    print(
        f"ratio during / alone:       {busy / usual:6.2f}   (target about 1; issue 34 before the worker: 185.7 s)"
    )
    print(f"health check: alone {health_alone:.3f} s, during the upload {health_during:.3f} s")
    print(f"the upload was still being read during {sum(overlapped)} of {args.runs} loads")
    print(f"browser A's upload ended after {upload_s:.1f} s: {outcome}")


if __name__ == "__main__":
    main()
