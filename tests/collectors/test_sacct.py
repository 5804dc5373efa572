"""Slurm sacct (-P, -p, --noheader with --columns, --json): jobs, step folding, TRES, host allocations, errors."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from collectors.base import IngestOptions
from collectors.ingest import ingest_file
from collectors.registry import PARSERS
from collectors.sacct import expand_nodelist
from gpuledger.ledger.errors import FormatError
from tests.conftest import ROOT, dataset, gpuledger, write

UTC = IngestOptions(tz="UTC")
T = dt.datetime

HEADER = "JobID|Cluster|JobName|User|Account|Partition|State|ExitCode|Submit|Start|End|Elapsed|AllocTRES|ReqTRES|NodeList|TRESUsageInMax"
ROWS = [
    "100|ci|train_llm|alice|nlp|gpu|COMPLETED|0:0|2025-03-01T09:00:00|2025-03-01T10:00:00|2025-03-01T12:00:00|02:00:00"
    "|billing=8,cpu=32,gres/gpu:h100=8,gres/gpu=8,mem=500G,node=2|cpu=32,gres/gpu=8,node=2|gpu[01-02]|",
    "100.batch|ci|batch|||gpu|COMPLETED|0:0|2025-03-01T10:00:00|2025-03-01T10:00:00|2025-03-01T12:00:00|02:00:00"
    "|cpu=16,gres/gpu=4,node=1||gpu01|cpu=01:00:00,gres/gpumem=38888M,gres/gpuutil=97,mem=1G",
    "100.0|ci|python|||gpu|COMPLETED|0:0|2025-03-01T10:00:05|2025-03-01T10:00:05|2025-03-01T12:00:00|01:59:55"
    "|cpu=32,gres/gpu=8,node=2||gpu[01-02]|cpu=02:00:00,gres/gpumem=40000M,gres/gpuutil=100,mem=2G",
    "101|ci|jupyter-lab|bob|cv|gpu|CANCELLED by 1234|0:15|2025-03-01T09:59:00|2025-03-01T10:00:00|2025-03-01T10:30:00|00:30:00"
    "|cpu=9,gres/gpu:a100_3g.20gb=1,gres/gpu=1,mem=60G,node=1|cpu=9,gres/gpu=1|gpu07|",
    "102|ci|sweep|carol|nlp|gpu|RUNNING|0:0|2025-03-01T11:00:00|2025-03-01T11:05:00|Unknown|00:55:00"
    "|gres/gpu=4,node=2|gres/gpu=4,node=2|gpu[03-04]|",
    "103|ci|waiting|dave|nlp|gpu|PENDING|0:0|2025-03-01T11:30:00|Unknown|Unknown|00:00:00"
    "||gres/gpu=2,node=1|None assigned|",
    "104|ci|bash|erin|cv|gpu|TIMEOUT|0:0|2025-02-27T00:00:00|2025-02-27T00:00:00||1-02:03:04"
    "|gres/gpu=1,node=1|gres/gpu=1|gpu05|",
]


def sacct_file(tmp_path: Path, rows: list[str] = ROWS, header: str = HEADER, name: str = "sacct.txt") -> Path:
    return write(tmp_path, name, "\n".join([header, *rows]) + "\n")


def jobs(ledger) -> dict[str, tuple]:
    rows = ledger.execute(
        """SELECT job_id, cluster, user_name, team, partition, name, kind, gpu_model, gpu_count, start_ts,
                  end_ts, state, exit_reason, gpu_mem_peak_mib, gpu_util_peak_pct, source FROM jobs"""
    ).fetchall()
    return {r[0]: r[1:] for r in rows}


def test_parsable2_jobs_fold_steps_and_read_tres(ledger, tmp_path):
    report = ingest_file(ledger, sacct_file(tmp_path), opts=UTC)
    assert report.format == "sacct"
    # 7 data rows: 5 jobs + 2 steps of job 100 folded into it
    assert report.rows["jobs"] == 5
    assert report.skipped == {"job steps folded into their job": 2}
    got = jobs(ledger)
    assert got["ci/100"] == (
        "ci", "alice", "nlp", "gpu", "train_llm", "other", "H100-SXM-80GB", 8.0,
        T(2025, 3, 1, 10), T(2025, 3, 1, 12), "COMPLETED", None,
        40000.0,  # max of the steps' gres/gpumem (38888M, 40000M), already MiB
        100.0,  # max gres/gpuutil of the steps (97, 100)
        "sacct",
    )  # fmt: skip
    job101 = got["ci/101"]
    assert job101[5:8] == ("interactive", "A100-40GB", pytest.approx(3 / 7))  # 3g.20gb MIG = 3 of 7 slices
    assert job101[10:12] == ("CANCELLED", "by 1234; ExitCode 0:15")
    assert got["ci/102"][8:11] == (T(2025, 3, 1, 11, 5), None, "RUNNING")  # End Unknown: still running
    assert got["ci/103"][7:9] == (2.0, None)  # pending: AllocTRES empty, ReqTRES gres/gpu=2; no start
    # TIMEOUT job without End: Start + Elapsed 1-02:03:04 = 1 d 2 h 3 min 4 s
    assert got["ci/104"][8:10] == (T(2025, 2, 27), T(2025, 2, 28, 2, 3, 4))
    assert got["ci/104"][5] == "interactive"  # JobName bash


def test_nodelist_ranges_become_one_allocation_per_host(ledger, tmp_path):
    ingest_file(ledger, sacct_file(tmp_path), opts=UTC)
    rows = ledger.execute(
        "SELECT job_id, host, gpu_id, gpu_count, start_ts, end_ts FROM allocations ORDER BY job_id, host"
    ).fetchall()
    assert rows == [
        ("ci/100", "gpu01", None, 4.0, T(2025, 3, 1, 10), T(2025, 3, 1, 12)),  # 8 GPUs / 2 hosts
        ("ci/100", "gpu02", None, 4.0, T(2025, 3, 1, 10), T(2025, 3, 1, 12)),
        ("ci/101", "gpu07", None, pytest.approx(3 / 7), T(2025, 3, 1, 10), T(2025, 3, 1, 10, 30)),
        # 4 GPUs / 2 hosts, running: held at least until Start + Elapsed = 11:05 + 55 min
        ("ci/102", "gpu03", None, 2.0, T(2025, 3, 1, 11, 5), T(2025, 3, 1, 12)),
        ("ci/102", "gpu04", None, 2.0, T(2025, 3, 1, 11, 5), T(2025, 3, 1, 12)),
        ("ci/104", "gpu05", None, 1.0, T(2025, 2, 27), T(2025, 2, 28, 2, 3, 4)),
    ]  # the pending job 103 has no host and no start: no allocation
    per_job = ledger.execute(
        "SELECT a.job_id, sum(a.gpu_count), any_value(j.gpu_count) FROM allocations a JOIN jobs j USING (job_id) GROUP BY 1"
    ).fetchall()
    assert all(total == pytest.approx(job) for _, total, job in per_job)


def test_local_times_are_read_in_tz_and_stored_utc(ledger, tmp_path):
    path = sacct_file(tmp_path, ROWS[:1])
    ingest_file(ledger, path, opts=IngestOptions(tz="America/New_York"))
    # 2025-03-01 10:00 EST (UTC-5) = 15:00 UTC
    assert ledger.execute("SELECT start_ts, end_ts FROM jobs").fetchall() == [
        (T(2025, 3, 1, 15), T(2025, 3, 1, 17))
    ]


def test_cluster_option_prefixes_ids_when_the_file_has_no_cluster_column(ledger, tmp_path):
    header = "JobIDRaw|State|Start|End|AllocTRES|NodeList"
    path = sacct_file(tmp_path, ["7|COMPLETED|1741667820|1741668146|gres/gpu=1|n1"], header)
    ingest_file(ledger, path, opts=IngestOptions(tz="UTC", cluster="hpc"))
    assert ledger.execute("SELECT job_id, cluster, start_ts FROM jobs").fetchall() == [
        ("hpc/7", "hpc", T(2025, 3, 11, 4, 37))  # epoch 1741667820 = 2025-03-11 04:37:00 UTC
    ]


def test_trailing_pipe_form_and_any_column_order(ledger, tmp_path):
    header = "NodeList|AllocTRES|State|Start|JobID|"
    rows = [
        "g[1-3]|gres/gpu=6|RUNNING|2025-01-01T00:00:00|55|",
        "g1|gres/gpu=2|RUNNING|2025-01-01T00:00:00|55.batch|",
    ]
    report = ingest_file(ledger, sacct_file(tmp_path, rows, header), opts=UTC)
    assert report.rows == {"jobs": 1, "allocations": 3}
    assert ledger.execute("SELECT host, gpu_count FROM allocations ORDER BY host").fetchall() == [
        ("g1", 2.0),  # 6 GPUs / 3 hosts
        ("g2", 2.0),
        ("g3", 2.0),
    ]
    assert ledger.execute("SELECT job_id, gpu_count, end_ts FROM jobs").fetchall() == [("55", 6.0, None)]


def test_noheader_needs_columns(ledger, tmp_path):
    body = "9|COMPLETED|2025-01-01T00:00:00|2025-01-01T01:00:00|gres/gpu:rtx2080ti=4,gres/gpu=4|n[1-2]|\n"
    path = write(tmp_path, "noheader.txt", body)
    with pytest.raises(FormatError, match="without a header: pass --columns"):
        ingest_file(ledger, path, opts=UTC)
    cols = ("JobID", "State", "Start", "End", "AllocTRES", "NodeList")
    report = ingest_file(ledger, path, opts=IngestOptions(tz="UTC", columns=cols))
    assert report.rows == {"jobs": 1, "allocations": 2}
    # rtx2080ti is not in the GPU catalog: the model keeps the name Slurm gave it
    assert ledger.execute("SELECT gpu_model, gpu_count FROM jobs").fetchall() == [("rtx2080ti", 4.0)]


def test_legacy_allocgres_column(ledger, tmp_path):
    path = sacct_file(tmp_path, ["3|COMPLETED|gpu:tesla:2(IDX:0-1)"], "JobID|State|AllocGRES")
    ingest_file(ledger, path, opts=UTC)
    assert ledger.execute("SELECT gpu_count, gpu_model FROM jobs").fetchall() == [(2.0, "tesla")]


def test_each_attempt_of_a_requeued_job_is_kept_and_billed_to_it(ledger, tmp_path):
    """sacct -D lists job 8 twice: preempted and requeued after 1 h on n1, then 1 h to completion on n2.
    Before, only the last record was kept and the first attempt's 2 GPU-h ($5.98) left the job (with
    telemetry, it became unallocated capacity; without, it vanished from spend)."""
    from analytics.waste import job_waste, waste_totals

    rows = [
        "8|REQUEUED|2025-01-01T00:00:00|2025-01-01T01:00:00|gres/gpu:h100=2,gres/gpu=2|n1",
        "8.batch|REQUEUED|2025-01-01T00:00:00|2025-01-01T01:00:00||n1",
        "8|COMPLETED|2025-01-01T02:00:00|2025-01-01T03:00:00|gres/gpu:h100=2,gres/gpu=2|n2",
        "8.batch|COMPLETED|2025-01-01T02:00:00|2025-01-01T03:00:00||n2",
        "8|COMPLETED|2025-01-01T02:00:00|2025-01-01T03:00:00|gres/gpu:h100=2,gres/gpu=2|n2",  # listed twice
    ]
    report = ingest_file(
        ledger, sacct_file(tmp_path, rows, "JobID|State|Start|End|AllocTRES|NodeList"), opts=UTC
    )
    assert report.skipped == {"job steps folded into their job": 2, "records listed twice (kept the last)": 1}
    assert ledger.execute(
        "SELECT job_id, state, start_ts, attempt, attempt_of FROM jobs ORDER BY start_ts"
    ).fetchall() == [
        ("8#1", "REQUEUED", T(2025, 1, 1, 0), 1, "8"),
        ("8", "COMPLETED", T(2025, 1, 1, 2), 2, "8"),
    ]
    assert ledger.execute("SELECT job_id, host FROM allocations ORDER BY start_ts").fetchall() == [
        ("8#1", "n1"),
        ("8", "n2"),
    ]
    w = {r["job_id"]: r for r in job_waste(ledger).iter_rows(named=True)}
    assert w["8#1"]["cost_usd"] == pytest.approx(2 * 1 * 2.99)  # the first attempt: 2 GPU-h at $2.99
    assert w["8"]["cost_usd"] == pytest.approx(2 * 1 * 2.99)
    # the requeued attempt had no checkpoint: its whole hour is badput; the completed one has no telemetry
    assert w["8#1"]["failed_usd"] == pytest.approx(5.98)
    assert waste_totals(ledger)["spend_usd"] == pytest.approx(4 * 2.99)  # both attempts, $11.96


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("gpu[01-04,07]", ["gpu01", "gpu02", "gpu03", "gpu04", "gpu07"]),
        ("n1,n2", ["n1", "n2"]),
        ("a[1-2],b[08-10]", ["a1", "a2", "b08", "b09", "b10"]),
        ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
        ("c3cpu-a2-u1-1", ["c3cpu-a2-u1-1"]),
        ("None assigned", []),
    ],
    ids=["range-and-single", "plain-list", "two-groups-zero-pad", "product", "dashes-no-range", "pending"],
)
def test_expand_nodelist(text, hosts):
    assert expand_nodelist(text) == hosts


@pytest.mark.parametrize(
    ("bad_row", "reason"),
    [
        (
            "201|ci|x|u|a|gpu|COMPLETED|0:0|2025-03-01T09:00:00|yesterday|2025-03-01T12:00:00|02:00:00|gres/gpu=1|gres/gpu=1|n1|",
            'column "Start" is not a time: "yesterday"',
        ),
        (
            "201|ci|x|u|a|gpu|EXPLODED|0:0|2025-03-01T09:00:00|2025-03-01T10:00:00|2025-03-01T12:00:00|02:00:00|gres/gpu=1|gres/gpu=1|n1|",
            'column "State" is not a Slurm job state: "EXPLODED"',
        ),
        (
            "201|ci|x|u|a|gpu|COMPLETED|0:0|2025-03-01T09:00:00|2025-03-01T10:00:00|2025-03-01T12:00:00|2 hours|gres/gpu=1|gres/gpu=1|n1|",
            'column "Elapsed" is not a [D-]HH:MM:SS duration: "2 hours"',
        ),
        (
            "201|ci|x|u|a|gpu|COMPLETED|0:0|2025-03-01T09:00:00|2025-03-01T10:00:00|2025-03-01T12:00:00|02:00:00|gres/gpu=two|gres/gpu=1|n1|",
            'column "AllocTRES" has an unreadable GPU count: "gres/gpu=two"',
        ),
        (
            "201|ci|x|u|a|gpu|COMPLETED|0:0",
            "expected 16 '|'-separated fields, found 8 (a truncated line, or a '|' inside a value: sacct does not escape it)",
        ),
        (
            "abc|ci|x|u|a|gpu|COMPLETED|0:0|2025-03-01T09:00:00|2025-03-01T10:00:00|2025-03-01T12:00:00|02:00:00|gres/gpu=1|gres/gpu=1|n1|",
            'JobID is not a Slurm job id: "abc"',
        ),
    ],
    ids=["bad-start", "bad-state", "bad-elapsed", "bad-tres-count", "short-row", "bad-jobid"],
)
def test_a_bad_row_in_the_middle_names_its_line_and_leaves_the_db_unchanged(
    ledger, tmp_path, bad_row, reason
):
    ingest_file(ledger, sacct_file(tmp_path, ROWS[:1], name="first.txt"), opts=UTC)
    before = ledger.execute("SELECT count(*) FROM jobs").fetchall()
    path = sacct_file(tmp_path, [ROWS[3], bad_row, ROWS[4]])
    with pytest.raises(FormatError) as err:
        ingest_file(ledger, path, opts=UTC)
    assert str(err.value) == f"{path}:3: {reason}"  # header is line 1, the bad row line 3
    assert ledger.execute("SELECT count(*) FROM jobs").fetchall() == before
    assert ledger.execute("SELECT count(*) FROM ingests").fetchall() == [(1,)]


def test_truncated_file_fails_on_its_last_line(ledger, tmp_path):
    text = "\n".join([HEADER, *ROWS])
    path = write(tmp_path, "cut.txt", text[: text.rindex("|gres/gpu=1,node=1")])
    with pytest.raises(
        FormatError, match=rf"cut.txt:{len(ROWS) + 1}: expected 16 '\|'-separated fields, found 12"
    ):
        ingest_file(ledger, path, opts=UTC)
    assert ledger.execute("SELECT count(*) FROM jobs").fetchall() == [(0,)]


def test_empty_file_and_header_only(ledger, tmp_path):
    with pytest.raises(FormatError, match="the file is empty"):
        ingest_file(ledger, write(tmp_path, "empty.txt", ""), fmt="sacct")
    # a header with no rows is what sacct prints for a quiet window: nothing to land, not an error
    report = ingest_file(ledger, write(tmp_path, "quiet.txt", HEADER + "\n"), opts=UTC)
    assert report.rows["jobs"] == 0


def test_reingest_is_a_noop(ledger, tmp_path):
    path = sacct_file(tmp_path)
    first = ingest_file(ledger, path, opts=UTC)
    again = ingest_file(ledger, path, opts=UTC)
    assert again.already and again.ingest_id == first.ingest_id
    assert ledger.execute("SELECT count(*) FROM jobs").fetchall() == [(5,)]
    assert ledger.execute("SELECT count(*) FROM allocations").fetchall() == [(6,)]


def test_sniffing_picks_sacct_over_other_formats(tmp_path):
    from collectors.base import choose_parser

    assert choose_parser(sacct_file(tmp_path), "auto", PARSERS).name == "sacct"


# --- sacct --json ---------------------------------------------------------------------------------------


def _wrap(n: int | None) -> dict:
    return {"set": n is not None, "infinite": False, "number": n or 0}


def test_json_v0040_wrappers_sentinels_and_gpu_tres(ledger, tmp_path):
    job = {
        "job_id": 5001,
        "cluster": "delta",
        "user": "alice",
        "account": "nlp",
        "partition": "gpuA100",
        "name": "jupyter-notebook",
        "nodes": "gpua[001-002]",
        "state": {"current": ["TIMEOUT"], "reason": "None"},
        "exit_code": {"status": ["SIGNALED"], "return_code": _wrap(0), "signal": {"id": _wrap(15)}},
        "time": {
            "submission": 1741662974,
            "start": _wrap(1741667820),
            "end": _wrap(1741671420),
            "elapsed": 3600,
        },
        "required": {"memory": -9223372036854771968},
        "tres": {
            "allocated": [
                {"type": "cpu", "name": "", "id": 1, "count": 64},
                {"type": "gres", "name": "gpu", "id": 1001, "count": 8},
                {"type": "gres", "name": "gpu:a100", "id": 1002, "count": 8},
            ],
            "requested": [{"type": "gres", "name": "gpu", "id": 1001, "count": 8}],
        },
        "steps": [],
    }
    pending = {
        "job_id": 5002,
        "cluster": "delta",
        "user": "bob",
        "account": "cv",
        "name": "wait",
        "nodes": "None assigned",
        "state": {"current": ["PENDING"]},
        "time": {"submission": 1741662974, "start": _wrap(None), "end": 0, "elapsed": 0},
        "tres": {"allocated": [], "requested": [{"type": "gres", "name": "gpu", "id": 1001, "count": 2}]},
    }
    path = write(
        tmp_path, "sacct.json", json.dumps({"meta": {"Slurm": {}}, "jobs": [job, pending]}, indent=1)
    )
    report = ingest_file(ledger, path, opts=UTC)
    assert report.format == "sacct_json"
    got = jobs(ledger)
    assert got["delta/5001"][:11] == (
        "delta", "alice", "nlp", "gpuA100", "jupyter-notebook", "interactive", "A100-40GB", 8.0,
        T(2025, 3, 11, 4, 37), T(2025, 3, 11, 5, 37), "TIMEOUT",
    )  # fmt: skip
    assert got["delta/5001"][11] == "ExitCode 0:15"
    assert got["delta/5002"][7:10] == (2.0, None, None)  # unset start / end 0 = unknown
    assert ledger.execute("SELECT host, gpu_count FROM allocations ORDER BY host").fetchall() == [
        ("gpua001", 4.0),
        ("gpua002", 4.0),
    ]


def test_json_without_jobs_list_is_an_error(ledger, tmp_path):
    path = write(tmp_path, "x.json", '{"meta": {"Slurm": {}}, "jobs": {}}')
    with pytest.raises(FormatError, match='no "jobs" list'):
        ingest_file(ledger, path, fmt="sacct_json")


def test_truncated_json_is_an_error_and_db_unchanged(ledger, tmp_path):
    path = write(tmp_path, "cut.json", '{"meta": {"Slurm": {}}, "jobs": [{"job_id": 1, "state": {"curr')
    with pytest.raises(FormatError, match="not valid sacct --json"):
        ingest_file(ledger, path, fmt="sacct_json")
    assert ledger.execute("SELECT count(*) FROM ingests").fetchall() == [(0,)]


# --- real files -----------------------------------------------------------------------------------------


def test_real_recipe_sample_from_slurm_22_05(ledger):
    """The exact output the Slurm collector parses: sacct --parsable2 with epoch times (recipes/)."""
    path = ROOT.parent / "shared" / "recipes" / "sacct_sample.txt"
    if not path.exists():
        pytest.skip(f"recipe sample not available here: {path}")
    report = ingest_file(ledger, path, opts=IngestOptions(tz="UTC", cluster="ci"))
    assert report.rows == {"jobs": 5, "allocations": 5}
    rows = ledger.execute(
        "SELECT job_id, name, team, gpu_count, start_ts, end_ts, state, exit_reason FROM jobs ORDER BY job_id"
    ).fetchall()
    # from the file: job 1 AllocTRES gres/gpu=4, Start 1795984264, End 1795984266 (epoch seconds)
    start1 = dt.datetime.fromtimestamp(1795984264, dt.UTC).replace(tzinfo=None)
    assert rows[0] == (
        "ci/1",
        "job-g4",
        "research",
        4.0,
        start1,
        start1 + dt.timedelta(seconds=2),
        "COMPLETED",
        None,
    )
    assert [r[3] for r in rows] == [4.0, 2.0, 1.0, 1.0, 1.0]
    assert rows[4][6:] == ("FAILED", "ExitCode 3:0")
    assert ledger.execute("SELECT DISTINCT host FROM allocations").fetchall() == [("vm",)]


def test_real_alpine_sacct_json(ledger):
    path = dataset("slurm-sacct/slurmdog_alpine_sacct.json")
    report = ingest_file(ledger, path, opts=UTC)
    assert report.rows == {"jobs": 1, "allocations": 0}  # a CPU job: no GPU allocation
    row = ledger.execute(
        "SELECT job_id, user_name, team, partition, gpu_count, submit_ts, start_ts, end_ts, state FROM jobs"
    ).fetchall()[0]
    # values read from the file: time.submission 1741662974, start 1741667820, end 1741668146 (elapsed 326)
    assert row == (
        "alpine/12079670", "naly@colostate.edu", "csu95_alpine1", "amilan", 0.0,
        T(2025, 3, 11, 3, 16, 14), T(2025, 3, 11, 4, 37), T(2025, 3, 11, 4, 42, 26), "COMPLETED",
    )  # fmt: skip


def test_real_issue_excerpt_mig_and_typed_gpus(ledger, tmp_path):
    """Block [A] of the GitHub excerpts: a MIG slice job and an H100 job, each with .batch/.extern steps."""
    text = dataset("slurm-sacct/github_issue_excerpts_sacct_gpu_tres.txt").read_text()
    lines = text.splitlines()
    start = lines.index("JobID|AllocTRES")
    block = lines[start : lines.index("#", start)]
    report = ingest_file(ledger, write(tmp_path, "a.txt", "\n".join(block) + "\n"), opts=UTC)
    assert report.skipped == {"job steps folded into their job": 3}
    assert ledger.execute("SELECT job_id, gpu_model, gpu_count FROM jobs ORDER BY job_id").fetchall() == [
        ("8117657", "A100-40GB", pytest.approx(3 / 7)),  # gres/gpu:a100_3g.20gb=1
        ("8117678", "H100-SXM-80GB", 1.0),  # gres/gpu:h100=1
    ]


def test_real_kabre_file_without_jobid_is_refused(ledger):
    path = dataset("slurm-sacct/kabre_sacct_parsable2.csv")
    with pytest.raises(FormatError) as err:
        ingest_file(ledger, path)
    assert err.value.line == 1
    assert err.value.reason.startswith(
        "JobID is required (this sacct output has no JobID or JobIDRaw column)"
    )
    assert ledger.execute("SELECT count(*) FROM jobs").fetchall() == [(0,)]


def test_real_hyak_fixed_width_asks_for_parsable(ledger):
    path = dataset("slurm-sacct/hyak_sacct_default_fixedwidth.txt")
    with pytest.raises(FormatError, match=r"re-run sacct with -P \(--parsable2\)"):
        ingest_file(ledger, path)


def test_real_riviera_noheader_without_gpu_column_is_refused(ledger):
    path = dataset("slurm-sacct/slurmdog_riviera_sacct_31days_noheader.txt")
    fields = (
        "JobID|User|Group|State|Partition|AllocCPUS|ReqMem|TotalCPU|Elapsed|MaxRSS|ExitCode|NNodes|NTasks"
    )
    cols = tuple(fields.split("|"))
    with pytest.raises(FormatError, match="no GPU column"):
        ingest_file(ledger, path, opts=IngestOptions(columns=cols))


def test_running_job_is_held_for_its_elapsed_time(ledger, tmp_path):
    # a 4-GPU job running for 2 days (Elapsed 2-00:00:00) beside a job that ended 2 h after it started:
    # costed to the horizon, which is at least Start + Elapsed: 4 × 48 h = 192 GPU-h, not 4 × 2 h = 8
    from analytics.jobs import jobs_table

    rows = [
        "1|RUNNING|2025-03-01T00:00:00|Unknown|2-00:00:00|gres/gpu:h100=4,gres/gpu=4|n1",
        "2|COMPLETED|2025-03-01T00:00:00|2025-03-01T02:00:00|02:00:00|gres/gpu:h100=1,gres/gpu=1|n2",
    ]
    ingest_file(
        ledger, sacct_file(tmp_path, rows, "JobID|State|Start|End|Elapsed|AllocTRES|NodeList"), opts=UTC
    )
    assert ledger.execute("SELECT job_id, state, end_ts FROM jobs ORDER BY 1").fetchall() == [
        ("1", "RUNNING", None),  # still running: no end
        ("2", "COMPLETED", T(2025, 3, 1, 2)),
    ]
    # its allocation is held at least until Start + Elapsed
    assert ledger.execute("SELECT end_ts FROM allocations WHERE job_id = '1'").fetchall() == [
        (T(2025, 3, 3),)
    ]
    hours = {r["job_id"]: r["gpu_hours"] for r in jobs_table(ledger).to_dicts()}
    assert hours == {"1": pytest.approx(4 * 48), "2": pytest.approx(1 * 2)}


def test_running_job_in_sacct_json_is_not_zero_gpu_hours(ledger, tmp_path):
    from analytics.jobs import jobs_table

    start = int(T(2025, 3, 1, tzinfo=dt.UTC).timestamp())
    job = {
        "job_id": 7,
        "cluster": "c",
        "user": "u",
        "account": "a",
        "name": "train",
        "nodes": "n1",
        "state": {"current": ["RUNNING"]},
        "time": {"submission": start, "start": start, "end": 0, "elapsed": 3 * 3600},
        "tres": {"allocated": [{"type": "gres", "name": "gpu", "count": 2}]},
    }
    path = write(tmp_path, "sacct.json", json.dumps({"meta": {"Slurm": {}}, "jobs": [job]}))
    ingest_file(ledger, path, opts=UTC)
    # alone in the ledger, its start was the horizon (0 GPU-h); Elapsed says 3 h held: 2 GPUs × 3 h
    assert [(r["job_id"], r["gpu_hours"]) for r in jobs_table(ledger).to_dicts()] == [
        ("c/7", pytest.approx(6.0))
    ]


def test_requeued_record_uses_elapsed_not_end_minus_start(ledger, tmp_path):
    # End - Start = 26 h 12 min; Slurm's Elapsed says 23:58:12 was held
    rows = ["9|REQUEUED|2025-01-01T00:00:00|2025-01-02T02:12:00|23:58:12|gres/gpu=2|n1"]
    ingest_file(
        ledger, sacct_file(tmp_path, rows, "JobID|State|Start|End|Elapsed|AllocTRES|NodeList"), opts=UTC
    )
    end = T(2025, 1, 1) + dt.timedelta(hours=23, minutes=58, seconds=12)
    assert ledger.execute("SELECT state, end_ts FROM jobs").fetchall() == [("REQUEUED", end)]
    assert ledger.execute("SELECT end_ts FROM allocations").fetchall() == [(end,)]


def test_tab_delimited_export_is_read(ledger, tmp_path):
    header = "JobID\tUser\tState\tStart\tEnd\tAllocTRES\tNodeList"
    rows = ["11\talice\tCOMPLETED\t2025-03-01T00:00:00\t2025-03-01T01:00:00\tcpu=4,gres/gpu=2\tn[1-2]"]
    report = ingest_file(ledger, sacct_file(tmp_path, rows, header, name="export.tsv"), opts=UTC)
    assert report.format == "sacct"
    assert ledger.execute("SELECT job_id, user_name, gpu_count, end_ts FROM jobs").fetchall() == [
        ("11", "alice", 2.0, T(2025, 3, 1, 1))
    ]
    assert ledger.execute("SELECT host, gpu_count FROM allocations ORDER BY 1").fetchall() == [
        ("n1", 1.0),
        ("n2", 1.0),
    ]


def test_tab_delimited_file_with_a_short_row_names_its_line(ledger, tmp_path):
    header = "JobID\tState\tAllocTRES"
    path = sacct_file(tmp_path, ["1\tCOMPLETED\tgres/gpu=1", "2\tCOMPLETED"], header, name="export.tsv")
    with pytest.raises(FormatError, match=r"expected 3 tab-separated fields, found 2") as err:
        ingest_file(ledger, path, opts=UTC)
    assert err.value.line == 3


def test_tab_separated_non_sacct_file_gets_a_closest_match_hint(ledger, tmp_path):
    path = write(tmp_path, "x.tsv", "JobID\tUsr\tStat\n1\t2\t3\n")
    with pytest.raises(FormatError) as err:
        ingest_file(ledger, path, opts=UTC)
    assert err.value.reason.endswith(
        "closest: sacct (tab-separated): the header names 1 sacct field(s) of 3 (jobid); a sacct export needs "
        "a header of sacct --format fields (JobID, State, AllocTRES, ...)"
    )


@pytest.mark.parametrize(
    ("detail", "indices"),
    [
        ("gpu:a100:4(IDX:0-3)", [0, 1, 2, 3]),
        ("gpu:2(IDX:1,3)", [1, 3]),
        ("gpu:h100:3(IDX:0,2-3)", [0, 2, 3]),
        ("gpu(IDX:5)", [5]),
        ("gpu:a100:2(IDX:N/A)", None),
        ("gpu:2", None),
    ],
    ids=["typed-range", "list", "mixed", "untyped", "not-available", "no-index"],
)
def test_gres_detail_indices(detail, indices):
    from collectors.sacct import gres_indices

    assert gres_indices(detail) == indices


def test_json_gres_detail_per_node_becomes_one_allocation_per_index(ledger, tmp_path):
    start = int(T(2025, 3, 1, tzinfo=dt.UTC).timestamp())
    job = {
        "job_id": 8,
        "cluster": "c",
        "nodes": "g[1-2]",
        "state": {"current": ["COMPLETED"]},
        "time": {"start": start, "end": start + 3600, "elapsed": 3600},
        "tres": {"allocated": [{"type": "gres", "name": "gpu", "count": 3}]},
        "gres_detail": ["gpu:h100:2(IDX:0-1)", "gpu:h100:1(IDX:3)"],
    }
    path = write(tmp_path, "sacct.json", json.dumps({"meta": {"Slurm": {}}, "jobs": [job]}))
    ingest_file(ledger, path, opts=UTC)
    assert ledger.execute("SELECT host, gpu_index, gpu_count FROM allocations ORDER BY 1, 2").fetchall() == [
        ("g1", 0, 1.0),
        ("g1", 1, 1.0),
        ("g2", 3, 1.0),
    ]


# A running job started 2020-01-01 10:00 whose Elapsed says 400 days: it would be held until 2021-02-04 10:00,
# past thresholds.max_job_days (365). Only its allocation has that end (the job's end_ts stays NULL).
LONG_HEADER = "JobIDRaw|JobName|User|Account|State|Start|End|Elapsed|AllocTRES|NodeList"
FINE_ROW = "950|train|bob|cv|COMPLETED|2020-01-01T10:00:00|2020-01-01T11:00:00|01:00:00|gres/gpu:h100=1,gres/gpu=1|g01"
LONG_ROW = "953|train|bob|cv|RUNNING|2020-01-01T10:00:00|Unknown|400-00:00:00|gres/gpu:h100=1,gres/gpu=1|g04"
LONG_REASON = "Start + Elapsed is 2021-02-04 10:00:00: the job would have run 400 days, longer than thresholds.max_job_days"


def test_a_running_jobs_implausible_elapsed_names_its_line_and_field(tmp_path):
    settings = write(tmp_path, "settings.toml", "")
    path = sacct_file(tmp_path, [FINE_ROW, LONG_ROW], LONG_HEADER)
    done = gpuledger("ingest", "--db", str(tmp_path / "l.duckdb"), "--settings", str(settings), "--tz", "UTC", str(path))  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip() == f"error: {path}:3: {LONG_REASON}"  # header line 1, job 953 line 3


def test_skip_bad_rows_rejects_a_running_jobs_line_whole(tmp_path):
    db = str(tmp_path / "l.duckdb")
    settings = write(tmp_path, "settings.toml", "")
    path = sacct_file(tmp_path, [FINE_ROW, LONG_ROW], LONG_HEADER)
    done = gpuledger("ingest", "--db", db, "--settings", str(settings), "--tz", "UTC", "--skip-bad-rows", "--json", str(path))  # fmt: skip
    report = json.loads(done.stdout)[0]
    assert report["rows"] == {"jobs": 1, "allocations": 1}  # job 950 and its one host
    assert [(r["line"], r["table"], r["column"], r["reason"]) for r in report["rejected_rows"]] == [
        (3, "allocations", "Start + Elapsed", LONG_REASON)
    ]
    listed = json.loads(gpuledger("jobs", "--db", db, "--settings", str(settings), "--json").stdout)
    # job 953 is not landed (nor costed to the ledger's horizon): only 950, 1 GPU × 1 h
    assert [(j["job_id"], j["gpu_hours"]) for j in listed] == [("950", pytest.approx(1 * 1))]


def test_sacct_json_names_the_entry_of_a_running_jobs_implausible_elapsed(ledger, tmp_path):
    start = int(T(2020, 1, 1, 10, tzinfo=dt.UTC).timestamp())
    job = {
        "job_id": 953,
        "nodes": "g04",
        "state": {"current": ["RUNNING"]},
        "time": {"start": start, "end": 0, "elapsed": 400 * 86400},
        "tres": {"allocated": [{"type": "gres", "name": "gpu", "count": 1}]},
    }
    path = write(tmp_path, "sacct.json", json.dumps({"meta": {"Slurm": {}}, "jobs": [job]}))
    with pytest.raises(FormatError) as err:
        ingest_file(ledger, path, opts=UTC)
    assert str(err.value) == f"{path}: jobs[] entry 1: {LONG_REASON}"


@pytest.mark.parametrize("state", ["STOPPED", "STAGE_OUT", "SIGNALING", "CONFIGURING"])
def test_every_state_that_holds_its_gpus_is_running_not_ended(ledger, tmp_path, state):
    # gpuledger/ledger/job_states.HELD_STATES. The copies disagreed: sacct.py held 5 states and derived an End
    # (Start + Elapsed, the job finished) for STOPPED, STAGE_OUT and SIGNALING, while the landing
    # (collectors/base.py) counted them open. Slurm keeps the allocation in all of them, so the job has no end
    # and its allocation is held at least until Start + Elapsed (1 h), as for RUNNING.
    rows = [f"1|{state}|2025-03-01T00:00:00|Unknown|01:00:00|gres/gpu:h100=2,gres/gpu=2|n1"]
    ingest_file(
        ledger, sacct_file(tmp_path, rows, "JobID|State|Start|End|Elapsed|AllocTRES|NodeList"), opts=UTC
    )
    assert ledger.execute("SELECT state, end_ts FROM jobs").fetchall() == [(state, None)]
    assert ledger.execute("SELECT end_ts FROM allocations").fetchall() == [(T(2025, 3, 1, 1),)]


@pytest.mark.parametrize("state", ["REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"])
def test_a_job_waiting_to_start_again_ended_its_last_run_at_start_plus_elapsed(ledger, tmp_path, state):
    # gpuledger/ledger/job_states.REQUEUE_STATES: like REQUEUED (above), End - Start includes the wait;
    # the earlier run held its 2 GPUs for Elapsed = 1 h 30 min
    rows = [f"9|{state}|2025-01-01T00:00:00|2025-01-01T05:00:00|01:30:00|gres/gpu=2|n1"]
    ingest_file(
        ledger, sacct_file(tmp_path, rows, "JobID|State|Start|End|Elapsed|AllocTRES|NodeList"), opts=UTC
    )
    end = T(2025, 1, 1, 1, 30)
    assert ledger.execute("SELECT state, end_ts FROM jobs").fetchall() == [(state, end)]
    assert ledger.execute("SELECT end_ts FROM allocations").fetchall() == [(end,)]
