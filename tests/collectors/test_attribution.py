"""Host-level attribution (collectors/attribute.py) without Slurm: hand-written sacct files and nvidia-smi CSVs.

The shapes are the live test's (tests/live/test_slurm_attribution.py): a job holding a whole node, two jobs
sharing one node, a job spanning two nodes. Expected figures are plain SQL over the samples or hand-worked.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import duckdb
import pytest

from analytics.jobs import jobs_table
from analytics.summary import summary
from collectors.attribute import HostAlloc, deal
from collectors.base import IngestOptions
from collectors.ingest import ingest_file
from tests.conftest import write

T = dt.datetime
T0 = T(2026, 3, 1)
HEADER = "JobIDRaw|Cluster|JobName|User|Account|State|Start|End|Elapsed|AllocTRES|NodeList"
H100 = "NVIDIA H100 80GB HBM3"


def util(host: str, idx: int, minute: int) -> int:
    """A different, known reading per host, GPU and minute (0-99 %)."""
    return (7 * idx + 13 * minute + 29 * int(host[-1])) % 100


def smi_csv(tmp_path: Path, host: str, *, gpus: int = 4, minutes: int = 60, name: str = H100) -> Path:
    """nvidia-smi --query-gpu=timestamp,index,name,utilization.gpu,memory.used --format=csv -l 60 (UTC)."""
    lines = ["timestamp, index, name, utilization.gpu [%], memory.used [MiB]"]
    for m in range(minutes):
        ts = (T0 + dt.timedelta(minutes=m)).strftime("%Y/%m/%d %H:%M:%S.000")
        lines += [f"{ts}, {i}, {name}, {util(host, i, m)} %, 1000 MiB" for i in range(gpus)]
    return write(tmp_path, f"{host}.csv", "\n".join(lines) + "\n")


def at(minute: int) -> str:
    return (T0 + dt.timedelta(minutes=minute)).strftime("%Y-%m-%dT%H:%M:%S")


def sacct_row(job: int, gpus: int, nodes: str, start: int, end: int, *, typ: str = "h100") -> str:
    return (
        f"{job}|ci|j{job}|alice|nlp|COMPLETED|{at(start)}|{at(end)}|00:{end - start:02d}:00"
        f"|cpu=4,gres/gpu:{typ}={gpus},gres/gpu={gpus}|{nodes}"
    )


SHAPES = [
    sacct_row(101, 4, "n1", 0, 30),  # the whole of n1
    sacct_row(102, 2, "n2", 5, 45),  # n2 shared by two jobs over the same span
    sacct_row(103, 2, "n2", 5, 45),
    sacct_row(104, 8, "n[3-4]", 0, 60),  # two whole nodes
]
UTC = IngestOptions(tz="UTC")


def ingest_shapes(con: duckdb.DuckDBPyConnection, tmp_path: Path, *, jobs_first: bool) -> None:
    sacct = write(tmp_path, "sacct.txt", "\n".join([HEADER, *SHAPES]) + "\n")
    telemetry = [smi_csv(tmp_path, h) for h in ("n1", "n2", "n3", "n4")]
    if jobs_first:
        ingest_file(con, sacct, opts=UTC)
    for path in telemetry:
        ingest_file(con, path, opts=IngestOptions(tz="UTC", host=path.stem))
    if not jobs_first:
        ingest_file(con, sacct, opts=UTC)


def plain_mean(con: duckdb.DuckDBPyConnection, hosts: list[str], lo: int, hi: int) -> float:
    """Plain SQL: mean utilization of these hosts' samples in [T0+lo, T0+hi) minutes (all 60-s samples)."""
    return con.execute(
        """SELECT avg(s.util_pct) FROM samples s JOIN gpus g USING (gpu_id)
           WHERE g.host IN (SELECT unnest(?::VARCHAR[])) AND s.ts >= ? AND s.ts < ?""",
        [hosts, T0 + dt.timedelta(minutes=lo), T0 + dt.timedelta(minutes=hi)],
    ).fetchall()[0][0]


@pytest.mark.parametrize("jobs_first", [True, False], ids=["jobs-then-telemetry", "telemetry-then-jobs"])
def test_whole_node_shared_node_and_two_node_jobs(ledger, tmp_path, jobs_first):
    ingest_shapes(ledger, tmp_path, jobs_first=jobs_first)
    table = {r["job_id"]: r for r in jobs_table(ledger).to_dicts()}
    assert {j: r["attribution"] for j, r in table.items()} == {
        "ci/101": "exact",
        "ci/102": "by_share",
        "ci/103": "by_share",
        "ci/104": "exact",
    }
    # whole-node jobs: the plain mean of their nodes' samples in their spans
    assert table["ci/101"]["mean_util_pct"] == pytest.approx(plain_mean(ledger, ["n1"], 0, 30))
    assert table["ci/104"]["mean_util_pct"] == pytest.approx(plain_mean(ledger, ["n3", "n4"], 0, 60))
    # the shared node's two jobs add up to the node: 2 + 2 GPUs × 40 min = 160 GPU-minutes at the node's mean
    shared = [table["ci/102"], table["ci/103"]]
    assert sum(r["gpu_hours"] for r in shared) == pytest.approx(4 * 40 / 60)
    assert sum(r["mean_util_pct"] * r["gpu_hours"] for r in shared) == pytest.approx(
        plain_mean(ledger, ["n2"], 5, 45) * 4 * 40 / 60
    )
    # every held GPU-second has a reading: nothing unmeasured (each job is priced: H100 on demand)
    for r in table.values():
        assert r["cost_usd"] > 0 and r["unmeasured_usd"] == pytest.approx(0, abs=1e-9), r["job_id"]
    # and no sample is tied outside a job's span, nor to a job on another host
    stray = ledger.execute(
        """SELECT count(*) FROM samples s JOIN gpus g USING (gpu_id) JOIN jobs j USING (job_id)
           JOIN allocations a ON a.job_id = j.job_id AND a.host = g.host
           WHERE s.ts < a.start_ts OR s.ts >= a.end_ts"""
    ).fetchall()[0][0]
    untied_in_span = ledger.execute(
        """SELECT count(*) FROM samples s JOIN gpus g USING (gpu_id)
           WHERE s.job_id IS NULL AND (g.host IN ('n3', 'n4') OR (g.host = 'n1' AND s.ts < ?)
                 OR (g.host = 'n2' AND s.ts >= ? AND s.ts < ?))""",
        [T0 + dt.timedelta(minutes=30), T0 + dt.timedelta(minutes=5), T0 + dt.timedelta(minutes=45)],
    ).fetchall()[0][0]
    assert (stray, untied_in_span) == (0, 0)
    # n1 after job 101 ended (30 min × 4 GPUs) and n2 outside 102/103 (20 min × 4 GPUs) belong to no job
    assert (
        ledger.execute("SELECT count(*) FROM samples WHERE job_id IS NULL").fetchall()[0][0]
        == 30 * 4 + 20 * 4
    )
    # summary's data-quality block: 101 (4 GPUs × 0.5 h) and 104 (8 × 1 h) exact; 102 and 103 (2 × 2/3 h each)
    quality = summary(ledger)["attribution"]
    assert {k: v for k, v in quality.items() if k != "note"} == {
        "exact_jobs": 2,
        "exact_gpu_hours": pytest.approx(4 * 0.5 + 8 * 1),
        "by_share_jobs": 2,
        "by_share_gpu_hours": pytest.approx(2 * 2 * 40 / 60),
        "none_jobs": 0,
        "none_gpu_hours": 0.0,
    }
    assert quality["note"].startswith("2 job(s) (2.7 GPU-h) shared a host with no record of which GPUs")


def test_ties_are_recorded_per_gpu_with_their_evidence(ledger, tmp_path):
    ingest_shapes(ledger, tmp_path, jobs_first=True)
    got = ledger.execute(
        """SELECT h.job_id, g.host, list(g.gpu_index ORDER BY g.gpu_index), any_value(h.method),
                  any_value(h.evidence)
           FROM host_attribution h JOIN gpus g USING (gpu_id) GROUP BY ALL ORDER BY 1, 2"""
    ).fetchall()
    assert got == [
        ("ci/101", "n1", [0, 1, 2, 3], "exact", "whole_host"),
        ("ci/102", "n2", [0, 1], "by_share", "dealt"),  # dealt lowest index first, jobs by (start, id)
        ("ci/103", "n2", [2, 3], "by_share", "dealt"),
        ("ci/104", "n3", [0, 1, 2, 3], "exact", "whole_host"),
        ("ci/104", "n4", [0, 1, 2, 3], "exact", "whole_host"),
    ]


def sacct_json(tmp_path: Path, jobs: list[dict]) -> Path:
    return write(
        tmp_path,
        "sacct.json",
        json.dumps({"meta": {"plugin": {"name": "Slurm OpenAPI DB v0.0.39"}}, "jobs": jobs}),
    )


def json_job(job: int, gpus: int, nodes: str, start: int, end: int, gres_detail: list[str] | None) -> dict:
    out = {
        "job_id": job,
        "cluster": "ci",
        "name": f"j{job}",
        "user": "alice",
        "account": "nlp",
        "nodes": nodes,
        "state": {"current": ["COMPLETED"]},
        "time": {
            "start": int((T0 + dt.timedelta(minutes=start)).replace(tzinfo=dt.UTC).timestamp()),
            "end": int((T0 + dt.timedelta(minutes=end)).replace(tzinfo=dt.UTC).timestamp()),
            "elapsed": (end - start) * 60,
        },
        "tres": {"allocated": [{"type": "gres", "name": "gpu:h100", "count": gpus}]},
    }
    if gres_detail is not None:
        out["gres_detail"] = gres_detail
    return out


def test_gres_detail_indices_tie_a_shared_node_exactly(ledger, tmp_path):
    # job 202 got GPUs 1 and 3 (not the lowest: dealing would have guessed 0-1); 203 has no detail and
    # takes the remainder, 0 and 2, which is then exact too: every other GPU is known to be 202's
    path = sacct_json(
        tmp_path,
        [json_job(202, 2, "n2", 5, 45, ["gpu:h100:2(IDX:1,3)"]), json_job(203, 2, "n2", 5, 45, None)],
    )
    ingest_file(ledger, smi_csv(tmp_path, "n2"), opts=IngestOptions(tz="UTC", host="n2"))
    ingest_file(ledger, path, opts=UTC)
    assert ledger.execute(
        "SELECT job_id, gpu_index, gpu_count FROM allocations ORDER BY 1, 2 NULLS LAST"
    ).fetchall() == [("ci/202", 1, 1.0), ("ci/202", 3, 1.0), ("ci/203", None, 2.0)]
    got = ledger.execute(
        """SELECT h.job_id, list(g.gpu_index ORDER BY g.gpu_index), any_value(h.evidence)
           FROM host_attribution h JOIN gpus g USING (gpu_id) GROUP BY 1 ORDER BY 1"""
    ).fetchall()
    assert got == [("ci/202", [1, 3], "gres_idx"), ("ci/203", [0, 2], "remainder")]
    table = {r["job_id"]: r for r in jobs_table(ledger).to_dicts()}
    assert (table["ci/202"]["attribution"], table["ci/203"]["attribution"]) == ("exact", "exact")
    # 202's utilization is the plain mean of GPUs 1 and 3 over minutes 5..44
    m = [util("n2", i, k) for i in (1, 3) for k in range(5, 45)]
    assert table["ci/202"]["mean_util_pct"] == pytest.approx(sum(m) / len(m))


def test_generic_sacct_model_is_refined_by_the_telemetry(ledger, tmp_path):
    # gres/gpu:a100 alone reads as the catalog's A100-40GB; the cards report 80 GB: priced as A100-80GB
    sacct = write(tmp_path, "s.txt", "\n".join([HEADER, sacct_row(301, 4, "n5", 0, 30, typ="a100")]) + "\n")
    ingest_file(ledger, sacct, opts=UTC)
    assert ledger.execute("SELECT gpu_model FROM jobs").fetchall() == [("A100-40GB",)]
    csv = smi_csv(tmp_path, "n5", name="NVIDIA A100-SXM4-80GB")
    ingest_file(ledger, csv, opts=IngestOptions(tz="UTC", host="n5"))
    assert ledger.execute("SELECT gpu_model, attribution FROM jobs").fetchall() == [("A100-80GB", "exact")]
    # a card of another family does not overrule the scheduler (a V100 in telemetry, a100 in sacct)
    sacct2 = write(tmp_path, "s2.txt", "\n".join([HEADER, sacct_row(302, 4, "n6", 0, 30, typ="a100")]) + "\n")
    ingest_file(ledger, sacct2, opts=UTC)
    ingest_file(
        ledger, smi_csv(tmp_path, "n6", name="Tesla V100-SXM2-32GB"), opts=IngestOptions(tz="UTC", host="n6")
    )
    assert ledger.execute("SELECT gpu_model FROM jobs WHERE job_id = 'ci/302'").fetchall() == [("A100-40GB",)]


def test_a_host_without_telemetry_is_none_and_a_replaced_job_releases_its_samples(ledger, tmp_path):
    ingest_file(ledger, smi_csv(tmp_path, "n1"), opts=IngestOptions(tz="UTC", host="n1"))
    sacct = write(
        tmp_path,
        "s.txt",
        "\n".join([HEADER, sacct_row(101, 4, "n1", 0, 30), sacct_row(105, 4, "n9", 0, 30)]) + "\n",
    )
    ingest_file(ledger, sacct, opts=UTC)
    assert dict(ledger.execute("SELECT job_id, attribution FROM jobs").fetchall()) == {
        "ci/101": "exact",
        "ci/105": "none",
    }
    assert ledger.execute("SELECT count(*) FROM samples WHERE job_id = 'ci/101'").fetchall() == [(4 * 30,)]
    # a new version of the file without job 101: its samples belong to nobody again
    sacct.write_text("\n".join([HEADER, sacct_row(105, 4, "n9", 0, 30)]) + "\n", encoding="utf-8")
    ingest_file(ledger, sacct, opts=IngestOptions(tz="UTC", replace=True))
    assert ledger.execute("SELECT count(*) FROM samples WHERE job_id IS NOT NULL").fetchall() == [(0,)]
    assert ledger.execute("SELECT count(*) FROM host_attribution").fetchall() == [(0,)]
    # the rollup followed: no minute row still names the job
    assert ledger.execute("SELECT count(*) FROM samples_minute WHERE job_id = 'ci/101'").fetchall() == [(0,)]


G4 = [(f"h:{i}", i) for i in range(4)]


def A(job: str, start: int, end: int | None, gpus: float, indices: tuple[int, ...] = ()) -> HostAlloc:
    return HostAlloc(
        job,
        T0 + dt.timedelta(hours=start),
        None if end is None else T0 + dt.timedelta(hours=end),
        gpus,
        indices,
    )


def owners(ties) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for t in ties:
        out.setdefault(t.job_id, []).append(t.gpu_id)
    return {k: sorted(v) for k, v in sorted(out.items())}


def test_deal_staggered_jobs_reuse_freed_gpus():
    # a: 0-2 h on 2 GPUs, b: 1-3 h on 2 GPUs, c: 2-4 h on 2 GPUs: c gets a's cards once a has ended
    ties = deal(G4, [A("a", 0, 2, 2), A("b", 1, 3, 2), A("c", 2, 4, 2)])
    assert owners(ties) == {"a": ["h:0", "h:1"], "b": ["h:2", "h:3"], "c": ["h:0", "h:1"]}
    assert {t.method for t in ties} == {"by_share"}


def test_deal_never_deals_one_gpu_second_twice_and_shares_what_is_oversubscribed():
    # 3 + 3 GPUs held on a 4-GPU host at once (time-slicing, or an inconsistent record): the second job is
    # dealt the 1 card left, and shares 2 of the first job's cards for the rest (issue 35: before, those 2
    # GPU-h stayed unmeasured beside the host's 4 billed ones, 6 card-hours billed for 4)
    ties = deal(G4, [A("a", 0, 2, 3), A("b", 0, 2, 3)])
    assert owners(ties) == {"a": ["h:0", "h:1", "h:2"], "b": ["h:0", "h:1", "h:3"]}
    assert sorted(
        (t.job_id, t.gpu_id, t.evidence) for t in ties if t.evidence not in ("dealt", "remainder")
    ) == [
        ("b", "h:0", "shared"),
        ("b", "h:1", "shared"),
    ]
    # a job holding more GPUs than the host reports shares nothing: the other cards may lack telemetry
    ties = deal(G4, [A("a", 0, 2, 4), A("b", 0, 2, 5)])
    assert owners(ties) == {"a": ["h:0", "h:1", "h:2", "h:3"]}
    # a GPU an allocation names by id is not dealt again
    ties = deal(G4, [A("a", 0, 2, 4)], held=[("h:0", T0, None)])
    assert owners(ties) == {"a": ["h:0", "h:1", "h:2", "h:3"]}
    assert [t.gpu_id for t in ties if t.evidence == "shared"] == ["h:0"]  # shared with the job naming it


def test_deal_evidence_first_then_remainder_then_share():
    seen = {("b", T0): {"h:3": "process"}}
    ties = deal(G4, [A("a", 0, 2, 1, (2,)), A("b", 0, 2, 1), A("c", 0, 2, 2)], seen=seen)
    assert owners(ties) == {"a": ["h:2"], "b": ["h:3"], "c": ["h:0", "h:1"]}
    assert {t.job_id: (t.method, t.evidence) for t in ties} == {
        "a": ("exact", "gres_idx"),
        "b": ("exact", "process"),
        "c": ("exact", "remainder"),
    }
    # one GPU left for a job that needs it while the others are by_share: still only a share
    ties = deal(G4, [A("a", 0, 2, 3), A("b", 0, 2, 1)])
    assert {t.job_id: t.method for t in ties} == {"a": "by_share", "b": "by_share"}
    # a running job (no end) holds its cards until further notice: a later job shares one of them
    ties = deal(G4, [A("a", 0, None, 4), A("b", 5, 6, 1)])
    assert owners(ties) == {"a": ["h:0", "h:1", "h:2", "h:3"], "b": ["h:0"]}
    assert [t.evidence for t in ties if t.job_id == "b"] == ["shared"]


def dcgm_file(tmp_path: Path, host: str, labels: dict[int, str]) -> Path:
    """dcgm-exporter scrapes of a 4-GPU host every 60 s over minutes 0..59; GPU i carries hpc_job labels[i]."""
    lines = []
    for m in range(60):
        ms = int((T0 + dt.timedelta(minutes=m)).replace(tzinfo=dt.UTC).timestamp() * 1000)
        for i in range(4):
            job = f',hpc_job="{labels[i]}"' if i in labels and 5 <= m < 45 else ""
            lines.append(
                f'DCGM_FI_DEV_GPU_UTIL{{gpu="{i}",modelName="{H100}",Hostname="{host}"{job}}} {util(host, i, m)} {ms}'
            )
    return write(tmp_path, f"{host}.prom", "\n".join(lines) + "\n")


def test_dcgm_hpc_job_labels_are_evidence_for_a_shared_host(ledger, tmp_path):
    # dcgm labels GPUs 1 and 3 with job 202 while it runs; 203 (no labels) takes the remainder, 0 and 2
    ingest_file(ledger, dcgm_file(tmp_path, "n2", {1: "202", 3: "202"}), opts=IngestOptions(cluster="ci"))
    sacct = write(
        tmp_path,
        "s.txt",
        "\n".join([HEADER, sacct_row(202, 2, "n2", 5, 45), sacct_row(203, 2, "n2", 5, 45)]) + "\n",
    )
    ingest_file(ledger, sacct, opts=UTC)
    got = ledger.execute(
        """SELECT h.job_id, list(g.gpu_index ORDER BY g.gpu_index), any_value(h.evidence)
           FROM host_attribution h JOIN gpus g USING (gpu_id) GROUP BY 1 ORDER BY 1"""
    ).fetchall()
    assert got == [("ci/202", [1, 3], "sample_label"), ("ci/203", [0, 2], "remainder")]
    assert dict(ledger.execute("SELECT job_id, attribution FROM jobs").fetchall()) == {
        "ci/202": "exact",
        "ci/203": "exact",
    }
    # 203's samples: GPUs 0 and 2 over minutes 5..44, 2 × 40 of them
    assert ledger.execute("SELECT count(*) FROM samples WHERE job_id = 'ci/203'").fetchall() == [(80,)]


def test_nvml_process_job_ids_are_evidence_for_a_shared_host(ledger, tmp_path):
    from collectors.base import land, next_ingest_id, run_in_transaction

    ingest_file(ledger, smi_csv(tmp_path, "n2"), opts=IngestOptions(tz="UTC", host="n2"))
    # an NVML sampler saw job 202's process on GPU 2 (SLURM_JOB_ID in its environment) at minute 10
    gpu2 = ledger.execute("SELECT gpu_id FROM gpus WHERE host = 'n2' AND gpu_index = 2").fetchall()[0][0]

    def work():
        ledger.execute(
            "CREATE TEMP TABLE stage_processes AS SELECT ?::TIMESTAMP AS ts, ? AS gpu_id, 4242 AS pid, "
            "'python' AS process_name, 20000.0 AS used_mem_mib, 'ci/202' AS job_id",
            [T0 + dt.timedelta(minutes=10), gpu2],
        )
        land(ledger, next_ingest_id(ledger), IngestOptions())

    run_in_transaction(ledger, work)
    sacct = write(
        tmp_path,
        "s.txt",
        "\n".join([HEADER, sacct_row(202, 1, "n2", 5, 45), sacct_row(203, 1, "n2", 5, 45)]) + "\n",
    )
    ingest_file(ledger, sacct, opts=UTC)
    got = ledger.execute(
        """SELECT h.job_id, g.gpu_index, h.method, h.evidence FROM host_attribution h JOIN gpus g USING (gpu_id)
           ORDER BY 1"""
    ).fetchall()
    # 202 on GPU 2 (its process); 203 dealt the lowest free card, 0 — a guess: 1 and 3 were free too
    assert got == [("ci/202", 2, "exact", "process"), ("ci/203", 0, "by_share", "dealt")]


SCONTROL_LINE = (
    "JobId={job} JobName=wrap UserId=root(0) Account=research JobState=RUNNING Reason=None NodeList=n2 "
    "NumNodes=1 TRES=cpu=1,mem=100M,node=1,billing=1,gres/gpu=2 JOB_GRES=gpu:h100:2   Nodes=n2 CPU_IDs={cpu} "
    "Mem=100 GRES=gpu:h100:2(IDX:{idx}) MinCPUsNode=1 TresPerNode=gres:gpu:2"
)  # the shape Slurm 22.05's `scontrol show job -d -o` printed in tests/live


def test_scontrol_detail_gives_gpu_indices_per_node():
    from collectors.slurm_poll import parse_scontrol_detail

    two_nodes = "JobId=9 JobState=RUNNING NodeList=g[1-2] JOB_GRES=gpu:h100:2   Nodes=g[1-2] CPU_IDs=0 Mem=100 GRES=gpu:h100:1(IDX:0) x=y"
    finished = (
        "JobId=10 JobState=COMPLETED JOB_GRES=gpu:h100:2   Nodes=g1 CPU_IDs=0 Mem=100 GRES=gpu:h100:2 x=y"
    )
    text = "\n".join([SCONTROL_LINE.format(job=7, cpu=0, idx="0-1"), two_nodes, finished])
    assert parse_scontrol_detail(text) == {"7": {"n2": [0, 1]}, "9": {"g1": [0], "g2": [0]}}


def fake_tool(tmp_path: Path, name: str) -> Path:
    tool = tmp_path / name
    tool.write_text(f'#!/bin/sh\ncat "{tmp_path}/{name}.out"\n', encoding="utf-8")
    tool.chmod(0o755)
    return tool


def test_poller_stores_running_jobs_gpu_indices_and_keeps_them_after_the_end(db_path, tmp_path):
    """The collector asks scontrol which GPUs running jobs hold (sacct never says), and a job's final record
    keeps them: the two jobs sharing n2 are tied to their own cards exactly, not dealt by share."""
    from collectors.slurm_poll import FIELDS, poll
    from gpuledger.ledger.db import reader, writer

    sacct, scontrol = fake_tool(tmp_path, "sacct"), fake_tool(tmp_path, "scontrol")

    def sacct_says(state: str, end: str, elapsed: str) -> None:
        rows = [
            "|".join([str(j), str(j), f"j{j}", "alice", "nlp", "gpu", state, at(0), at(5), end, elapsed,
                      "cpu=1,gres/gpu:h100=2,gres/gpu=2", "", "n2", "1", "0:0", "ci", "", ""])
            for j in (501, 502)
        ]  # fmt: skip
        (tmp_path / "sacct.out").write_text("\n".join(["|".join(FIELDS), *rows]) + "\n", encoding="utf-8")

    sacct_says("RUNNING", "Unknown", "00:20:00")
    (tmp_path / "scontrol.out").write_text(
        SCONTROL_LINE.format(job=501, cpu=0, idx="1,3")
        + "\n"
        + SCONTROL_LINE.format(job=502, cpu=1, idx="0,2")
        + "\n",
        encoding="utf-8",
    )
    poll(db_path, sacct=str(sacct), scontrol=str(scontrol), overlap=dt.timedelta(0))
    # the jobs end; slurmctld no longer shows their indices, sacct's final record has none
    sacct_says("COMPLETED", at(45), "00:40:00")
    (tmp_path / "scontrol.out").write_text("", encoding="utf-8")
    report = poll(db_path, sacct=str(sacct), scontrol=str(scontrol), overlap=dt.timedelta(0))
    assert report.rows["jobs"] == 2 and report.skipped == {}
    with writer(db_path) as con:
        ingest_file(con, smi_csv(tmp_path, "n2"), opts=IngestOptions(tz="UTC", host="n2"))
    with reader(db_path) as con:
        assert con.execute(
            "SELECT job_id, gpu_index, gpu_count, end_ts FROM allocations ORDER BY 1, 2"
        ).fetchall() == [
            ("ci/501", 1, 1.0, T0 + dt.timedelta(minutes=45)),
            ("ci/501", 3, 1.0, T0 + dt.timedelta(minutes=45)),
            ("ci/502", 0, 1.0, T0 + dt.timedelta(minutes=45)),
            ("ci/502", 2, 1.0, T0 + dt.timedelta(minutes=45)),
        ]
        got = con.execute(
            """SELECT h.job_id, list(g.gpu_index ORDER BY g.gpu_index), any_value(h.method), any_value(h.evidence)
               FROM host_attribution h JOIN gpus g USING (gpu_id) GROUP BY 1 ORDER BY 1"""
        ).fetchall()
        assert got == [("ci/501", [1, 3], "exact", "gres_idx"), ("ci/502", [0, 2], "exact", "gres_idx")]
        # 501's mean is the plain mean of GPUs 1 and 3 over minutes 5..44
        m = [util("n2", i, k) for i in (1, 3) for k in range(5, 45)]
        table = {r["job_id"]: r for r in jobs_table(con).to_dicts()}
        assert table["ci/501"]["mean_util_pct"] == pytest.approx(sum(m) / len(m))


def test_poller_without_scontrol_says_so(db_path, tmp_path):
    from collectors.slurm_poll import FIELDS, poll

    sacct = fake_tool(tmp_path, "sacct")
    row = "|".join(["601", "601", "j", "u", "a", "gpu", "RUNNING", at(0), at(5), "Unknown", "00:10:00",
                    "gres/gpu=2", "", "n2", "1", "0:0", "ci", "", ""])  # fmt: skip
    (tmp_path / "sacct.out").write_text("|".join(FIELDS) + "\n" + row + "\n", encoding="utf-8")
    report = poll(db_path, sacct=str(sacct), scontrol=str(tmp_path / "no-scontrol"), overlap=dt.timedelta(0))
    assert report.skipped == {"running jobs whose GPU indices scontrol did not give": 1}


def test_a_gpu_the_job_names_by_id_beside_its_host_row_is_not_counted_twice(ledger, tmp_path):
    """The NVML sampler adds gpu_id rows for a job beside sacct's host row: those GPUs are the job's own,
    so the job is not dealt more cards for them and its GPU-time is not doubled."""
    from collectors.base import land, next_ingest_id, run_in_transaction

    ingest_file(ledger, smi_csv(tmp_path, "n2"), opts=IngestOptions(tz="UTC", host="n2"))
    sacct = write(
        tmp_path,
        "s.txt",
        "\n".join([HEADER, sacct_row(202, 2, "n2", 5, 45), sacct_row(203, 2, "n2", 5, 45)]) + "\n",
    )
    ingest_file(ledger, sacct, opts=UTC)
    gpu = dict(ledger.execute("SELECT gpu_index, gpu_id FROM gpus WHERE host = 'n2'").fetchall())

    def work():  # what the NVML sampler lands: 202's processes on GPUs 2 and 3, as allocation rows
        ledger.execute(
            """CREATE TEMP TABLE stage_allocations AS
               SELECT 'ci/202' AS job_id, 'n2' AS host, unnest([?, ?]) AS gpu_id, 1.0 AS gpu_count,
                      ?::TIMESTAMP AS start_ts, ?::TIMESTAMP AS end_ts
               UNION ALL SELECT 'ci/202', 'n2', NULL, 2.0, ?::TIMESTAMP, ?::TIMESTAMP""",
            [gpu[2], gpu[3], *[T0 + dt.timedelta(minutes=m) for m in (5, 45)] * 2],
        )
        land(ledger, next_ingest_id(ledger), IngestOptions())

    run_in_transaction(ledger, work)
    got = ledger.execute(
        """SELECT h.job_id, list(g.gpu_index ORDER BY g.gpu_index), list(DISTINCT h.evidence)
           FROM host_attribution h JOIN gpus g USING (gpu_id) GROUP BY 1 ORDER BY 1"""
    ).fetchall()
    assert got == [("ci/202", [2, 3], ["gpu_id"]), ("ci/203", [0, 1], ["remainder"])]
    # 2 GPUs × 40 min each: 80 samples per job, none twice
    assert dict(ledger.execute("SELECT job_id, count(*) FROM samples GROUP BY 1").fetchall()) == {
        "ci/202": 80,
        "ci/203": 80,
        None: 4 * 60 - 160,
    }


def test_two_jobs_evidenced_on_one_card_are_both_tied_and_its_samples_go_to_one(ledger, tmp_path):
    """Time-slicing: NVML saw processes of jobs 202 and 203 on GPU 2 at once. Both are tied to it (rows of
    host_attribution overlap: the shared-GPU rule splits the card), its samples go to one job, the smallest
    id, the same on every run — never to both, never dropped."""
    from collectors.base import land, next_ingest_id, run_in_transaction

    ingest_file(ledger, smi_csv(tmp_path, "n2"), opts=IngestOptions(tz="UTC", host="n2"))
    gpu2 = ledger.execute("SELECT gpu_id FROM gpus WHERE host = 'n2' AND gpu_index = 2").fetchall()[0][0]

    def work():
        ledger.execute(
            """CREATE TEMP TABLE stage_processes AS
               SELECT ?::TIMESTAMP AS ts, ? AS gpu_id, unnest([11, 12]) AS pid, 'python' AS process_name,
                      1000.0 AS used_mem_mib, unnest(['ci/203', 'ci/202']) AS job_id""",
            [T0 + dt.timedelta(minutes=10), gpu2],
        )
        land(ledger, next_ingest_id(ledger), IngestOptions())

    run_in_transaction(ledger, work)
    sacct = write(
        tmp_path,
        "s.txt",
        "\n".join([HEADER, sacct_row(202, 1, "n2", 5, 45), sacct_row(203, 1, "n2", 5, 45)]) + "\n",
    )
    ingest_file(ledger, sacct, opts=UTC)
    got = ledger.execute(
        """SELECT h.job_id, g.gpu_index, h.evidence FROM host_attribution h JOIN gpus g USING (gpu_id)
           ORDER BY 1"""
    ).fetchall()
    assert got == [("ci/202", 2, "process"), ("ci/203", 2, "process")]
    # GPU 2's 40 samples in the span: all 202's (the smaller id); no other card is tied
    assert dict(
        ledger.execute("SELECT job_id, count(*) FROM samples WHERE job_id IS NOT NULL GROUP BY 1").fetchall()
    ) == {"ci/202": 40}
