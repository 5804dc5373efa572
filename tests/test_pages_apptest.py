"""A quick in-process smoke test of every page (streamlit.testing AppTest), on a small hand-written ledger.

The browser tests (tests/browser/) drive the real server in Chromium; this one runs in a second and catches
a page that raises before the slower suite starts.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest
from streamlit.testing.v1 import AppTest

from collectors.ingest import ingest_file
from gpuledger.ledger.db import writer
from gpuledger.upload.analysis import UploadResult
from tests.conftest import ROOT

JOBS = ROOT / "tests" / "fixtures" / "dashboard" / "jobs.csv"
PAGES = {
    "pages/overview.py": "Overview",
    "pages/waste.py": "Waste",
    "pages/jobs.py": "Jobs",
    "pages/fleet.py": "Fleet",
    "pages/recommendations.py": "Recommendations",
    "pages/training.py": "Training",
    "pages/upload.py": "Upload a file",
    "pages/reports.py": "Weekly report",
    "pages/whatif.py": "What if",
    "pages/budgets.py": "Budgets",
    "pages/settings.py": "Settings",
    "pages/guard.py": "Guard",
}


@pytest.fixture(scope="module")
def small_ledger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("apptest")
    db = str(tmp / "ledger.duckdb")
    with writer(db) as con:
        ingest_file(con, JOBS)
    settings = tmp / "settings.toml"
    settings.write_text("")
    mp = pytest.MonkeyPatch()
    mp.setenv("GPULEDGER_DB", db)
    mp.setenv("GPULEDGER_SETTINGS", str(settings))
    yield db
    mp.undo()


def run_page(page: str, query: dict[str, list[str]] | None = None) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    for key, values in (query or {}).items():
        at.query_params[key] = values
    at.run()
    if page != "pages/overview.py":
        at.switch_page(page)
        at.run()
    return at


def fleet_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, logs: dict[str, tuple[str, str | None]]
) -> AppTest:
    """The Fleet page over a fresh ledger of nvidia-smi logs (file name -> (text, cluster)), default settings."""
    from collectors.base import IngestOptions

    db = str(tmp_path / "fleet.duckdb")
    with writer(db) as con:
        for name, (text, cluster) in logs.items():
            path = tmp_path / name
            path.write_text(text)
            ingest_file(con, path, opts=IngestOptions(tz="UTC", cluster=cluster))
    monkeypatch.setenv("GPULEDGER_DB", db)
    monkeypatch.setenv("GPULEDGER_SETTINGS", str(tmp_path / "none.toml"))
    (tmp_path / "none.toml").write_text("")
    at = run_page("pages/fleet.py")
    assert not at.exception, at.exception
    return at


def upload_lines(tmp_path: Path, text: str) -> UploadResult:
    """The Upload page's lines of a nvidia-smi log: the file ingested into an in-memory ledger as the page's
    worker ingests it (gpuledger/upload/analysis.analyse_file: the reference data and the ingest options of
    the settings, here the defaults, in UTC), then the same ``timelines`` that analyse_file hands the page.

    The page's other analyses (summary, jobs, advice: ~2.5 s) and its worker process (~1-2 s, at nice +10)
    are left out: these tests are about the lines; tests/browser/test_product_pages.py uploads the same
    three shapes through the real page."""
    from analytics.filters import Filters
    from collectors.base import IngestOptions
    from gpuledger.ledger.db import memory_ledger
    from gpuledger.ledger.reference import load_reference
    from gpuledger.ledger.settings import Settings
    from gpuledger.upload.analysis import timelines

    path = tmp_path / "upload" / "gpus.csv"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    s = Settings()
    con = memory_ledger()
    try:
        con.execute("BEGIN TRANSACTION")
        load_reference(con, s)
        con.execute("COMMIT")
        ingest_file(con, path, opts=IngestOptions.from_settings(s, tz="UTC"))
        return UploadResult(path.name, **timelines(con, Filters()))  # type: ignore[arg-type]
    finally:
        con.close()


@pytest.mark.parametrize("page", list(PAGES))
def test_page_runs_without_exception(small_ledger: str, page: str) -> None:
    at = run_page(page)
    assert not at.exception, at.exception
    assert at.title[0].value == PAGES[page]
    assert not [w.value for w in at.warning if "not available" in w.value]


def test_overview_shows_the_fixture_spend(small_ledger: str) -> None:
    at = run_page("pages/overview.py")
    spend = next(m for m in at.metric if m.label == "Spend")
    # by hand from tests/fixtures/dashboard/jobs.csv: H100 8×10 + 1×12 + 4×24 = 188 GPU-h × $2.99 = $562.12,
    # L4 2×6 h = $8.52, A10G 1×12 h = $12.07 (the shipped on-demand prices): $582.71
    assert spend.value == "$582.71"


def test_the_sidebar_counts_the_ledger_in_words(small_ledger: str) -> None:
    at = run_page("pages/overview.py")
    captions = [c.value for c in at.sidebar.caption if c.value.startswith("Ledger")]
    # the fixture: 5 jobs (tests/fixtures/dashboard/jobs.csv), no telemetry, one ingest: singular, not "1 ingests"
    assert captions == ["Ledger `ledger.duckdb`: 5 jobs, 0 samples from 1 ingest."], captions


def test_query_string_sets_the_filters(small_ledger: str) -> None:
    at = run_page("pages/overview.py", {"team": ["vision"]})
    spend = next(m for m in at.metric if m.label == "Spend")
    assert spend.value == "$20.59"  # dash-3 $8.52 + dash-4 $12.072 (1 × 12 h A10G at $1.006)


def test_empty_ledger_shows_how_to_load_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPULEDGER_DB", str(tmp_path / "empty.duckdb"))
    monkeypatch.setenv("GPULEDGER_SETTINGS", str(tmp_path / "none.toml"))
    (tmp_path / "none.toml").write_text("")
    at = run_page("pages/overview.py")
    assert not at.exception
    assert "gpuledger demo" in at.info[0].value


def test_the_reports_page_default_week_comes_from_the_summary_horizon(small_ledger: str) -> None:
    """The Reports page reads the data horizon alone (pages/_data.as_of), not a whole summary: the same
    ``as_of`` string, so the same default week as ``gpuledger report``."""
    import datetime as dt

    from analytics.summary import summary
    from gpuledger.ledger.db import reader
    from gpuledger.reports.weekly import last_full_week
    from pages import _data

    with reader(small_ledger) as con:
        expected = summary(con)["as_of"]
    got = _data.as_of()
    assert got == expected and got is not None
    at = run_page("pages/reports.py")
    assert not at.exception, at.exception
    week = next(s for s in at.selectbox if s.key == "report_week")
    default = last_full_week(dt.datetime.fromisoformat(expected))
    assert week.value == (default if default in week.options else week.options[0])


class _Logged:
    """A reader connection that keeps the text of every statement it runs (and is otherwise the connection)."""

    def __init__(self, con: object, log: list[str]) -> None:
        self._con, self._log = con, log

    def execute(self, sql: str, *args: object, **kw: object) -> object:
        self._log.append(str(sql))
        return self._con.execute(sql, *args, **kw)

    def __getattr__(self, name: str) -> object:
        return getattr(self._con, name)


@pytest.mark.parametrize("page", ["pages/jobs.py", "pages/fleet.py"])
def test_a_page_run_computes_the_views_per_job_costs_once(
    small_ledger: str, page: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each data function of a page opens the ledger version's sharing block (analytics/shared.py), so the
    view's per-job costs (analytics.cost.job_costs_sql, whose body starts ``WITH shared AS``) are one
    statement per page run, however many analytics calls read them. The Jobs page's table had run them
    three times (job waste, utilization, unit costs: 1.18 of its 1.95 s on a 50 M-sample ledger) and the
    Fleet page's twice."""
    import gpuledger.ledger.db as db
    from pages._script_timer import clear_caches

    log: list[str] = []
    opened = db._open_reader
    monkeypatch.setattr(db, "_open_reader", lambda *a, **k: _Logged(opened(*a, **k), log))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    at.switch_page(page)
    clear_caches()
    log.clear()
    at.run()  # this page alone, every cache cleared
    assert not at.exception, at.exception
    costs = [s for s in log if "WITH shared AS" in s]
    assert len(costs) == 1, [" ".join(s.split())[:80] for s in costs]


def test_a_fleet_of_many_hosts_opens_by_cluster_then_hosts_then_gpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past FLEET_GROUP_PAST hosts a heatmap row per host is itself unreadable: the Fleet page opens one row
    per cluster, a cluster with more GPUs than that opens onto its hosts (at most FLEET_GROUP_PAST rows, the
    rest pooled), a host onto its GPUs, and a small cluster straight onto its GPUs. Here 70 single-GPU hosts
    in cluster "big" and 2 in "small"."""

    header = "timestamp, hostname, index, utilization.gpu [%]\n"

    def log(prefix: str, hosts: int) -> str:
        return header + "".join(
            f"2026-11-16 10:{m:02d}:00.000, {prefix}{h:02d}, 0, {(h * 7 + m) % 100} %\n"
            for m in range(3)
            for h in range(hosts)
        )

    at = fleet_page(
        tmp_path,
        monkeypatch,
        {f"{name}.csv": (log(f"{name}-n", hosts), name) for name, hosts in (("big", 70), ("small", 2))},
    )
    assert at.radio(key="fleet_group").value == "cluster"
    captions = [c.value for c in at.caption]
    assert any(c.startswith("2 rows (one per cluster") and "72 GPUs in the view" in c for c in captions), (
        captions
    )
    at.selectbox(key="fleet_drill").set_value("big").run()
    captions = [c.value for c in at.caption]
    # 70 hosts are rows again: the 59 with the most unused GPU-hours, the other 11 pooled in the last row
    assert any(
        c.startswith("60 rows (the hosts of cluster big") and "the other 11 share the last one" in c
        for c in captions
    ), captions
    import json

    rows = json.loads(at.get("plotly_chart")[1].proto.spec)["data"][0]["y"]
    assert len(rows) == 60 and rows[-1] == "11 other hosts" and "big-n13" not in rows, rows
    # every host can still be opened, a pooled one too: big-n13 ran at 91-93 %, among the least unused
    assert len(at.selectbox(key="fleet_drill_host").options) == 70
    at.selectbox(key="fleet_drill_host").set_value("big-n13").run()
    assert any(c.startswith("1 row (the GPUs of host big-n13") for c in (c.value for c in at.caption))
    at.selectbox(key="fleet_drill_host").set_value("big-n07").run()
    assert any(c.startswith("1 row (the GPUs of host big-n07") for c in (c.value for c in at.caption))
    at.selectbox(key="fleet_drill").set_value("small").run()
    captions = [c.value for c in at.caption]
    assert any(c.startswith("2 rows (the GPUs of cluster small") for c in captions), captions
    # the user's choice stands: one row per host on request
    at.radio(key="fleet_group").set_value("host").run()
    assert any(c.startswith("60 rows (one per host") for c in (c.value for c in at.caption))


def test_gpus_whose_ids_share_their_first_characters_keep_a_row_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A heatmap row is labelled with the GPU's one name, host:index (then its model): two GPUs of one long host
    name (gpu-node-0001:0, gpu-node-0001:1) share their first characters and must not merge into one row."""
    import json

    rows = "".join(
        f"2026-11-16 10:{m:02d}:00.000, gpu-node-0001, {g}, {10 + 80 * g} %\n"
        for m in range(3)
        for g in range(2)
    )
    at = fleet_page(
        tmp_path,
        monkeypatch,
        {"node.csv": ("timestamp, hostname, index, utilization.gpu [%]\n" + rows, None)},
    )
    heat = json.loads(at.get("plotly_chart")[0].proto.spec)["data"][0]
    assert heat["y"] == ["gpu-node-0001:0 · unknown model", "gpu-node-0001:1 · unknown model"]


def test_a_host_of_more_gpus_than_rows_opens_onto_60_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host of 70 GPUs (a source that names no hosts puts them all on one) opens onto 60 heatmap rows: the
    59 GPUs with the most unused GPU-hours and one row for the other 11, none dropped."""

    uuid = "GPU-{:08d}-1111-2222-3333-444455556666"
    rows = "".join(
        f"2026-11-16 10:{m:02d}:00.000, fat, {g}, {uuid.format(g)}, {g} %\n"
        for m in range(3)
        for g in range(70)
    ) + "".join(f"2026-11-16 10:{m:02d}:00.000, thin, 0, GPU-t0, 50 %\n" for m in range(3))
    at = fleet_page(
        tmp_path,
        monkeypatch,
        {"fat.csv": ("timestamp, hostname, index, uuid, utilization.gpu [%]\n" + rows, "c")},
    )
    assert at.radio(key="fleet_group").value == "host"
    at.selectbox(key="fleet_drill").set_value("fat").run()
    assert not at.exception, at.exception
    captions = [c.value for c in at.caption]
    assert any(
        c.startswith("60 rows (the GPUs of host fat; 70 GPUs, so the 59 with the most unused GPU-hours")
        and "the other 11 share the last one" in c
        for c in captions
    ), captions
    import json

    labels = json.loads(at.get("plotly_chart")[1].proto.spec)["data"][0]["y"]
    assert len(labels) == 60 and labels[-1] == "11 other GPUs", labels


def test_an_upload_of_many_gpus_draws_a_line_per_host_and_opens_one(tmp_path: Path) -> None:
    """A file with more GPUs than lines a reader can tell apart (70 GPUs on 10 hosts) is drawn one line per
    host, the time-weighted mean over its GPUs, and a host opens onto its own GPUs' lines."""
    rows = "".join(
        f"2026-11-16 10:{m:02d}:00.000, n{g // 7}, {g % 7}, {(g * 3 + m * 11) % 100} %\n"
        for m in range(4)
        for g in range(70)
    )
    result = upload_lines(tmp_path, "timestamp, hostname, index, utilization.gpu [%]\n" + rows)
    assert result.gpu_groups is not None and result.gpu_groups.height == 70
    groups = result.timeline_groups
    assert groups is not None and groups["key"].n_unique() == 10
    # by hand: host n3 holds GPUs 21..27; every sample stands for 60 s, so its minute-1 point is their mean
    expect = sum((g * 3 + 1 * 11) % 100 for g in range(21, 28)) / 7
    point = groups.filter((pl.col("key") == "n3") & (pl.col("ts").dt.minute() == 1))
    assert point["util_pct"].item() == pytest.approx(expect)
    assert point["gpus"].item() == 7


def test_an_upload_of_more_hosts_than_lines_pools_the_busiest_into_one_line(tmp_path: Path) -> None:
    """80 single-GPU hosts: 60 lines, the 59 hosts with the most unused GPU-seconds and one for the other 21
    (their pooled sums), and every host, pooled or not, still opens onto its GPU."""
    # host h{i} runs at i % for two minutes: the 21 busiest (h59..h79) are pooled
    rows = "".join(f"2026-11-16 10:{m:02d}:00.000, h{h:02d}, 0, {h} %\n" for m in range(2) for h in range(80))
    result = upload_lines(tmp_path, "timestamp, hostname, index, utilization.gpu [%]\n" + rows)
    groups = result.timeline_groups
    assert groups is not None and result.gpu_groups is not None
    assert groups["key"].n_unique() == 60 and set(groups["others"]) == {0, 21}
    kept = set(groups.filter(pl.col("others") == 0)["key"])
    assert kept == {f"h{h:02d}" for h in range(59)}
    # by hand: the pooled line at 10:00 is the mean of 59..79 % (each GPU-minute weighs the same)
    pooled = groups.filter((pl.col("others") == 21) & (pl.col("ts").dt.minute() == 0)).row(0, named=True)
    assert pooled["util_pct"] == pytest.approx(sum(range(59, 80)) / 21)
    assert pooled["gpus"] == 21
    assert result.gpu_groups["key"].n_unique() == 80  # the drill-down offers every host


def test_an_upload_of_more_gpus_on_a_host_than_lines_pools_them(tmp_path: Path) -> None:
    """A host of 70 GPUs opens onto 60 lines: the 59 GPUs with the most unused GPU-seconds and one for the
    other 11; a file whose GPUs are all on one host shows those lines at once (one host line says nothing)."""
    uuid = "GPU-{:08d}-1111-2222-3333-444455556666"

    def upload(header: str, line: str, gpus: int) -> UploadResult:
        rows = "".join(line.format(m=m, g=g, uuid=uuid.format(g)) for m in range(2) for g in range(gpus))
        return upload_lines(tmp_path, header + rows)

    def check(lines: pl.DataFrame) -> None:
        assert lines["gpu_id"].n_unique() == 60 and set(lines["others"]) == {0, 11}
        # the 11 busiest (59..69 %) share the last line, at their mean
        pooled = lines.filter(pl.col("others") == 11)
        assert pooled["util_pct"].to_list() == pytest.approx([sum(range(59, 70)) / 11] * 2)
        assert set(lines.filter(pl.col("others") == 0)["gpu_id"]) == {uuid.format(g) for g in range(59)}

    # 70 GPUs on host "big" (GPU g at g %), 2 on "small"
    rows = "".join(
        f"2026-11-16 10:{m:02d}:00.000, big, {g}, {uuid.format(g)}, {g} %\n"
        for m in range(2)
        for g in range(70)
    ) + "".join(
        f"2026-11-16 10:{m:02d}:00.000, small, {g}, GPU-s{g}, 50 %\n" for m in range(2) for g in range(2)
    )
    two = upload_lines(tmp_path, "timestamp, hostname, index, uuid, utilization.gpu [%]\n" + rows)
    assert two.timeline_groups is not None and set(two.timeline_groups["key"]) == {"big", "small"}
    assert two.group_gpus is not None and set(two.group_gpus) == {"big"}  # small opens onto its 2 GPUs
    check(two.group_gpus["big"])
    # no host column: every GPU on the one host the parser assumes
    one = upload(
        "timestamp, index, uuid, utilization.gpu [%]\n",
        "2026-11-16 10:{m:02d}:00.000, {g}, {uuid}, {g} %\n",
        70,
    )
    assert one.timeline_groups is None and one.timeline is not None
    check(one.timeline)


@pytest.mark.parametrize("per_host", [7, 1])
def test_a_job_of_many_gpus_splits_its_timeline_by_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, per_host: int
) -> None:
    """A job of 70 GPUs on 10 hosts: its timeline is the mean by default, and split one heat-strip row per
    host (not 70 rows) on request, each host's row pooled over the job's GPUs on it. On 70 hosts: 60 rows,
    the 59 hosts with the most unused GPU-seconds (ranked here in plain SQL over the samples) and one for
    the rest."""
    from collectors.base import IngestOptions, drop_stage, land, next_ingest_id

    db = str(tmp_path / "job.duckdb")
    with writer(db) as con:
        con.execute("BEGIN TRANSACTION")
        con.execute(
            """CREATE TEMP TABLE stage_samples AS
               SELECT TIMESTAMP '2026-11-16 10:00:00' + INTERVAL (m * 30) SECOND AS ts, 'g' || g AS gpu_id,
                      30.0::FLOAT AS interval_s, ((g * 3 + m * 11) % 100)::FLOAT AS util_pct
               FROM range(70) a(g), range(4) b(m)"""
        )
        con.execute(
            f"""CREATE TEMP TABLE stage_gpus AS SELECT 'g' || g AS gpu_id, 'n' || (g // {per_host}) AS host,
                 'H100-SXM-80GB' AS model, 'atlas' AS cluster FROM range(70) a(g)"""
        )
        con.execute(
            """CREATE TEMP TABLE stage_jobs AS SELECT 'big-1' AS job_id, 'nlp' AS team, 'atlas' AS cluster,
                 'H100-SXM-80GB' AS gpu_model, 70.0 AS gpu_count, TIMESTAMP '2026-11-16 10:00:00' AS start_ts,
                 TIMESTAMP '2026-11-16 11:00:00' AS end_ts, 'training' AS kind, 'COMPLETED' AS state"""
        )
        con.execute(
            """CREATE TEMP TABLE stage_allocations AS SELECT 'big-1' AS job_id, 'g' || g AS gpu_id,
                 TIMESTAMP '2026-11-16 10:00:00' AS start_ts, TIMESTAMP '2026-11-16 11:00:00' AS end_ts
               FROM range(70) a(g)"""
        )
        land(con, next_ingest_id(con), IngestOptions())
        drop_stage(con)
        con.execute("COMMIT")
    monkeypatch.setenv("GPULEDGER_DB", db)
    monkeypatch.setenv("GPULEDGER_SETTINGS", str(tmp_path / "none.toml"))
    (tmp_path / "none.toml").write_text("")
    at = run_page("pages/jobs.py", {"job": ["big-1"]})
    assert not at.exception, at.exception
    toggle = at.toggle(key="job_per_gpu")
    assert toggle.label == "One row per host" and toggle.value is False
    assert any("the line is their time-weighted mean" in c.value for c in at.caption)
    toggle.set_value(True).run()
    assert not at.exception, at.exception
    assert any("one row per host" in c.value for c in at.caption)
    chart = at.get("plotly_chart")[0]
    import json

    strips = [t for t in json.loads(chart.proto.spec)["data"] if t["type"] == "heatmap"]
    assert len(strips) == 2  # utilization and memory, the same rows
    names = set(strips[0]["y"])
    assert strips[1]["y"] == strips[0]["y"]
    if per_host == 7:
        assert names == {f"n{h}" for h in range(10)}
        return
    with writer(db) as con:
        kept = con.execute(
            """SELECT host FROM samples JOIN gpus USING (gpu_id) GROUP BY host
               ORDER BY sum(interval_s * (1 - util_pct / 100)) DESC, host LIMIT 59"""
        ).fetchall()
    assert names == {h for (h,) in kept} | {"11 other hosts"}
    assert any(
        "the 59 hosts with the most unused GPU-hours; the other 11 share one row" in c.value
        for c in at.caption
    )


def test_fleet_prices_idle_hours_at_the_clusters_own_rate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Fleet page's idle $ uses gpuledger.ledger.prices.PriceBook, as every other figure: a cluster's own
    price rows replace the generic ones. It read the sheet and the settings only, generic rows only, so
    borealis's idle A100-80GB hours were priced at the sheet's $1.79/h where its own row says $1.10."""
    rows = "".join(f"2026-11-16 10:{m:02d}:00.000, NVIDIA A100-SXM4-80GB, 0, 0 %\n" for m in range(60))
    db = str(tmp_path / "fleet.duckdb")
    path = tmp_path / "n1.csv"
    path.write_text("timestamp, name, index, utilization.gpu [%]\n" + rows)
    with writer(db) as con:
        from collectors.base import IngestOptions

        ingest_id = ingest_file(
            con, path, opts=IngestOptions(tz="UTC", host="n1", cluster="borealis")
        ).ingest_id
        # the rate a source declared for borealis (as the demo's on-prem sheet does), held by that ingest
        con.execute(
            """INSERT INTO prices VALUES ('A100-80GB', 'on_demand', 'borealis', DATE '2025-01-01', 1.10, 'ours',
                                          DATE '2025-01-01', 'ingest', ?)""",
            [ingest_id],
        )
    monkeypatch.setenv("GPULEDGER_DB", db)
    monkeypatch.setenv("GPULEDGER_SETTINGS", str(tmp_path / "none.toml"))
    (tmp_path / "none.toml").write_text("")
    at = run_page("pages/fleet.py")
    assert not at.exception, at.exception
    idle = next(d.value for d in at.dataframe if "idle_usd" in d.value.columns)
    idle = pl.from_pandas(idle) if not isinstance(idle, pl.DataFrame) else idle
    # 60 samples a minute apart, each standing for 60 s (the last one for the cadence): 1 h idle × $1.10/h
    assert idle["idle_h"].to_list() == [pytest.approx(1.0)]
    assert idle["idle_usd"].to_list() == [pytest.approx(1.10)]


@pytest.fixture(scope="module")
def _reco_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """The hand ledger of tests/analytics/test_recommend.py (team nlp), a vision notebook idle 8 of its 10 h,
    and 16 H100s declared on c1, so capacity nobody held is an item for c1's operators."""
    from tests.analytics.build import alloc, ingest, job, series
    from tests.analytics.recommend_ledgers import recommend_ledger

    tmp = tmp_path_factory.mktemp("reco")
    db = str(tmp / "reco.duckdb")
    with writer(db) as con:
        recommend_ledger(con)
        ingest(
            con,
            jobs=[job("v1", 0, 600, team="vision", user_name="vic", kind="interactive", name="vis-nb-1")],
            allocations=[alloc("v1", "hV:0", 0, 600)],
            samples=series("hV:0", 0, [50.0] * 120 + [1.0] * 480, mem_used_mib=1000.0),
        )
    settings = tmp / "settings.toml"
    settings.write_text('[clusters.c1]\ncapacity = [{ gpu_model = "H100-SXM-80GB", gpu_count = 16 }]\n')
    return db, str(settings)


@pytest.fixture
def reco_ledger(_reco_files: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> str:
    """That ledger for one test: the environment is set for the test alone, so the module's other ledger
    (small_ledger, set once for the module) is back for the tests after it."""
    db, settings = _reco_files
    monkeypatch.setenv("GPULEDGER_DB", db)
    monkeypatch.setenv("GPULEDGER_SETTINGS", settings)
    return db


RECO_DAY = {"since": ["2025-03-03"], "until": ["2025-03-03"]}  # T0's day (tests/analytics/build.py)


def _reco_groups(at: AppTest) -> list[tuple[str, list[str]]]:
    """(group heading, its lines' targets) in page order: each group is a heading then its table."""
    heads = [m.value for m in at.markdown if m.value.startswith(("**Team:", "**Platform:"))]
    tables = [d.value for d in at.dataframe if "Target" in d.value.columns]
    assert len(heads) == len(tables), (heads, len(tables))
    return [(h.split("**")[1], t["Target"].to_list()) for h, t in zip(heads, tables, strict=True)]


def test_recommendations_are_one_line_each_grouped_by_who_acts(reco_ledger: str) -> None:
    import json

    from tests.conftest import gpuledger

    at = run_page("pages/recommendations.py", RECO_DAY)
    assert not at.exception, at.exception
    got = _reco_groups(at)
    # the teams first, then the operators of a cluster; nlp's dollars (the hand ledger's kinds) lead vision's
    assert [h for h, _ in got] == ["Team: nlp", "Team: vision", "Platform: operators of c1"]
    # one line per problem, no target twice, and the lines are the CLI's list (recommend --json)
    lines = [t for _, ts in got for t in ts]
    assert len(lines) == len(set(lines))
    cli = json.loads(
        gpuledger(
            "recommend", "--json", "--limit", "0", "--since", "2025-03-03", "--until", "2025-03-03"
        ).stdout
    )
    assert sorted(lines) == sorted(r["target"] for r in cli)
    by_owner = {(r["owner_type"], r["owner"]) for r in cli}
    assert by_owner == {("team", "nlp"), ("team", "vision"), ("operators", "operators of c1")}
    assert dict(got)["Team: vision"] == [r["target"] for r in cli if r["owner"] == "vision"]


def test_mine_keeps_the_team_picked_without_sign_in(reco_ledger: str) -> None:
    at = run_page("pages/recommendations.py", RECO_DAY)
    at.radio(key="rec_show").set_value("Mine").run()
    assert not at.exception, at.exception
    # no sign-in and no team in the sidebar: it asks, rather than take the first team in the alphabet
    assert at.selectbox(key="rec_team").value is None
    assert [h for h, _ in _reco_groups(at)] == []
    at.selectbox(key="rec_team").set_value("nlp").run()
    assert [h for h, _ in _reco_groups(at)] == ["Team: nlp"]
    at.selectbox(key="rec_team").set_value("vision").run()
    assert [h for h, _ in _reco_groups(at)] == ["Team: vision"]
    diagnosed = [d.value for d in at.dataframe if "diagnosis" in d.value.columns]
    assert all(set(d["team"]) <= {"vision"} for d in diagnosed)  # the diagnoses are the team's own too
    # the metric counts the part shown by itself: vision's one problem, the notebook idle 8 of its 10 h
    week = next(m for m in at.metric if m.label == "Possible savings").value
    assert week != "$0.00 / week"


def test_mine_is_the_signed_in_leads_team(reco_ledger: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lead (gpuledger/ledger/access.py Scope with teams) sees their own team's lines, no team picker."""
    from gpuledger.ledger.access import Scope
    from pages import _scope

    monkeypatch.setattr(_scope, "viewer", lambda: Scope(who="vic@example.com", teams=("vision",)))
    at = run_page("pages/recommendations.py", RECO_DAY)
    at.radio(key="rec_show").set_value("Mine").run()
    assert not at.exception, at.exception
    assert not [s for s in at.selectbox if s.key == "rec_team"]
    assert [h for h, _ in _reco_groups(at)] == ["Team: vision"]


def staged_ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **stage: str) -> str:
    """A ledger landed from ``stage_<name>`` tables, each given as the SELECT that fills it (the collectors'
    own landing, so jobs are tied to their GPUs' samples as an ingest ties them), read by the pages."""
    from collectors.base import IngestOptions, drop_stage, land, next_ingest_id

    db = str(tmp_path / "staged.duckdb")
    with writer(db) as con:
        con.execute("BEGIN TRANSACTION")
        for name, select in stage.items():
            con.execute(f"CREATE TEMP TABLE stage_{name} AS {select}")
        land(con, next_ingest_id(con), IngestOptions())
        drop_stage(con)
        con.execute("COMMIT")
    monkeypatch.setenv("GPULEDGER_DB", db)
    monkeypatch.setenv("GPULEDGER_SETTINGS", str(tmp_path / "none.toml"))
    (tmp_path / "none.toml").write_text("")
    return db


def chart(at: AppTest, i: int = 0) -> dict:
    import json

    return json.loads(at.get("plotly_chart")[i].proto.spec)


UUID = "GPU-{}0000000-1111-2222-3333-444455556666"


def array(value: object) -> list:
    """A trace's array as plotly wrote it: a list, or (plotly 6) typed base64 ``{dtype, bdata, shape}``;
    NaN (a blank cell) as None."""
    import base64
    import math

    import numpy as np

    if isinstance(value, dict) and "bdata" in value:
        shape = [int(n) for n in str(value.get("shape", "-1")).split(",")]
        value = np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"]).reshape(shape).tolist()

    def clean(v: object) -> object:
        if isinstance(v, list):
            return [clean(x) for x in v]
        return None if isinstance(v, float) and math.isnan(v) else v

    return clean(value)  # type: ignore[return-value]


def test_the_fleet_heatmap_draws_idle_while_held_and_unallocated_in_two_colours(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three GPUs of host n0, one sample a minute from 10:00 to 11:59. Job j1 holds GPUs 0 and 2 from 10:00
    to 11:20; GPU 0 and GPU 1 read 0 %, GPU 2 reads 90 %. By hand, with the rule "at least half of the
    hour's telemetry seconds": hour 10, GPU 0 held and idle 60 of 60 min (idle while held), GPU 1 held by
    nobody (unallocated), GPU 2 held and busy (drawn at 90 %); hour 11, every GPU is held by nobody for
    40 of 60 min (unallocated), even GPU 2 at 90 %. The two states are drawn in the waste parts' colours,
    different from each other and from the utilization scale."""
    from gpuledger.ledger.palette import PART_COLOURS, UTIL_SCALE

    staged_ledger(
        tmp_path,
        monkeypatch,
        samples=f"""SELECT TIMESTAMP '2026-11-16 10:00:00' + INTERVAL (m) MINUTE AS ts,
                       replace('{UUID}', '{{}}', g::VARCHAR) AS gpu_id, 60.0::FLOAT AS interval_s,
                       (CASE WHEN g = 2 THEN 90 ELSE 0 END)::FLOAT AS util_pct
                    FROM range(3) a(g), range(120) b(m)""",
        gpus=f"""SELECT replace('{UUID}', '{{}}', g::VARCHAR) AS gpu_id, 'n0' AS host, g::INTEGER AS gpu_index,
                    'H100-SXM-80GB' AS model, 'atlas' AS cluster FROM range(3) a(g)""",
        jobs="""SELECT 'j1' AS job_id, 'nlp' AS team, 'atlas' AS cluster, 'H100-SXM-80GB' AS gpu_model,
                   2.0 AS gpu_count, TIMESTAMP '2026-11-16 10:00:00' AS start_ts,
                   TIMESTAMP '2026-11-16 11:20:00' AS end_ts, 'training' AS kind, 'COMPLETED' AS state""",
        allocations=f"""SELECT 'j1' AS job_id, replace('{UUID}', '{{}}', g::VARCHAR) AS gpu_id,
                    TIMESTAMP '2026-11-16 10:00:00' AS start_ts, TIMESTAMP '2026-11-16 11:20:00' AS end_ts
                 FROM (VALUES (0), (2)) a(g)""",
    )
    at = run_page("pages/fleet.py")
    assert not at.exception, at.exception
    traces = {t["name"]: t for t in chart(at)["data"] if t["type"] == "heatmap"}
    util, idle, unheld = (
        traces["utilization"],
        traces["idle while held"],
        traces["unallocated (no job held it)"],
    )
    # one name for a GPU (host:index, as the idle table's), then its model
    assert list(util["y"]) == ["n0:0 · H100-SXM-80GB", "n0:1 · H100-SXM-80GB", "n0:2 · H100-SXM-80GB"]

    def cells(trace: dict) -> set[tuple[int, int]]:
        return {(r, c) for r, row in enumerate(array(trace["z"])) for c, v in enumerate(row) if v is not None}

    assert cells(idle) == {(0, 0)}
    assert cells(unheld) == {(1, 0), (0, 1), (1, 1), (2, 1)}
    assert cells(util) == {(2, 0)} and array(util["z"])[2][0] == pytest.approx(90.0)
    colour = {name: t["colorscale"][0][1] for name, t in (("idle", idle), ("unheld", unheld))}
    assert colour == {"idle": PART_COLOURS["idle_allocated_usd"], "unheld": PART_COLOURS["unallocated_usd"]}
    assert colour["idle"] != colour["unheld"]
    assert not {colour["idle"], colour["unheld"]} & {c for _, c in UTIL_SCALE}
    # the idle table splits idle hours into while held + unallocated, by hand: GPU 0 idle 120 min, of which
    # 80 held (10:00-11:20) and 40 unallocated; GPU 1 idle 120 min, all unallocated; GPU 2 never idle
    table = at.dataframe[0].value.set_index("gpu_label")
    assert list(table.index) == ["n0:0", "n0:1"]  # host:index, not the 40-character UUIDs
    assert table.loc["n0:0", "idle_h"] == pytest.approx(2.0)
    assert table.loc["n0:0", "allocated_idle_h"] == pytest.approx(80 / 60)
    assert table.loc["n0:0", "unallocated_idle_h"] == pytest.approx(40 / 60)
    assert table.loc["n0:1", "unallocated_idle_h"] == pytest.approx(2.0)
    assert table.loc["n0:1", "allocated_idle_h"] == 0


@pytest.fixture
def three_jobs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """f1: training on n0's GPUs 0-1, FAILED at 11:00 after a checkpoint at 10:30; s1: a serving job on n1:0;
    e8: training on n2's 8 GPUs. GPU ids are UUIDs; one sample a minute, 10:00-10:59."""
    gpus = "SELECT * FROM (VALUES ('n0', 0, 'f1'), ('n0', 1, 'f1'), ('n1', 0, 's1')) t(host, idx, job)"
    gpus += " UNION ALL SELECT 'n2', i, 'e8' FROM range(8) r(i)"
    uuid = f"replace('{UUID}', '{{}}', host || idx::VARCHAR)"
    return staged_ledger(
        tmp_path,
        monkeypatch,
        samples=f"""SELECT TIMESTAMP '2026-11-16 10:00:00' + INTERVAL (m) MINUTE AS ts, {uuid} AS gpu_id,
                       60.0::FLOAT AS interval_s, (50 + 5 * idx)::FLOAT AS util_pct,
                       30000.0::FLOAT AS mem_used_mib, 81559.0::FLOAT AS mem_total_mib
                    FROM ({gpus}) g, range(60) b(m)""",
        gpus=f"""SELECT {uuid} AS gpu_id, host, idx::INTEGER AS gpu_index, 'H100-SXM-80GB' AS model,
                    'atlas' AS cluster FROM ({gpus}) g""",
        jobs="""SELECT job_id, 'nlp' AS team, 'atlas' AS cluster, 'H100-SXM-80GB' AS gpu_model, n AS gpu_count,
                   TIMESTAMP '2026-11-16 10:00:00' AS start_ts, TIMESTAMP '2026-11-16 11:00:00' AS end_ts,
                   kind, state, ck AS last_checkpoint_ts, reason AS exit_reason
                FROM (VALUES ('f1', 2.0, 'training', 'FAILED', TIMESTAMP '2026-11-16 10:30:00', 'NCCL timeout'),
                             ('s1', 1.0, 'inference', 'COMPLETED', NULL, NULL),
                             ('e8', 8.0, 'training', 'COMPLETED', NULL, NULL))
                     t(job_id, n, kind, state, ck, reason)""",
        allocations=f"""SELECT job, {uuid} AS gpu_id, TIMESTAMP '2026-11-16 10:00:00' AS start_ts,
                           TIMESTAMP '2026-11-16 11:00:00' AS end_ts FROM ({gpus}) g""".replace(
            "SELECT job,", "SELECT job AS job_id,"
        ),
    )


def test_a_failed_two_gpu_job_marks_its_failure_and_checkpoint_on_one_panel_per_gpu(three_jobs: str) -> None:
    """Each GPU has its own panel named host:index (no UUID squeezes the plot, no line hides the other); a
    red line labelled with the state and reason at the job's end, a dashed one at its last checkpoint."""
    from gpuledger.ledger.palette import PART_COLOURS

    at = run_page("pages/jobs.py", {"job": ["f1"]})
    assert not at.exception, at.exception
    spec = chart(at)
    titles = [a["text"] for a in spec["layout"]["annotations"]]
    assert titles[:2] == ["n0:0", "n0:1"] and not any("GPU-" in t for t in titles), titles
    util = [t for t in spec["data"] if t["name"] == "utilization (%)"]
    assert len(util) == 2 and util[0]["yaxis"] != util[1]["yaxis"]  # two panels, not two lines on one
    assert "✕ FAILED: NCCL timeout" in titles
    shapes = spec["layout"]["shapes"]
    lines = {(s["x0"][:16].replace("T", " "), s["line"].get("color"), s["line"].get("dash")) for s in shapes}
    assert ("2026-11-16 11:00", PART_COLOURS["failed_usd"], None) in lines
    assert ("2026-11-16 10:30", "#444444", "dash") in lines
    assert any("ended FAILED at 2026-11-16 11:00 UTC" in c.value for c in at.caption)
    assert [m.value for m in at.markdown if m.value == "**Training metrics**"]


def test_an_eight_gpu_job_draws_eight_panels_in_index_order(three_jobs: str) -> None:
    at = run_page("pages/jobs.py", {"job": ["e8"]})
    assert not at.exception, at.exception
    spec = chart(at)
    titles = [a["text"] for a in spec["layout"]["annotations"]]
    assert titles == [f"n2:{i}" for i in range(8)], titles  # a COMPLETED job: no failure mark
    util = [t for t in spec["data"] if t["name"] == "utilization (%)"]
    assert len({t["yaxis"] for t in util}) == 8
    # GPU i reads 50 + 5 i %: each panel holds its own GPU's line
    assert [array(t["y"])[0] for t in util] == pytest.approx([50 + 5 * i for i in range(8)])
    assert not spec["layout"].get("shapes")


def test_a_serving_job_is_headed_serving_metrics(three_jobs: str) -> None:
    at = run_page("pages/jobs.py", {"job": ["s1"]})
    assert not at.exception, at.exception
    heads = [m.value for m in at.markdown if m.value.startswith("**")]
    assert "**Serving metrics**" in heads and "**Training metrics**" not in heads
    assert any("$ per 1M generated tokens" in m.value for m in at.markdown)


def test_the_jobs_table_shows_the_gpu_model_within_the_screen(three_jobs: str) -> None:
    """The GPU model sits among the first columns (before the waste's parts) with room for its name."""
    import json

    at = run_page("pages/jobs.py")
    assert not at.exception, at.exception
    df = at.dataframe[0]
    columns = list(df.value.columns)
    assert columns.index("gpu_model") < columns.index("idle_allocated_usd"), columns
    assert json.loads(df.proto.columns)["gpu_model"]["width"] >= len("H100-SXM-80GB") * 9  # ~9 px a character


def test_the_training_scatter_compares_runs_per_billion_parameters(small_ledger: str) -> None:
    """tests/fixtures/dashboard/jobs.csv, by hand at the sheet's H100 $2.99/GPU-h: dash-1 (7 B) 8 GPUs × 10 h
    = $239.20 for 864 M tokens = $0.276852 per 1M, ÷ 7 = $0.0395503 per 1M per billion parameters; dash-5
    (1.5 B) 4 × 24 h = $287.04 for 432 M = $0.664444, ÷ 1.5 = $0.442963. The 7 B run's tokens cost less
    per parameter: what the raw $ per 1M tokens (the bigger model's dearer tokens) hid."""
    at = run_page("pages/training.py")
    assert not at.exception, at.exception
    points = [(x, y) for t in chart(at)["data"] for x, y in zip(array(t["x"]), array(t["y"]), strict=True)]
    ys = sorted(y for _, y in points)
    assert ys == pytest.approx([239.2 / 864 / 7, 287.04 / 432 / 1.5], rel=1e-6)
    assert any("billions of parameters" in c.value for c in at.caption)
    at.radio(key="training_scatter").set_value("$ per 1M tokens, by model size").run()
    ys = sorted(y for t in chart(at)["data"] for y in array(t["y"]))
    assert ys == pytest.approx([239.2 / 864, 287.04 / 432], rel=1e-6)
    names = {t["name"] for t in chart(at)["data"]}
    assert all(n.startswith("1–10 B") for n in names), names  # coloured by size band


def test_the_training_tables_print_thousands_separators(small_ledger: str) -> None:
    """Every plain number column of the pages' tables gets a separator format (27877 MiB → 27,877 MiB)."""
    import json

    at = run_page("pages/training.py")
    config = json.loads(at.dataframe[0].proto.columns)
    formats = {k: v.get("type_config", {}).get("format") for k, v in config.items()}
    assert formats["gpu_count"] == "localized", formats
    # a column with unknown cells is text in its unit's format: dash-5 ran 5,000 tokens/s on 4 GPUs
    rows = at.dataframe[0].value.set_index("job_id")
    assert (
        rows.loc["dash-5", "tokens_per_s_per_gpu"] == "1,250"
        and rows.loc["dash-2", "tokens_per_s_per_gpu"] == "n/a"
    )
    from pages._ui import column_config

    assert column_config(["peak_mem_mib"])["peak_mem_mib"]["type_config"]["format"] == "%,.0f"


def test_settings_labels_thresholds_in_words_and_lists_a_clusters_own_price(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No raw key as a label (the key is in the help), and a price row an ingested file declared for one
    cluster is among the prices in force."""
    import datetime as dt

    staged_ledger(
        tmp_path,
        monkeypatch,
        prices="""SELECT 'A100-80GB' AS gpu_model, 'on_prem' AS tier, 'borealis' AS cluster,
                     DATE '2025-10-26' AS effective_from, 1.10 AS usd_per_gpu_hour, 'amortized DGX' AS source,
                     DATE '2026-01-15' AS source_date""",
        jobs="""SELECT 'j' AS job_id, 'nlp' AS team, 'borealis' AS cluster, 'A100-80GB' AS gpu_model,
                   1.0 AS gpu_count, TIMESTAMP '2026-11-16 10:00:00' AS start_ts,
                   TIMESTAMP '2026-11-16 11:00:00' AS end_ts, 'training' AS kind, 'COMPLETED' AS state""",
    )
    at = run_page("pages/settings.py")
    assert not at.exception, at.exception
    labels = [n.label for n in at.number_input]
    assert "Idle below (% utilization)" in labels
    assert not [x for x in labels if "." in x or "_" in x], labels
    idle = next(n for n in at.number_input if n.label == "Idle below (% utilization)")
    assert "thresholds.idle_util_pct" in idle.help
    table = at.dataframe[0].value
    row = table[(table["cluster"] == "borealis") & (table["gpu_model"] == "A100-80GB")]
    assert len(row) == 1 and row["usd_per_gpu_hour"].item() == pytest.approx(1.10)
    assert row["from"].item() == "declared by an ingested file"
    assert str(row["effective_from"].item())[:10] == str(dt.date(2025, 10, 26))


def test_a_job_judged_from_slurm_accounting_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A job with no telemetry and sacct's gres/gpuutil=42 on its batch step: the Jobs page shows 42 % marked
    "from Slurm accounting", in the table and on the job's own view."""
    from collectors.base import IngestOptions

    db = str(tmp_path / "slurm.duckdb")
    sacct = tmp_path / "sacct.txt"
    sacct.write_text(
        "JobIDRaw|Cluster|JobName|User|Account|State|Start|End|ElapsedRaw|AllocTRES|NodeList|TRESUsageInAve\n"
        "500|ci|train|alice|nlp|COMPLETED|2025-03-01T10:00:00|2025-03-01T12:00:00|7200|gres/gpu:h100=1,gres/gpu=1|g01|\n"
        "500.batch|ci|batch|||COMPLETED|2025-03-01T10:00:00|2025-03-01T12:00:00|7200|gres/gpu=1|g01|gres/gpuutil=42\n"
    )
    with writer(db) as con:
        ingest_file(con, sacct, opts=IngestOptions(tz="UTC"))
    monkeypatch.setenv("GPULEDGER_DB", db)
    monkeypatch.setenv("GPULEDGER_SETTINGS", str(tmp_path / "none.toml"))
    (tmp_path / "none.toml").write_text("")
    at = run_page("pages/jobs.py")
    assert not at.exception, at.exception
    table = at.dataframe[0].value
    assert list(table["util_basis"]) == ["from Slurm accounting"]
    at = run_page("pages/jobs.py", {"job": ["ci/500"]})
    assert not at.exception, at.exception
    [util] = [m for m in at.metric if m.label.startswith("Mean utilization")]
    assert util.label == "Mean utilization (from Slurm accounting)" and util.value == "42.0 %"


def test_after_another_process_rebuilds_the_rollups_a_page_syncs_them_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The analytics read only the rollups and refuse ones built for other thresholds (RollupMismatch), so the
    dashboard syncs the ledger to its settings once per settings and ledger version: an ingest by another
    process under other settings (here: the rollups rebuilt for the defaults) is followed by a sync, not an
    error. Before 2026-12-06 the sync ran once per settings version and the figures fell back to raw samples."""
    from gpuledger.ledger.rollup import ensure_rollup
    from gpuledger.ledger.rollup_thresholds import DEFAULT_THRESHOLDS, stored_thresholds

    db = str(tmp_path / "resync.duckdb")
    with writer(db) as con:
        ingest_file(con, ROOT / "tests" / "fixtures" / "nvidia_smi" / "full_fields_h200.csv")
    settings = tmp_path / "custom.toml"
    settings.write_text("[thresholds]\nidle_util_pct = 2\nidle_min_minutes = 10\ntarget_util_pct = 70\n")
    monkeypatch.setenv("GPULEDGER_DB", db)
    monkeypatch.setenv("GPULEDGER_SETTINGS", str(settings))
    custom = (2.0, 10.0, 70.0)
    at = run_page("pages/overview.py")
    assert not at.exception, at.exception
    with writer(db) as con:
        assert stored_thresholds(con) == custom
        con.execute("BEGIN TRANSACTION")
        assert ensure_rollup(con, DEFAULT_THRESHOLDS)  # what an ingest under the default settings does
        con.execute("COMMIT")
    at.run()
    assert not at.exception, at.exception
    with writer(db) as con:
        assert stored_thresholds(con) == custom


def test_a_job_booked_as_another_model_shows_the_model_its_card_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sacct books job 8 as an a100 on n1 for 2 h; n1's only card reports as a V100 (tests/analytics/
    allocation_files.py). The Jobs page shows the booked A100-40GB with V100-32GB in its 'reported model'
    column and a note that such jobs are priced as booked, their card counted once (docs/metrics.md)."""
    from collectors.base import IngestOptions
    from tests.analytics.test_allocation_shapes import booked_as_v100

    db = str(tmp_path / "booked.duckdb")
    with writer(db) as con:
        for f in booked_as_v100(tmp_path):
            ingest_file(con, f, opts=IngestOptions(cluster="c1", tz="UTC"))
    monkeypatch.setenv("GPULEDGER_DB", db)
    monkeypatch.setenv("GPULEDGER_SETTINGS", str(tmp_path / "none.toml"))
    (tmp_path / "none.toml").write_text("")
    at = run_page("pages/jobs.py")
    assert not at.exception, at.exception
    table = at.dataframe[0].value
    assert list(zip(table["gpu_model"], table["observed_gpu_model"], strict=True)) == [
        ("A100-40GB", "V100-32GB")
    ]
    assert any("1 job(s) booked as another GPU model than their cards report" in c.value for c in at.caption)
