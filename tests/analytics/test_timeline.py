"""Fleet views over the per-GPU-minute rollup: heatmap cells, idle GPUs, one job's timeline.

A tiny ledger landed through the real write path (stage tables + collectors.landing.land), with every
expected value worked out by hand below.
"""

from __future__ import annotations

import datetime as dt

import pytest

from analytics.filters import Filters
from analytics.timeline import (
    gpu_hour_heatmap,
    gpu_timeline,
    group_hour_heatmap,
    group_sizes,
    group_timeline,
    idle_gpus,
    job_timeline,
    view_gpu_count,
    view_groups,
)
from collectors.base import IngestOptions, drop_stage, land, next_ingest_id

T0 = dt.datetime(2026, 11, 16, 0, 0, 0)


@pytest.fixture
def fleet(ledger):
    """g0 (cluster a): 4 samples from 00:00 at 30 s, util 0, 10, 100, NULL — no job.
    g1 (cluster b): 2 samples from 01:00 at 30 s, util 50, 3 — held by job j1 (team nlp)."""
    ledger.execute("BEGIN TRANSACTION")
    ledger.execute(
        """CREATE TEMP TABLE stage_samples AS
           SELECT * FROM (VALUES
             (TIMESTAMP '2026-11-16 00:00:00', 'g0', 30.0::FLOAT, 0.0::FLOAT),
             (TIMESTAMP '2026-11-16 00:00:30', 'g0', 30.0, 10.0),
             (TIMESTAMP '2026-11-16 00:01:00', 'g0', 30.0, 100.0),
             (TIMESTAMP '2026-11-16 00:01:30', 'g0', 30.0, NULL),
             (TIMESTAMP '2026-11-16 01:00:00', 'g1', 30.0, 50.0),
             (TIMESTAMP '2026-11-16 01:00:30', 'g1', 30.0, 3.0)
           ) t(ts, gpu_id, interval_s, util_pct)"""
    )
    ledger.execute(
        """CREATE TEMP TABLE stage_gpus AS SELECT * FROM (VALUES
             ('g0', 'h0', 'H100-SXM-80GB', 'a'), ('g1', 'h1', 'L4', 'b')) t(gpu_id, host, model, cluster)"""
    )
    ledger.execute(
        """CREATE TEMP TABLE stage_jobs AS SELECT 'j1' AS job_id, 'nlp' AS team, 'b' AS cluster,
             'L4' AS gpu_model, 1.0 AS gpu_count, TIMESTAMP '2026-11-16 01:00:00' AS start_ts,
             TIMESTAMP '2026-11-16 02:00:00' AS end_ts, 'training' AS kind"""
    )
    ledger.execute(
        """CREATE TEMP TABLE stage_allocations AS SELECT 'j1' AS job_id, 'g1' AS gpu_id,
             TIMESTAMP '2026-11-16 01:00:00' AS start_ts, TIMESTAMP '2026-11-16 02:00:00' AS end_ts"""
    )
    land(ledger, next_ingest_id(ledger), IngestOptions())
    drop_stage(ledger)
    ledger.execute("COMMIT")
    return ledger


def test_heatmap_cells_are_time_weighted_means_over_readings(fleet):
    cells = gpu_hour_heatmap(fleet).select("gpu_id", "hour", "mean_util_pct", "covered_s").rows()
    assert cells[0][:2] == ("g0", T0)
    # g0, hour 00: (0×30 + 10×30 + 100×30) / 90 s with a reading = 36.67 %; 4 samples × 30 s of telemetry
    assert cells[0][2] == pytest.approx((0 * 30 + 10 * 30 + 100 * 30) / 90)
    assert cells[0][3] == 120
    # g1, hour 01: (50×30 + 3×30) / 60 = 26.5 %
    assert cells[1][:2] == ("g1", T0 + dt.timedelta(hours=1))
    assert cells[1][2] == pytest.approx(26.5)


def test_filters_select_cluster_team_and_dates(fleet):
    assert gpu_hour_heatmap(fleet, filters=Filters(clusters=("a",)))["gpu_id"].unique().to_list() == ["g0"]
    # a team filter keeps only minutes attributed to that team's jobs: g1 while j1 held it
    assert gpu_hour_heatmap(fleet, filters=Filters(teams=("nlp",)))["gpu_id"].unique().to_list() == ["g1"]
    assert gpu_hour_heatmap(fleet, filters=Filters(since=dt.date(2026, 11, 17))).is_empty()


def test_grouped_heatmap_pools_every_gpu_of_a_host_or_cluster_and_drills_down(fleet):
    # a second GPU on host h0 (cluster a), hour 00: one sample at 80 % for 60 s
    fleet.execute("BEGIN TRANSACTION")
    fleet.execute(
        """CREATE TEMP TABLE stage_samples AS SELECT TIMESTAMP '2026-11-16 00:00:00' AS ts, 'g2' AS gpu_id,
             60.0::FLOAT AS interval_s, 80.0::FLOAT AS util_pct"""
    )
    fleet.execute(
        "CREATE TEMP TABLE stage_gpus AS SELECT 'g2' AS gpu_id, 'h0' AS host, 'L4' AS model, 'a' AS cluster"
    )
    land(fleet, next_ingest_id(fleet), IngestOptions())
    drop_stage(fleet)
    fleet.execute("COMMIT")
    hosts = {(r["key"], r["hour"]): r for r in group_hour_heatmap(fleet, by="host").iter_rows(named=True)}
    assert set(hosts) == {("h0", T0), ("h1", T0 + dt.timedelta(hours=1))}
    # by hand: h0 at 00: (0×30 + 10×30 + 100×30 + 80×60) / (90 + 60) s with a reading = 54 %, not the mean
    # of the two GPUs' means (36.67 and 80); telemetry 120 + 60 s; two GPUs
    assert hosts[("h0", T0)]["mean_util_pct"] == pytest.approx((0 + 300 + 3000 + 4800) / 150)
    assert hosts[("h0", T0)]["covered_s"] == 180
    assert hosts[("h0", T0)]["gpus"] == 2
    # the same cell in plain SQL over the raw samples
    (plain,) = fleet.execute(
        """SELECT sum(util_pct * interval_s) FILTER (WHERE util_pct IS NOT NULL)
                  / sum(interval_s) FILTER (WHERE util_pct IS NOT NULL)
           FROM samples JOIN gpus USING (gpu_id) WHERE host = 'h0' AND ts < TIMESTAMP '2026-11-16 01:00:00'"""
    ).fetchall()[0]
    assert hosts[("h0", T0)]["mean_util_pct"] == pytest.approx(plain)
    clusters = group_hour_heatmap(fleet, by="cluster")
    assert clusters["key"].to_list() == ["a", "b"]
    # the drill-down: one row per GPU of the chosen group, the per-GPU cells unchanged
    drill = gpu_hour_heatmap(fleet, within=("host", "h0"))
    assert sorted(drill["gpu_id"].unique().to_list()) == ["g0", "g2"]
    assert drill.filter(drill["gpu_id"] == "g2")["mean_util_pct"].item() == pytest.approx(80.0)
    assert gpu_hour_heatmap(fleet, within=("cluster", "b"))["gpu_id"].unique().to_list() == ["g1"]
    assert view_gpu_count(fleet) == 3
    assert view_gpu_count(fleet, filters=Filters(clusters=("b",))) == 1
    # how many rows each heatmap would have: 3 GPUs on 2 hosts (h0: g0, g2) in 2 clusters (a, b)
    assert view_groups(fleet) == {"gpus": 3, "hosts": 2, "clusters": 2}
    assert view_groups(fleet, filters=Filters(clusters=("a",))) == {"gpus": 2, "hosts": 1, "clusters": 1}
    # the middle step of a drill from clusters to GPUs: the hosts of one cluster, cells as in the whole view
    inside = group_hour_heatmap(fleet, by="host", within=("cluster", "a"))
    assert inside["key"].unique().to_list() == ["h0"]
    assert inside.row(0, named=True)["mean_util_pct"] == pytest.approx(hosts[("h0", T0)]["mean_util_pct"])
    assert group_hour_heatmap(fleet, by="host", within=("cluster", "b"))["key"].to_list() == ["h1"]
    # several pairs at once: a GPU of cluster a whose host is not named is cluster a's alone
    fleet.execute("UPDATE gpus SET host = NULL WHERE gpu_id IN ('g1', 'g2')")  # g1 in b, g2 in a
    unnamed_in_a = gpu_hour_heatmap(fleet, within=(("cluster", "a"), ("host", None)))
    assert unnamed_in_a["gpu_id"].unique().to_list() == ["g2"]
    assert sorted(gpu_hour_heatmap(fleet, within=("host", None))["gpu_id"].unique().to_list()) == ["g1", "g2"]
    with pytest.raises(ValueError, match="unknown grouping 'rack'"):
        group_hour_heatmap(fleet, by="rack")


def test_grouped_heatmap_past_max_groups_keeps_the_most_unused_and_pools_the_rest(fleet):
    # two more hosts: g2 on h2 at 01:00, 60 s at 80 %; g3 on h3 at 00:00, 60 s at 0 %
    fleet.execute("BEGIN TRANSACTION")
    fleet.execute(
        """CREATE TEMP TABLE stage_samples AS SELECT * FROM (VALUES
             (TIMESTAMP '2026-11-16 01:00:00', 'g2', 60.0::FLOAT, 80.0::FLOAT),
             (TIMESTAMP '2026-11-16 00:00:00', 'g3', 60.0, 0.0)) t(ts, gpu_id, interval_s, util_pct)"""
    )
    fleet.execute(
        """CREATE TEMP TABLE stage_gpus AS SELECT * FROM (VALUES
             ('g2', 'h2', 'L4', 'b'), ('g3', 'h3', 'L4', 'b')) t(gpu_id, host, model, cluster)"""
    )
    land(fleet, next_ingest_id(fleet), IngestOptions())
    drop_stage(fleet)
    fleet.execute("COMMIT")
    # unused seconds by hand (reading-covered seconds less busy seconds): h0 90 - (0 + 3 + 30) = 57,
    # h1 60 - (15 + 0.9) = 44.1, h2 60 - 48 = 12, h3 60 - 0 = 60; so with 3 rows: h3, h0, and h1 + h2 pooled
    rows = group_hour_heatmap(fleet, by="host", max_groups=3)
    assert rows.select("key", "others").unique(maintain_order=True).rows() == [
        ("h0", 0),
        ("h3", 0),
        (None, 2),
    ]
    pooled = rows.filter(rows["others"] == 2).row(0, named=True)
    # the pooled row at 01:00 holds h1 (50 % and 3 % for 30 s each) and h2 (80 % for 60 s)
    assert pooled["hour"] == T0 + dt.timedelta(hours=1)
    assert pooled["mean_util_pct"] == pytest.approx((50 * 30 + 3 * 30 + 80 * 60) / 120)
    assert (pooled["covered_s"], pooled["gpus"]) == (120, 2)
    # nothing is lost: every row's telemetry seconds add up to the samples' intervals
    (total,) = fleet.execute("SELECT sum(interval_s) FROM samples").fetchall()[0]
    assert rows["covered_s"].sum() == pytest.approx(total)
    # at or under the limit nothing is pooled, and the rows are the unlimited ones
    assert group_hour_heatmap(fleet, by="host", max_groups=4).equals(group_hour_heatmap(fleet, by="host"))
    assert group_hour_heatmap(fleet, by="host")["others"].max() == 0
    with pytest.raises(ValueError, match="max_groups"):
        group_hour_heatmap(fleet, by="host", max_groups=1)
    # the timeline pools the same way: h3 and h0 keep their lines, h1 and h2 share one; at 01:00 it holds
    # h1's two 30 s samples (50 %, 3 %) and h2's 60 s one (80 %)
    lines = group_timeline(fleet, by="host", max_groups=3)
    assert lines.select("key", "others").unique(maintain_order=True).rows() == [
        ("h0", 0),
        ("h3", 0),
        (None, 2),
    ]
    pooled_line = lines.filter(lines["others"] == 2).row(0, named=True)
    assert pooled_line["ts"] == T0 + dt.timedelta(hours=1)
    assert pooled_line["util_pct"] == pytest.approx((50 * 30 + 3 * 30 + 80 * 60) / 120)
    assert pooled_line["gpus"] == 2
    assert group_timeline(fleet, by="host", max_groups=4)["others"].max() == 0
    # the per-GPU heatmap pools the same way: g3 and g0 keep their rows, g1 + g2 share one at 01:00
    cells = gpu_hour_heatmap(fleet, max_gpus=3)
    assert cells.select("gpu_id", "others").unique(maintain_order=True).rows() == [
        ("g0", 0),
        ("g3", 0),
        (None, 2),
    ]
    pooled_cell = cells.filter(cells["others"] == 2).row(0, named=True)
    assert pooled_cell["mean_util_pct"] == pytest.approx((50 * 30 + 3 * 30 + 80 * 60) / 120)
    assert (pooled_cell["covered_s"], pooled_cell["host"]) == (120, None)
    assert cells["covered_s"].sum() == pytest.approx(total)
    # one group's GPUs, pooled past a limit: cluster b holds g1 (h1), g2 (h2), g3 (h3); unused seconds by
    # hand g3 60, g1 44.1, g2 12, so with 2 lines g3 keeps its own and g1 + g2 share one
    gpus = gpu_timeline(fleet, within=("cluster", "b"), max_gpus=2)
    assert gpus.select("gpu_id", "others").unique(maintain_order=True).rows() == [("g3", 0), (None, 2)]
    pooled_gpus = gpus.filter(gpus["others"] == 2).row(0, named=True)
    assert pooled_gpus["util_pct"] == pytest.approx((50 * 30 + 3 * 30 + 80 * 60) / 120)
    assert gpu_timeline(fleet, within=("cluster", "a"))["gpu_id"].unique().to_list() == ["g0"]
    # the drill-down still offers every group, pooled or not, with its GPUs
    assert group_sizes(fleet, by="host").rows() == [("h0", 1), ("h1", 1), ("h2", 1), ("h3", 1)]
    assert group_sizes(fleet, by="cluster").rows() == [("a", 1), ("b", 3)]
    assert group_sizes(fleet, by="host", within=("cluster", "b")).rows() == [("h1", 1), ("h2", 1), ("h3", 1)]
    assert group_sizes(fleet, by="host", filters=Filters(since=dt.date(2026, 11, 17))).is_empty()


def test_idle_gpus_rank_by_idle_hours_and_split_allocated(fleet):
    rows = {r["gpu_id"]: r for r in idle_gpus(fleet).iter_rows(named=True)}
    # g0: one sample at 0 % (≤ 5) → 30 s idle of 120 s telemetry, none of it allocated, all unallocated
    assert rows["g0"]["idle_h"] == pytest.approx(30 / 3600)
    assert rows["g0"]["idle_share"] == pytest.approx(30 / 120)
    assert rows["g0"]["allocated_idle_h"] == 0
    assert rows["g0"]["unallocated_h"] == pytest.approx(120 / 3600)
    # g1: the 3 % sample → 30 s idle, while j1 held it
    assert rows["g1"]["allocated_idle_h"] == pytest.approx(30 / 3600)
    assert rows["g1"]["unallocated_h"] == 0


def test_job_timeline_has_one_point_per_gpu_minute(fleet):
    tl = job_timeline(fleet, "j1")
    # both g1 samples fall in minute 01:00 → one point at (50×30 + 3×30) / 60
    assert tl.select("gpu_id", "ts").rows() == [("g1", T0 + dt.timedelta(hours=1))]
    assert tl["util_pct"][0] == pytest.approx(26.5)
    assert job_timeline(fleet, "no-such-job").is_empty()
    # one line per host: j1's one GPU sits on h1, so the host's line is that GPU's point
    assert job_timeline(fleet, "j1", lines="host").select("gpu_id", "util_pct").rows() == [("h1", 26.5)]


def test_gpu_timeline_coarsens_to_hours_when_asked_for_few_points(fleet):
    minutes = gpu_timeline(fleet)
    assert minutes.height == 3  # g0 00:00, g0 00:01, g1 01:00
    hours = gpu_timeline(fleet, max_points=2)
    assert hours.select("gpu_id", "ts").rows() == [("g0", T0), ("g1", T0 + dt.timedelta(hours=1))]
    assert hours["util_pct"][0] == pytest.approx((0 * 30 + 10 * 30 + 100 * 30) / 90)


def test_group_timeline_pools_the_groups_gpus_at_the_per_gpu_timelines_unit(fleet):
    by_cluster = group_timeline(fleet, by="cluster")
    # minutes, as gpu_timeline's: cluster a (g0) at 00:00 (0, 10 over 60 s) and 00:01 (100, then no reading)
    assert by_cluster.select("key", "ts", "gpus").rows() == [
        ("a", T0, 1),
        ("a", T0 + dt.timedelta(minutes=1), 1),
        ("b", T0 + dt.timedelta(hours=1), 1),
    ]
    assert by_cluster["util_pct"].to_list() == pytest.approx([5.0, 100.0, 26.5])
    # hours when gpu_timeline coarsens: one point per cluster, the same cell as its GPUs pooled by hand
    hours = group_timeline(fleet, by="host", max_points=2)
    assert hours.select("key", "ts").rows() == [("h0", T0), ("h1", T0 + dt.timedelta(hours=1))]
    assert hours["util_pct"][0] == pytest.approx((0 * 30 + 10 * 30 + 100 * 30) / 90)
    with pytest.raises(ValueError, match="unknown grouping"):
        group_timeline(fleet, by="rack")


def test_job_timeline_mean_over_gpus(fleet):
    from analytics.timeline import ALL_GPUS

    tl = job_timeline(fleet, "j1", lines="job")
    assert tl.select("gpu_id", "util_pct").rows() == [(ALL_GPUS, pytest.approx(26.5))]


def test_hour_rollup_holds_the_raw_samples_sums_per_gpu_hour_and_job(fleet):
    """samples_hour (what the heatmaps read) against plain SQL over the raw samples, after a second ingest
    that adds samples to an hour the first one rolled up already (the hour is re-aggregated, not appended)."""
    fleet.execute("BEGIN TRANSACTION")
    fleet.execute(
        """CREATE TEMP TABLE stage_samples AS SELECT * FROM (VALUES
             (TIMESTAMP '2026-11-16 00:30:00', 'g0', 60.0::FLOAT, 40.0::FLOAT),
             (TIMESTAMP '2026-11-16 01:59:00', 'g1', 60.0, 90.0),
             (TIMESTAMP '2026-11-16 03:00:00', 'g1', 60.0, 20.0)) t(ts, gpu_id, interval_s, util_pct)"""
    )
    land(fleet, next_ingest_id(fleet), IngestOptions())
    drop_stage(fleet)
    fleet.execute("COMMIT")
    got = fleet.execute(
        "SELECT hour, gpu_id, job_id, n, covered_s, util_s, util_cov_s FROM samples_hour ORDER BY ALL"
    ).fetchall()
    want = fleet.execute(
        """SELECT date_trunc('hour', ts), gpu_id, job_id, count(*), sum(interval_s),
                  sum(util_pct / 100.0 * interval_s) FILTER (WHERE util_pct IS NOT NULL),
                  sum(interval_s) FILTER (WHERE util_pct IS NOT NULL)
           FROM samples GROUP BY ALL ORDER BY ALL"""
    ).fetchall()
    assert [r[:5] for r in got] == [r[:5] for r in want]
    assert [r[5:] for r in got] == [pytest.approx(r[5:]) for r in want]
    # by hand: g0's hour 00 now holds five samples, 4 × 30 s + 60 s, util (0 + 10 + 100) × 30 + 40 × 60
    g0 = next(r for r in got if r[1] == "g0")
    assert (g0[3], g0[4]) == (5, 180.0)
    assert g0[5] == pytest.approx((0 + 10 + 100) * 30 / 100 + 40 * 60 / 100)


def test_heatmap_cells_carry_the_sums_that_decide_idle_while_held_and_unallocated(fleet, ledger) -> None:
    """By hand from the fixture: g0's hour 00 has 120 s of telemetry, none held (job_id NULL): held_idle_s 0,
    unallocated_s 120 (≥ half of 120), so the cell is unallocated. g1's hour 01: 60 s held by j1, the 3 %
    sample idle (at or under the default 5 %): held_idle_s 30, unallocated_s 0; 30 s is half of 60, so the
    cell is idle while held. Grouped by cluster the same sums come per group."""
    import polars as pl

    from analytics.timeline import cell_state

    cells = gpu_hour_heatmap(ledger).with_columns(cell_state().alias("state"))
    got = {
        r["gpu_id"]: (r["held_idle_s"], r["unallocated_s"], r["state"]) for r in cells.iter_rows(named=True)
    }
    assert got == {"g0": (0.0, 120.0, "unallocated"), "g1": (30.0, 0.0, "idle_held")}
    groups = group_hour_heatmap(ledger, by="cluster").with_columns(cell_state().alias("state"))
    assert groups.select("key", "held_idle_s", "unallocated_s", "state").rows() == [
        ("a", 0.0, 120.0, "unallocated"),
        ("b", 30.0, 0.0, "idle_held"),
    ]
    # the rule at its edges: exactly half unheld is unallocated; exactly half idle while held is idle_held
    edge = pl.DataFrame(
        {
            "covered_s": [60.0, 60.0, 60.0, 0.0],
            "held_idle_s": [0.0, 30.0, 29.0, 0.0],
            "unallocated_s": [30.0, 0.0, 0.0, 0.0],
        }
    )
    assert edge.select(cell_state())["literal"].to_list() == ["unallocated", "idle_held", "busy", "busy"]


def test_idle_gpus_split_idle_hours_into_held_and_unallocated(fleet, ledger) -> None:
    """g0: one idle sample (0 %, 30 s), no job: idle 30 s = unallocated idle; g1: one idle sample (3 %,
    30 s) held by j1: allocated idle. idle_h = allocated_idle_h + unallocated_idle_h for each."""
    rows = {r["gpu_id"]: r for r in idle_gpus(ledger).iter_rows(named=True)}
    assert rows["g0"]["unallocated_idle_h"] == pytest.approx(30 / 3600)
    assert rows["g0"]["allocated_idle_h"] == 0
    assert rows["g1"]["allocated_idle_h"] == pytest.approx(30 / 3600)
    assert rows["g1"]["unallocated_idle_h"] == 0
    for r in rows.values():
        assert r["idle_h"] == pytest.approx(r["allocated_idle_h"] + r["unallocated_idle_h"])
    assert rows["g0"]["gpu_label"] == "g0"  # no index in the ledger: the id itself


@pytest.fixture
def priced_idle(ledger):
    """Three GPUs idle at 0 %, one sample a minute standing for 60 s, no job:
    gA: A100-80GB on borealis, 60 samples on 16 Nov (1 h) and 30 on 17 Nov (0.5 h);
    gB: A100-80GB on lab, 60 samples on 16 Nov (1 h); gC: no model, 60 samples on 16 Nov.
    borealis has its own A100-80GB on_demand rows: $1.10 from 2025-01-01, $1.50 from 17 Nov."""
    minutes = [(T0 + dt.timedelta(hours=10, minutes=i), "gA") for i in range(60)]
    minutes += [(T0 + dt.timedelta(days=1, hours=10, minutes=i), "gA") for i in range(30)]
    minutes += [(T0 + dt.timedelta(hours=10, minutes=i), g) for g in ("gB", "gC") for i in range(60)]
    ledger.execute("BEGIN TRANSACTION")
    ledger.execute(
        "CREATE TEMP TABLE stage_samples (ts TIMESTAMP, gpu_id VARCHAR, interval_s FLOAT, util_pct FLOAT)"
    )
    ledger.executemany("INSERT INTO stage_samples VALUES (?, ?, 60.0, 0.0)", minutes)
    ledger.execute(
        """CREATE TEMP TABLE stage_gpus AS SELECT * FROM (VALUES
             ('gA', 'n1', 'A100-80GB', 'borealis'), ('gB', 'n2', 'A100-80GB', 'lab'),
             ('gC', 'n3', NULL, 'lab')) t(gpu_id, host, model, cluster)"""
    )
    land(ledger, next_ingest_id(ledger), IngestOptions())
    drop_stage(ledger)
    ledger.execute("COMMIT")
    ledger.execute(
        """INSERT INTO prices VALUES
             ('A100-80GB', 'on_demand', 'borealis', DATE '2025-01-01', 1.10, 'ours', DATE '2025-01-01', 'settings', NULL),
             ('A100-80GB', 'on_demand', 'borealis', DATE '2026-11-17', 1.50, 'ours', DATE '2026-11-17', 'settings', NULL)"""
    )
    return ledger


def test_idle_gpus_price_each_days_idle_hours_at_the_clusters_price_in_force(priced_idle) -> None:
    """idle_usd (the Fleet page's "idle ($)"): each day's idle hours × the price in force that day for the
    model on the GPU's cluster (its own rows before the generic sheet's $1.79) at the cluster's tier. Before,
    the page multiplied all idle hours by the latest price (gA: 1.5 h × $1.50 = $2.25)."""
    from gpuledger.ledger.settings import ClusterSettings, Settings

    settings = Settings(clusters={"lab": ClusterSettings(tier="spot")})
    rows = {r["gpu_id"]: r for r in idle_gpus(priced_idle, settings=settings).iter_rows(named=True)}
    assert rows["gA"]["idle_h"] == pytest.approx(1.5)
    # gA: 1 h on 16 Nov at borealis's $1.10 + 0.5 h on 17 Nov at its $1.50
    assert rows["gA"]["idle_usd"] == pytest.approx(1 * 1.10 + 0.5 * 1.50)
    # gB: lab has no rows of its own, its tier is spot: 1 h at the sheet's generic A100-80GB spot $1.07
    assert rows["gB"]["idle_usd"] == pytest.approx(1 * 1.07)
    # gC: no model, no price
    assert rows["gC"]["idle_h"] == pytest.approx(1.0)
    assert rows["gC"]["idle_usd"] is None
    # default settings: lab at on_demand, the sheet's $1.79
    default = {r["gpu_id"]: r["idle_usd"] for r in idle_gpus(priced_idle).iter_rows(named=True)}
    assert default["gB"] == pytest.approx(1 * 1.79)
    # a view of 17 Nov alone holds gA's half hour, at that day's $1.50
    day2 = idle_gpus(priced_idle, filters=Filters(since=dt.date(2026, 11, 17), until=dt.date(2026, 11, 17)))
    assert day2.select("gpu_id", "idle_usd").rows() == [("gA", pytest.approx(0.5 * 1.50))]
    # and a cluster view prices its GPUs the same way
    borealis = idle_gpus(priced_idle, filters=Filters(clusters=("borealis",)))
    assert borealis.select("gpu_id", "idle_usd").rows() == [("gA", pytest.approx(1.85))]
