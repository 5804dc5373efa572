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

from collectors.base import ingest_file
from gpuledger.ledger.db import writer
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
    "pages/settings.py": "Settings",
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
    from gpuledger.ledger.db import data_version, reader
    from gpuledger.reports.weekly import last_full_week
    from pages import _data

    with reader(small_ledger) as con:
        expected = summary(con)["as_of"]
    got = _data._as_of(small_ledger, data_version(small_ledger))
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
    """A heatmap row is labelled with the GPU id's first 12 characters, which a host:index id of a long host
    name (gpu-node-0001:0, gpu-node-0001:1) shares with its neighbours: they must not merge into one row."""
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
    assert heat["y"] == [
        "gpu-node-0001 · unknown model · gpu-node-0001:0",
        "gpu-node-0001 · unknown model · gpu-node-0001:1",
    ]


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


def test_an_upload_of_many_gpus_draws_a_line_per_host_and_opens_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file with more GPUs than lines a reader can tell apart (70 GPUs on 10 hosts) is drawn one line per
    host, the time-weighted mean over its GPUs, and a host opens onto its own GPUs' lines."""
    from pages import _data

    monkeypatch.setenv("GPULEDGER_SETTINGS", str(tmp_path / "none.toml"))
    (tmp_path / "none.toml").write_text("")
    rows = "".join(
        f"2026-11-16 10:{m:02d}:00.000, n{g // 7}, {g % 7}, {(g * 3 + m * 11) % 100} %\n"
        for m in range(4)
        for g in range(70)
    )
    data = ("timestamp, hostname, index, utilization.gpu [%]\n" + rows).encode()
    result = _data.analyse_upload("fleet.csv", data, None, "UTC")
    assert result.error is None, result.error
    assert result.gpu_groups is not None and result.gpu_groups.height == 70
    groups = result.timeline_groups
    assert groups is not None and groups["key"].n_unique() == 10
    # by hand: host n3 holds GPUs 21..27; every sample stands for 60 s, so its minute-1 point is their mean
    expect = sum((g * 3 + 1 * 11) % 100 for g in range(21, 28)) / 7
    point = groups.filter((pl.col("key") == "n3") & (pl.col("ts").dt.minute() == 1))
    assert point["util_pct"].item() == pytest.approx(expect)
    assert point["gpus"].item() == 7


def test_an_upload_of_more_hosts_than_lines_pools_the_busiest_into_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """80 single-GPU hosts: 60 lines, the 59 hosts with the most unused GPU-seconds and one for the other 21
    (their pooled sums), and every host, pooled or not, still opens onto its GPU."""
    from pages import _data

    monkeypatch.setenv("GPULEDGER_SETTINGS", str(tmp_path / "none.toml"))
    (tmp_path / "none.toml").write_text("")
    # host h{i} runs at i % for two minutes: the 21 busiest (h59..h79) are pooled
    rows = "".join(f"2026-11-16 10:{m:02d}:00.000, h{h:02d}, 0, {h} %\n" for m in range(2) for h in range(80))
    data = ("timestamp, hostname, index, utilization.gpu [%]\n" + rows).encode()
    result = _data.analyse_upload("fleet.csv", data, None, "UTC")
    assert result.error is None, result.error
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


def test_an_upload_of_more_gpus_on_a_host_than_lines_pools_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host of 70 GPUs opens onto 60 lines: the 59 GPUs with the most unused GPU-seconds and one for the
    other 11; a file whose GPUs are all on one host shows those lines at once (one host line says nothing)."""
    from pages import _data

    monkeypatch.setenv("GPULEDGER_SETTINGS", str(tmp_path / "none.toml"))
    (tmp_path / "none.toml").write_text("")
    uuid = "GPU-{:08d}-1111-2222-3333-444455556666"

    def upload(header: str, line: str, gpus: int) -> _data.UploadResult:
        rows = "".join(line.format(m=m, g=g, uuid=uuid.format(g)) for m in range(2) for g in range(gpus))
        result = _data.analyse_upload("gpus.csv", (header + rows).encode(), None, "UTC")
        assert result.error is None, result.error
        return result

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
    two = _data.analyse_upload(
        "gpus.csv", ("timestamp, hostname, index, uuid, utilization.gpu [%]\n" + rows).encode(), None, "UTC"
    )
    assert two.error is None, two.error
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
    """A job of 70 GPUs on 10 hosts: its timeline is the mean by default, and split one line per host (not
    70 lines) on request, each host's line pooled over the job's GPUs on it. On 70 hosts: 60 lines, the 59
    hosts with the most unused GPU-seconds (ranked here in plain SQL over the samples) and one for the rest."""
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
    assert toggle.label == "One line per host" and toggle.value is False
    assert any("the line is their time-weighted mean" in c.value for c in at.caption)
    toggle.set_value(True).run()
    assert not at.exception, at.exception
    assert any("one line per host" in c.value for c in at.caption)
    chart = at.get("plotly_chart")[0]
    import json

    names = {t["name"] for t in json.loads(chart.proto.spec)["data"] if t.get("showlegend") is not False}
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
        "the 59 hosts with the most unused GPU-hours; the other 11 share one line" in c.value
        for c in at.caption
    )


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
