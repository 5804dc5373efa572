"""Slurm's own GPU accounting (sacct TRESUsageInAve gres/gpuutil, gres/gpumem) as a job's utilization when no
telemetry covers it, and array tasks named by JobIDRaw or by JobID as one job.

The step lines are in the shape sacct writes them: ResearchComputing/Documentation#498 shows a real
``sacct -P`` TRESUsageInAve (the allocation line empty, ``.batch`` with ``gres/gpumem=40777023488,
gres/gpuutil=100`` in bytes, ``.extern`` at 0), and the Alpine ``sacct --json`` (Slurm 23.02, data_parser
v0.0.39; shared/datasets/slurm-sacct) the JSON one: ``steps[].step.id.step_id``, ``time.elapsed`` and
``tres.requested.average`` as ``{type, name, id, count}`` lists.
"""

from __future__ import annotations

import json

import pytest

from analytics.jobs import jobs_table
from analytics.slurm_usage import SLURM_BASIS
from analytics.waste import job_waste
from collectors.base import IngestOptions
from collectors.ingest import ingest_file
from tests.analytics.build import set_test_prices
from tests.conftest import DATASETS, gpuledger, write

UTC = IngestOptions(tz="UTC")
RATE = 4.0  # $/GPU-hour for H100 on_demand in the test price sheet (tests/analytics/build.py)
HEADER = (
    "JobIDRaw|JobID|Cluster|JobName|User|Account|State|Start|End|ElapsedRaw|AllocTRES|NodeList|TRESUsageInAve"
)


def _ingest(ledger, tmp_path, rows, name="sacct.txt", header=HEADER):
    return ingest_file(ledger, write(tmp_path, name, "\n".join([header, *rows]) + "\n"), opts=UTC)


def _job(ledger, job_id):
    return ledger.execute(
        "SELECT gpu_util_mean_pct, gpu_mem_mean_mib, array_task FROM jobs WHERE job_id = ?", [job_id]
    ).fetchone()


def test_a_job_at_42_percent_from_its_batch_step_with_no_telemetry(ledger, tmp_path):
    """Done-when case: gres/gpuutil=42 on the batch step, no sample: 42 %, from Slurm accounting, and money
    judged from it. 1 H100 × 2 h at $4 = $8; 42 % < 60 % target: under-used = $8 × (60 − 42) / 60 = $2.40,
    productive $5.60, nothing unmeasured, nothing idle (42 % is over the 5 % idle threshold)."""
    set_test_prices(ledger)
    _ingest(
        ledger,
        tmp_path,
        [
            "500|500|ci|train|alice|nlp|COMPLETED|2025-03-01T10:00:00|2025-03-01T12:00:00|7200"
            "|billing=8,cpu=8,gres/gpu:h100=1,gres/gpu=1,mem=64G,node=1|g01|",
            "500.batch|500.batch|ci|batch|||COMPLETED|2025-03-01T10:00:00|2025-03-01T12:00:00|7200"
            "|cpu=8,gres/gpu:h100=1,gres/gpu=1,mem=64G,node=1|g01|cpu=00:56:24,energy=0,fs/disk=350130624578,"
            "gres/gpuutil=42,mem=10621726720,pages=3465,vmem=10439041024",
        ],
    )
    assert _job(ledger, "ci/500")[0] == pytest.approx(42.0)
    row = job_waste(ledger).row(0, named=True)
    assert row["cost_usd"] == pytest.approx(2 * RATE)
    assert row["underused_usd"] == pytest.approx(8.0 * (60 - 42) / 60)  # $2.40
    assert row["productive_usd"] == pytest.approx(8.0 - 2.4)  # $5.60
    assert row["idle_allocated_usd"] == pytest.approx(0.0)
    assert row["unmeasured_usd"] == pytest.approx(0.0, abs=1e-9)
    assert row["util_basis"] == SLURM_BASIS
    table = jobs_table(ledger).row(0, named=True)
    assert table["mean_util_pct"] == pytest.approx(42.0)
    assert table["util_basis"] == "from Slurm accounting"
    assert table["unknown_share"] == 0.0


def test_steps_that_held_gpu_memory_count_weighted_by_their_time(ledger, tmp_path):
    """The real shape: extern reads 0/0 and is left out. Job 600 runs srun steps 0 (1 h at 90 %, 30 GiB) and
    1 (30 min at 30 %, 10 GiB) from a batch shell that holds no GPU memory (0 %): the shell is not counted.
    mean = (90 × 3600 + 30 × 1800) / 5400 = 70 %; memory (30720 × 3600 + 10240 × 1800) / 5400 = 23,893.33 MiB.
    Job 601 (1 GPU, 1 h): batch 100 % with 40777023488 bytes = 38,888.07 MiB, extern 0: 100 %; an idle job
    602 whose steps read 0 % and hold no memory: 0 % (every step but extern counts)."""
    alloc = "|billing=8,cpu=8,gres/gpu=1,node=1|g01|"
    rows = [
        "600|600|ci|train|alice|nlp|COMPLETED|2025-03-01T10:00:00|2025-03-01T12:00:00|7200" + alloc,
        "600.batch|600.batch|ci|batch|||COMPLETED|2025-03-01T10:00:00|2025-03-01T12:00:00|7200"
        + alloc
        + "cpu=00:00:01,gres/gpumem=0,gres/gpuutil=0,mem=262144",
        "600.extern|600.extern|ci|extern|||COMPLETED|2025-03-01T10:00:00|2025-03-01T12:00:00|7200"
        + alloc
        + "cpu=00:00:00,energy=0,fs/disk=5273,gres/gpumem=0,gres/gpuutil=0,mem=262144,pages=0,vmem=0",
        "600.0|600.0|ci|python|||COMPLETED|2025-03-01T10:00:00|2025-03-01T11:00:00|3600"
        + alloc
        + "cpu=01:00:00,gres/gpumem=30720M,gres/gpuutil=90,mem=2G",
        "600.1|600.1|ci|python|||COMPLETED|2025-03-01T11:00:00|2025-03-01T11:30:00|1800"
        + alloc
        + "cpu=00:30:00,gres/gpumem=10G,gres/gpuutil=30,mem=2G",
        "601|601|ci|train|bob|cv|COMPLETED|2025-03-01T10:00:00|2025-03-01T11:00:00|3600" + alloc,
        "601.batch|601.batch|ci|batch|||COMPLETED|2025-03-01T10:00:00|2025-03-01T11:00:00|3600"
        + alloc
        + "cpu=00:56:24,energy=0,fs/disk=350130624578,gres/gpumem=40777023488,gres/gpuutil=100,"
        "mem=10621726720,pages=3465,vmem=10439041024",
        "601.extern|601.extern|ci|extern|||COMPLETED|2025-03-01T10:00:00|2025-03-01T11:00:00|3600"
        + alloc
        + "cpu=00:00:00,energy=0,fs/disk=5273,gres/gpumem=0,gres/gpuutil=0,mem=262144,pages=0,vmem=0",
        "602|602|ci|wait|carol|cv|COMPLETED|2025-03-01T10:00:00|2025-03-01T11:00:00|3600" + alloc,
        "602.batch|602.batch|ci|batch|||COMPLETED|2025-03-01T10:00:00|2025-03-01T11:00:00|3600"
        + alloc
        + "gres/gpumem=0,gres/gpuutil=0",
    ]
    _ingest(ledger, tmp_path, rows)
    util, mem, _ = _job(ledger, "ci/600")
    assert util == pytest.approx((90 * 3600 + 30 * 1800) / 5400)  # 70 %
    assert mem == pytest.approx((30720 * 3600 + 10240 * 1800) / 5400)
    assert _job(ledger, "ci/601")[:2] == pytest.approx((100.0, 40777023488 / 2**20))
    assert _job(ledger, "ci/602")[0] == 0.0


def test_an_idle_mean_is_an_idle_stretch_of_the_whole_job(ledger, tmp_path):
    """3 % ≤ the 5 % idle threshold over 2 h (≥ 30 min): the job's $8 is idle_allocated, none under-used."""
    set_test_prices(ledger)
    _ingest(
        ledger,
        tmp_path,
        [
            "700|700|ci|notebook|dave|nlp|COMPLETED|2025-03-01T10:00:00|2025-03-01T12:00:00|7200"
            "|gres/gpu:h100=1,gres/gpu=1,node=1|g01|",
            "700.0|700.0|ci|python|||COMPLETED|2025-03-01T10:00:00|2025-03-01T12:00:00|7200"
            "|gres/gpu=1,node=1|g01|gres/gpumem=1024M,gres/gpuutil=3",
        ],
    )
    row = job_waste(ledger).row(0, named=True)
    assert row["idle_allocated_usd"] == pytest.approx(8.0)
    assert row["underused_usd"] == pytest.approx(0.0)
    assert row["idle_gpu_hours"] == pytest.approx(2.0)


def test_samples_win_over_slurms_mean(ledger, tmp_path):
    """A job with telemetry is judged from its samples alone: an nvidia-smi series at 90 % over the job's
    hour makes it productive, whatever sacct's 10 % says."""
    set_test_prices(ledger)
    _ingest(
        ledger,
        tmp_path,
        [
            "800|800||train|erin|nlp|COMPLETED|2025-03-01T10:00:00|2025-03-01T11:00:00|3600"
            "|gres/gpu:h100=1,gres/gpu=1,node=1|g01|",
            "800.batch|800.batch||batch|||COMPLETED|2025-03-01T10:00:00|2025-03-01T11:00:00|3600"
            "|gres/gpu=1,node=1|g01|gres/gpumem=1024M,gres/gpuutil=10",
        ],
    )
    lines = ["timestamp, index, name, utilization.gpu [%]"]
    lines += [f"2025/03/01 10:{m:02d}:00.000, 0, NVIDIA H100 80GB HBM3, 90 %" for m in range(60)]
    ingest_file(
        ledger, write(tmp_path, "g01.csv", "\n".join(lines) + "\n"), opts=IngestOptions(tz="UTC", host="g01")
    )
    row = job_waste(ledger).row(0, named=True)
    assert row["util_basis"] == "telemetry"
    assert row["productive_usd"] == pytest.approx(RATE)
    assert jobs_table(ledger).row(0, named=True)["mean_util_pct"] == pytest.approx(90.0)


def test_sacct_json_steps_give_the_same_mean(ledger, tmp_path):
    """sacct --json: the Alpine document's shape with a GPU job; steps batch (1 h at 42 %, 8 GiB) and extern
    (0): 42 %, 8,192 MiB; the array task 12078642_6 is kept beside raw id 12079670."""
    doc = json.loads((DATASETS / "slurm-sacct/slurmdog_alpine_sacct.json").read_text())
    job = doc["jobs"][0]
    job["tres"]["allocated"].append({"type": "gres", "name": "gpu", "id": 1001, "count": 1})

    def step(name, util, mem):
        return {
            "time": {"elapsed": 3600},
            "step": {"id": {"job_id": job["job_id"], "step_id": name}, "name": name},
            "tres": {
                "requested": {
                    "average": [
                        {"type": "cpu", "name": "", "id": 1, "count": 1217620},
                        {"type": "gres", "name": "gpumem", "id": 1003, "count": mem},
                        {"type": "gres", "name": "gpuutil", "id": 1004, "count": util},
                    ],
                    "max": [{"type": "gres", "name": "gpuutil", "id": 1004, "count": util + 10}],
                }
            },
        }

    job["steps"] = [step("batch", 42, 8 * 2**30), step("extern", 0, 0)]
    ingest_file(ledger, write(tmp_path, "sacct.json", json.dumps(doc)), opts=UTC)
    job_id, util, mem, peak, task = ledger.execute(
        "SELECT job_id, gpu_util_mean_pct, gpu_mem_mean_mib, gpu_util_peak_pct, array_task FROM jobs"
    ).fetchone()
    assert (util, mem, peak) == (42.0, 8192.0, 52.0)
    assert job_id.endswith("12079670") and task.endswith("12078642_6")


@pytest.mark.parametrize("order", ["raw first", "task name first"])
def test_an_array_task_is_one_job_by_either_name_across_ingests(ledger, tmp_path, order):
    """Task 300_1 is raw id 301. A dump with JobIDRaw and JobID, and an older one with only JobID (300_1,
    running), land as one job ci/301 in either order, its finished record kept, with its allocation."""
    both = [
        "301|300_1|ci|sweep|alice|nlp|COMPLETED|2025-03-01T10:00:00|2025-03-01T11:00:00|3600"
        "|gres/gpu:h100=1,gres/gpu=1,node=1|g01|"
    ]
    only_task = [
        "300_1|ci|sweep|alice|nlp|RUNNING|2025-03-01T10:00:00|Unknown|1800|gres/gpu:h100=1,gres/gpu=1,node=1|g02|"
    ]
    task_header = (
        "JobID|Cluster|JobName|User|Account|State|Start|End|ElapsedRaw|AllocTRES|NodeList|TRESUsageInAve"
    )
    steps = [
        lambda: _ingest(ledger, tmp_path, both, "both.txt"),
        lambda: _ingest(ledger, tmp_path, only_task, "task.txt", header=task_header),
    ]
    for run in steps if order == "raw first" else steps[::-1]:
        run()
    assert ledger.execute("SELECT job_id, state, array_task FROM jobs").fetchall() == [
        ("ci/301", "COMPLETED", "ci/300_1")
    ]
    assert ledger.execute("SELECT job_id, host FROM allocations").fetchall() == [("ci/301", "g01")]


def test_a_later_record_by_task_name_replaces_the_raw_ids(ledger, tmp_path):
    """The ledger has ci/301 (array task 300_1) running; a later dump naming only 300_1 finished lands on it."""
    _ingest(
        ledger,
        tmp_path,
        ["301|300_1|ci|sweep|alice|nlp|RUNNING|2025-03-01T10:00:00|Unknown|600|gres/gpu=1,node=1|g01|"],
        "a.txt",
    )
    _ingest(
        ledger,
        tmp_path,
        [
            "300_1|ci|sweep|alice|nlp|COMPLETED|2025-03-01T10:00:00|2025-03-01T11:00:00|3600|gres/gpu=1,node=1|g01|"
        ],
        "b.txt",
        header="JobID|Cluster|JobName|User|Account|State|Start|End|ElapsedRaw|AllocTRES|NodeList|TRESUsageInAve",
    )
    assert ledger.execute("SELECT job_id, state, array_task FROM jobs").fetchall() == [
        ("ci/301", "COMPLETED", "ci/300_1")
    ]


def test_jobs_json_marks_slurm_accounting(tmp_path):
    """``gpuledger jobs --json`` says where a job's utilization came from."""
    db = str(tmp_path / "l.duckdb")
    path = write(
        tmp_path,
        "s.txt",
        HEADER + "\n500|500|ci|train|alice|nlp|COMPLETED|2025-03-01T10:00:00|2025-03-01T12:00:00|7200"
        "|gres/gpu:h100=1,gres/gpu=1,node=1|g01|\n500.batch|500.batch|ci|batch|||COMPLETED|2025-03-01T10:00:00"
        "|2025-03-01T12:00:00|7200|gres/gpu=1,node=1|g01|gres/gpuutil=42\n",
    )
    assert gpuledger("ingest", str(path), "--tz", "UTC", "--db", db).returncode == 0
    out = gpuledger("jobs", "--json", "--db", db)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    rows = rows["jobs"] if isinstance(rows, dict) else rows
    assert [(r["job_id"], r["mean_util_pct"], r["util_basis"]) for r in rows] == [
        ("ci/500", 42.0, "from Slurm accounting")
    ]


def test_a_job_across_a_week_boundary_gets_one_verdict(ledger, tmp_path):
    """3 % over Sunday 23:40 - Monday 01:40 (2 h, 1 H100 at $4): idle in both week pieces, though the first
    is 20 min, shorter than idle_min_minutes: $8/6 + $8 × 5/6 = $8 idle, as job_waste says."""
    from analytics.waste import job_waste_by_week

    set_test_prices(ledger)
    _ingest(
        ledger,
        tmp_path,
        [
            "900|900|ci|nb|dave|nlp|COMPLETED|2025-03-02T23:40:00|2025-03-03T01:40:00|7200"
            "|gres/gpu:h100=1,gres/gpu=1,node=1|g01|",
            "900.0|900.0|ci|python|||COMPLETED|2025-03-02T23:40:00|2025-03-03T01:40:00|7200"
            "|gres/gpu=1,node=1|g01|gres/gpumem=512M,gres/gpuutil=3",
        ],
    )
    weeks = job_waste_by_week(ledger).sort("week")
    assert weeks["idle_allocated_usd"].to_list() == pytest.approx([8.0 * 20 / 120, 8.0 * 100 / 120])
    assert weeks["underused_usd"].sum() == pytest.approx(0.0)
    assert job_waste(ledger).row(0, named=True)["idle_allocated_usd"] == pytest.approx(8.0)
