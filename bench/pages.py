"""How long each dashboard page waits for its data, and how long a real page load takes in Chromium.

    .venv/bin/gpuledger demo --db /tmp/h11/demo.duckdb            # the 28-day demo, once (~3 min)
    .venv/bin/python bench/pages.py --db /tmp/h11/demo.duckdb      # data functions and page scripts, per page
    .venv/bin/python bench/pages.py --db /tmp/h11/demo.duckdb --browser --shots /tmp/h11/shots

Part 1 (always): for each page, the analytics calls that ``pages/_data.py`` makes for it, in the same order
and with the same arguments, but without Streamlit (whose cache would hide the cost). "Cold" = no page
cache: every repeat opens a fresh read-only connection, as a cache miss in ``_data`` does (DuckDB's own
buffer cache and the OS page cache stay warm after the first repeat; the first repeat is printed apart).
Printed per page: the first run, the median of ``--repeat`` runs, and the slowest call of the page.

Part 2 (always, unless ``--no-scripts``): each page's SCRIPT time, the real page (``app.py`` routing to
``pages/*.py``) run in-process by ``streamlit.testing`` AppTest, as the server runs it: "cold" with every
Streamlit cache cleared first (what the first visitor after a collector flush waits for, less the browser),
"warm" the same page run again (a reload or a filter change back: all from the page caches). The target is
1 s per page on the demo (issue 11); the last column says which pages exceed it.

Part 3 (``--browser``): a real ``streamlit run app.py`` (the command ``gpuledger dashboard`` runs) over the
ledger and headless Debian Chromium (/usr/bin/chromium, never a downloaded browser). For each page a fresh
server: the first load is cold (sync of the price sheet, sidebar choices, the page's data), a reload is warm
(all from Streamlit's cache; the median of ``--warm-runs``). A load ends when the script run is over and
every plotly chart has drawn. Each is also printed as a ratio over the same loads of a one-line Streamlit
app served the same way in the same run (the baseline: what Streamlit and the browser cost on this machine
now); the target is a warm load <= 1.5 s on the demo. ``--shots DIR`` saves a full-page screenshot of each.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from analytics.filters import Filters, horizon  # noqa: E402
from gpuledger.ledger.db import reader, resolve_db  # noqa: E402
from gpuledger.ledger.settings import Settings, load_settings  # noqa: E402

Call = Callable[[duckdb.DuckDBPyConnection, Filters, Settings], Any]


# ---------------------------------------------------------------- the calls each page makes (pages/_data.py)


def sidebar_choices(con: duckdb.DuckDBPyConnection, f: Filters, s: Settings) -> Any:
    con.execute("SELECT DISTINCT team FROM jobs WHERE team IS NOT NULL ORDER BY 1").fetchall()
    con.execute(
        """SELECT DISTINCT cluster FROM (SELECT cluster FROM jobs UNION ALL SELECT cluster FROM gpus)
           WHERE cluster IS NOT NULL ORDER BY 1"""
    ).fetchall()
    return con.execute(
        """SELECT least((SELECT min(start_ts) FROM jobs), (SELECT min(ts) FROM samples))::DATE,
                  greatest((SELECT max(coalesce(end_ts, start_ts)) FROM jobs), (SELECT max(ts) FROM samples))::DATE"""
    ).fetchall()


def sidebar_caption(con: duckdb.DuckDBPyConnection, f: Filters, s: Settings) -> Any:
    con.execute(
        "SELECT (SELECT count(*) FROM jobs), (SELECT count(*) FROM samples), (SELECT count(*) FROM ingests)"
    ).fetchall()
    return con.execute("SELECT EXISTS (FROM jobs) OR EXISTS (FROM samples)").fetchall()


def summary(con: duckdb.DuckDBPyConnection, f: Filters, s: Settings) -> Any:
    from analytics.summary import summary as compute

    return compute(con, filters=f, settings=s)


def spend_by_team_week(con: duckdb.DuckDBPyConnection, f: Filters, s: Settings) -> Any:
    from analytics.waste import spend_by_week

    return spend_by_week(con, by="team", filters=f, settings=s)


def waste_by_team_week(con: duckdb.DuckDBPyConnection, f: Filters, s: Settings) -> Any:
    from analytics.waste import waste_by_week

    return waste_by_week(con, by="team", filters=f, settings=s)


def waste_by_team(con: duckdb.DuckDBPyConnection, f: Filters, s: Settings) -> Any:
    from analytics.waste import waste_by

    return waste_by(con, by="team", filters=f, settings=s)


def top_wasted_jobs(con: duckdb.DuckDBPyConnection, f: Filters, s: Settings) -> Any:
    from analytics.waste import job_waste

    jobs = job_waste(con, filters=f, settings=s)
    return jobs.filter(pl.col("waste_usd") > 0).sort("waste_usd", descending=True).head(20)


def jobs_table(con: duckdb.DuckDBPyConnection, f: Filters, s: Settings) -> Any:
    from analytics.jobs import jobs_table as compute

    return compute(con, filters=f, settings=s)


def job_timeline(con: duckdb.DuckDBPyConnection, f: Filters, s: Settings) -> Any:
    """The timeline the Jobs page draws first: the most expensive job's (its default selection)."""
    from analytics.cost import job_costs
    from analytics.timeline import job_timeline as compute

    top = job_costs(con, filters=f).sort("cost_usd", descending=True, nulls_last=True).row(0, named=True)
    return compute(con, top["job_id"], lines="gpu" if (top["gpu_count"] or 0) <= 8 else "job")


def fleet_heatmap(con: duckdb.DuckDBPyConnection, f: Filters, s: Settings) -> Any:
    """What the Fleet page draws first: per GPU up to 60 GPUs, else one row per host (its default)."""
    from analytics.timeline import gpu_hour_heatmap, group_hour_heatmap, view_gpu_count

    if view_gpu_count(con, filters=f) <= 60:
        return gpu_hour_heatmap(con, filters=f)
    return group_hour_heatmap(con, by="host", filters=f)


def fleet_idle(con: duckdb.DuckDBPyConnection, f: Filters, s: Settings) -> Any:
    from analytics.timeline import idle_gpus

    return idle_gpus(con, filters=f)


def util_by_model(con: duckdb.DuckDBPyConnection, f: Filters, s: Settings) -> Any:
    from analytics.utilization import utilization_by

    return utilization_by(con, by="gpu_model", filters=f, settings=s)


def util_by_cluster(con: duckdb.DuckDBPyConnection, f: Filters, s: Settings) -> Any:
    from analytics.utilization import utilization_by

    return utilization_by(con, by="cluster", filters=f, settings=s)


def recommendations(con: duckdb.DuckDBPyConnection, f: Filters, s: Settings) -> Any:
    from analytics.recommend import recommendations as compute

    return compute(con, filters=f, settings=s)


def batch_items(con: duckdb.DuckDBPyConnection, f: Filters, s: Settings) -> Any:
    """The Training page's batch table: the larger_batch kind alone (pages/_data.training)."""
    from analytics.recommend import recommendations as compute

    return compute(con, filters=f, settings=s, kinds=("larger_batch",))


def diagnoses(con: duckdb.DuckDBPyConnection, f: Filters, s: Settings) -> Any:
    from analytics.diagnoses import diagnoses as compute

    return compute(con, filters=f, settings=s)


def unit_costs(con: duckdb.DuckDBPyConnection, f: Filters, s: Settings) -> Any:
    from analytics.unit_costs import job_unit_costs

    return job_unit_costs(con, filters=f)


def as_of(con: duckdb.DuckDBPyConnection, f: Filters, s: Settings) -> Any:
    """What the Reports page asks before its report: the data horizon alone (pages/_data.as_of)."""
    when = horizon(con)
    return when.isoformat() if when else None


def weekly_report(con: duckdb.DuckDBPyConnection, f: Filters, s: Settings) -> Any:
    """The Reports page's default: the last full ISO week, both formats from one collect()."""
    from gpuledger.reports.weekly import collect, last_full_week, render_html, render_markdown, week_range

    since, until = week_range(last_full_week(horizon(con)))
    data = collect(con, filters=Filters(since=since, until=until), settings=s)
    return render_html(data), render_markdown(data)


# Each page's cache misses on its first load, in the order the page asks (the sidebar runs first on every
# page; a call another page already made is still listed: the table is per page, each cold).
PAGES: dict[str, list[tuple[str, Call]]] = {
    "sidebar": [("filter_choices", sidebar_choices), ("caption+has_data", sidebar_caption)],
    "overview": [("spend_by_team_week", spend_by_team_week), ("summary", summary)],
    "waste": [
        ("waste_by team×week", waste_by_team_week),
        ("summary", summary),
        ("waste_by team", waste_by_team),
        ("top_wasted_jobs", top_wasted_jobs),
    ],
    "jobs": [("jobs_table", jobs_table), ("job_timeline", job_timeline)],
    "fleet": [
        ("heatmap", fleet_heatmap),
        ("idle_gpus", fleet_idle),
        ("util by model", util_by_model),
        ("util by cluster", util_by_cluster),
    ],
    "recommendations": [("recommendations", recommendations), ("diagnoses", diagnoses)],
    "training": [("unit_costs", unit_costs), ("larger_batch items", batch_items)],
    "reports": [("as_of", as_of), ("weekly report", weekly_report)],
}


def time_page(db: str, calls: list[tuple[str, Call]], s: Settings) -> dict[str, float]:
    """Seconds per call (and "total"), on a fresh read-only connection, as one cache miss in _data."""
    out: dict[str, float] = {}
    started = time.perf_counter()
    with reader(db) as con:
        for name, fn in calls:
            t0 = time.perf_counter()
            fn(con, Filters(), s)
            out[name] = time.perf_counter() - t0
    out["total"] = time.perf_counter() - started
    return out


def bench_data(db: str, repeat: int, pages: list[str]) -> None:
    s = load_settings(None)
    print(f"{'page':<16} {'first s':>8} {'median s':>9}  slowest call (median s)")
    for page in (p for p in pages if p in PAGES):
        runs = [time_page(db, PAGES[page], s) for _ in range(repeat)]
        first = runs[0]["total"]
        med = statistics.median(r["total"] for r in runs[1:] or runs)
        calls = {name: statistics.median(r[name] for r in runs[1:] or runs) for name, _ in PAGES[page]}
        slow = max(calls, key=calls.__getitem__)
        detail = ", ".join(f"{k} {v:.3f}" for k, v in calls.items())
        print(f"{page:<16} {first:8.3f} {med:9.3f}  {slow} ({detail})", flush=True)


# ---------------------------------------------------------------- page scripts (AppTest)


SCRIPT_PAGES = {
    "overview": "pages/overview.py",
    "waste": "pages/waste.py",
    "jobs": "pages/jobs.py",
    "fleet": "pages/fleet.py",
    "recommendations": "pages/recommendations.py",
    "training": "pages/training.py",
    "upload": "pages/upload.py",
    "reports": "pages/reports.py",
}
SCRIPT_TARGET_S = 1.0


def bench_scripts(db: str, repeat: int, pages: list[str]) -> dict[str, tuple[float, float]]:
    """Per page: (cold s, warm s), medians over ``repeat``; prints the table and returns it."""
    os.environ["GPULEDGER_DB"] = db
    # this file is named pages.py too: off the path, or `import pages` (here and in app.py) finds it
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    from analytics import shared as shared_results
    from pages._script_timer import clear_caches, run_page  # streamlit stays in pages/

    run_page("pages/overview.py")  # imports, the price-sheet sync: once per server, not per page
    print(f"\n{'page script':<16} {'cold s':>7} {'warm s':>7}   (AppTest, in-process; cold = caches cleared)")
    out = {}
    for name, page in SCRIPT_PAGES.items():
        if name not in pages:
            continue
        cold, warm = [], []
        for _ in range(repeat):
            clear_caches()
            shared_results.clear()  # analytics/shared.py keeps a view's figures per ledger version too
            seconds, error = run_page(page)
            if error:
                raise SystemExit(f"{page} raised: {error}")
            cold.append(seconds)
            warm.append(run_page(page)[0])
        out[name] = (statistics.median(cold), statistics.median(warm))
        flag = "" if out[name][0] <= SCRIPT_TARGET_S else f"  over the {SCRIPT_TARGET_S:g} s target"
        print(f"{name:<16} {out[name][0]:7.2f} {out[name][1]:7.2f}{flag}", flush=True)
    return out


# ---------------------------------------------------------------- real page loads


BROWSER_PAGES = ["", "waste", "jobs", "fleet", "recommendations", "training", "upload", "reports"]


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _load(page: Any, url: str) -> tuple[float, float]:
    """Seconds until the server's script run ended, and until every element had loaded and every chart drawn.

    The run has begun once the page's title (every page's ``st.title``) is drawn: before it, the app reads
    "notRunning" from before the run started, which ended the wait at once."""
    t0 = time.perf_counter()
    page.goto(url)
    page.wait_for_selector("[data-testid='stMain'] h1", timeout=180_000)
    page.wait_for_selector("[data-testid='stApp'][data-test-script-state='notRunning']", timeout=180_000)
    ran = time.perf_counter() - t0
    # When the run ends, an element whose component is still loading (a chart before plotly.js is ready) is
    # a skeleton, not yet a chart: "every chart drew" over no charts was true 0.03-0.16 s too early.
    page.wait_for_function(
        """() => !document.querySelector('[data-testid="stSkeleton"]')
                 && [...document.querySelectorAll('[data-testid="stPlotlyChart"]')]
                    .every(e => e.querySelector('.main-svg'))""",
        timeout=60_000,
    )
    return ran, time.perf_counter() - t0


# The baseline of the browser table: a one-line Streamlit app served the same way (same command, same
# browser), so each page's load is printed as a ratio over what Streamlit itself costs on this machine now.
BASELINE_APP = 'import streamlit as st\nst.title("baseline")\nst.write("one line of text")\n'
WARM_TARGET_S = 1.5  # issue 11: warm browser loads <= 1.5 s on the demo


def _serve(argv: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    argv = [*argv[:4], argv[4], "--server.port", str(port), *argv[7:], "--server.fileWatcherType", "none"]
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2):
                break
        except OSError:
            time.sleep(0.1)
    return proc, url


def _cold_warm(
    browser: Any, url: str, warm_runs: int, shot: Path | None
) -> tuple[tuple[float, float], float]:
    """(cold load, its script run) and the median of ``warm_runs`` reloads (until every chart drew)."""
    ctx = browser.new_context(viewport={"width": 1400, "height": 1600})
    page = ctx.new_page()
    cold = _load(page, url)
    warm = statistics.median(_load(page, url)[1] for _ in range(warm_runs))
    if shot is not None:
        shot.parent.mkdir(parents=True, exist_ok=True)
        page.wait_for_timeout(700)
        page.screenshot(path=str(shot), full_page=True)
    ctx.close()
    return cold, warm


def bench_browser(db: str, shots: Path | None, warm_runs: int = 3, pages: list[str] | None = None) -> None:
    """Per page, a fresh ``streamlit run`` (the dashboard's command) and headless Debian Chromium: the first
    load (cold: the server's caches are empty) and the median of ``warm_runs`` reloads (warm: from the page
    caches), each also as a ratio over the same loads of a one-line app served the same way (the baseline)."""
    import tempfile

    from playwright.sync_api import sync_playwright

    from gpuledger.cli.commands.dashboard import streamlit_argv

    env = dict(os.environ, GPULEDGER_DB=db, PYTHONPATH=str(ROOT))
    argv = streamlit_argv(0)
    with tempfile.TemporaryDirectory(prefix="bench-pages-") as tmp, sync_playwright() as p:
        baseline_app = Path(tmp) / "baseline.py"
        baseline_app.write_text(BASELINE_APP)
        browser = p.chromium.launch(
            executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"]
        )
        proc, url = _serve([*argv[:4], str(baseline_app), *argv[5:]], env)
        try:
            (base_cold, _), base_warm = _cold_warm(browser, url, warm_runs, None)
        finally:
            proc.terminate()
            proc.wait(timeout=20)
        print(
            f"\nbaseline (one-line app): cold {base_cold:.2f} s, warm {base_warm:.2f} s"
            f"   (fresh server per page; warm = median of {warm_runs} reloads; run = until the script ended)"
        )
        print(f"{'page':<16} {'cold s':>7} {'(run)':>7} {'×base':>6} {'warm s':>7} {'×base':>6}")
        for path in BROWSER_PAGES:
            name = path or "overview"
            if pages is not None and name not in pages:
                continue
            proc, url = _serve(argv, env)
            try:
                shot = shots / f"{name}.png" if shots is not None else None
                cold, warm = _cold_warm(browser, f"{url}/{path}", warm_runs, shot)
            finally:
                proc.terminate()
                proc.wait(timeout=20)
            flag = "" if warm <= WARM_TARGET_S else f"  warm over the {WARM_TARGET_S:g} s target"
            print(
                f"{name:<16} {cold[1]:7.2f} {cold[0]:7.2f} {cold[1] / base_cold:6.1f} "
                f"{warm:7.2f} {warm / base_warm:6.1f}{flag}",
                flush=True,
            )
        browser.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", required=True, help="the ledger (e.g. the 28-day demo)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per page (default 3)")
    ap.add_argument("--pages", nargs="*", default=[*PAGES, "upload"], choices=[*PAGES, "upload"])
    ap.add_argument("--browser", action="store_true", help="also time real page loads in Chromium")
    ap.add_argument("--no-data", action="store_true", help="skip the data-function table")
    ap.add_argument("--no-scripts", action="store_true", help="skip the page-script (AppTest) table")
    ap.add_argument("--shots", type=Path, help="with --browser: save a screenshot of each page here")
    ap.add_argument("--warm-runs", type=int, default=3, help="with --browser: reloads per page (default 3)")
    args = ap.parse_args()
    db = resolve_db(args.db)
    with reader(db) as con:
        n = con.execute("SELECT (SELECT count(*) FROM samples), (SELECT count(*) FROM jobs)").fetchall()[0]
    print(f"{db}: {n[0]:,} samples, {n[1]:,} jobs; load average {os.getloadavg()[0]:.1f}")
    if not args.no_data:
        bench_data(db, args.repeat, args.pages)
    if not args.no_scripts:
        bench_scripts(db, args.repeat, args.pages)
    if args.browser:
        bench_browser(db, args.shots, args.warm_runs, args.pages)


if __name__ == "__main__":
    main()
