"""A W&B run tied to its Slurm job with ``--job`` is a second view of the job's cards, not more cards.

W&B's system metrics land as GPUs ``wandb:<host>:<i>``. When the host's real cards report telemetry too
(nvidia-smi, dcgm, NVML), each W&B GPU is a view of one of them (collectors/attribute.py, "W&B series"):
it adds no capacity, its job label is no evidence of which card the job had, and where the job's own card
reported at that moment the W&B sample is not the job's (the card's reading is). Where nothing else
reported, W&B's series stands for the job's card, as it always did.

Every figure is worked by hand at the sheet's H100 on-demand price, $2.99 per GPU-hour. The files are the
tester's: job 42 holds 1 H100 on g01 from 10:00 to 12:00; nvidia-smi samples GPU-aaaa at 0 % every 10 min
from 10:00 to 12:00 (13 samples: the last one stands for 12:00-12:10, a card paid for while no job held
it); W&B samples its GPU 0 at 90 % every 10 min from 10:00 to 11:50 (12 lines).
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
from pathlib import Path

import duckdb
import pytest

from analytics.jobs import jobs_table
from analytics.summary import summary
from collectors.base import IngestOptions
from collectors.ingest import ingest_file
from tests.conftest import gpuledger, write

T = dt.datetime
T0 = T(2025, 3, 1, 10)
PRICE = 2.99  # H100-SXM-80GB on demand, the shipped sheet
HEADER = "JobIDRaw|Cluster|JobName|User|Account|State|Start|End|Elapsed|AllocTRES|NodeList"
H100 = "NVIDIA H100 80GB HBM3"
TAIL_H = 10 / 60  # the last nvidia-smi sample (12:00) stands for 10 minutes no job held


def sacct(tmp_path: Path, gpus: int = 1, end: str = "12:00:00", elapsed: str = "02:00:00") -> Path:
    row = (
        f"42|ci|train|bob|cv|COMPLETED|2025-03-01T10:00:00|2025-03-01T{end}|{elapsed}"
        f"|gres/gpu:h100={gpus},gres/gpu={gpus}|g01"
    )
    return write(tmp_path, "job.txt", f"{HEADER}\n{row}\n")


def smi(tmp_path: Path, cards: int = 1, *, minutes: range = range(0, 121, 10), util: int = 0) -> Path:
    """nvidia-smi --query-gpu=timestamp,index,name,uuid,utilization.gpu --format=csv -l 600, in UTC."""
    lines = ["timestamp, index, name, uuid, utilization.gpu [%]"]
    for m in minutes:
        ts = (T0 + dt.timedelta(minutes=m)).strftime("%Y/%m/%d %H:%M:%S.000")
        lines += [f"{ts}, {i}, {H100}, GPU-{'abcd'[i] * 4}, {util} %" for i in range(cards)]
    return write(tmp_path, "g01.csv", "\n".join(lines) + "\n")


def wandb_run(tmp_path: Path, gpus: int = 1, *, util: float = 90.0) -> Path:
    """A legacy SDK's run folder: wandb-events.jsonl (one line per 10 min, 10:00-11:50) and its metadata."""
    files = tmp_path / "run-1" / "files"
    files.mkdir(parents=True)
    meta = {"startedAt": "2025-03-01T10:00:00", "heartbeatAt": "2025-03-01T12:00:00", "host": "g01"}
    write(files, "wandb-metadata.json", json.dumps(meta | {"gpu": H100, "gpu_count": gpus}))
    start = int(T0.replace(tzinfo=dt.UTC).timestamp())
    lines = [
        json.dumps({**{f"system.gpu.{i}.gpu": util for i in range(gpus)}, "_timestamp": start + 600 * k})
        for k in range(12)
    ]
    return write(files, "wandb-events.jsonl", "\n".join(lines) + "\n")


def ingest(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    if path.name.startswith("wandb-"):
        ingest_file(con, path, opts=IngestOptions(job_id="ci/42"))
    elif path.suffix == ".csv":
        ingest_file(con, path, opts=IngestOptions(tz="UTC", host="g01"))
    else:
        ingest_file(con, path, opts=IngestOptions(tz="UTC"))


def figures(con: duckdb.DuckDBPyConnection) -> dict[str, float]:
    s = summary(con)
    return {"spend": s["spend_usd"], "idle": s["idle_usd"]} | {
        k.removesuffix("_usd"): s["waste"][k]
        for k in ("productive_usd", "underused_usd", "unallocated_usd", "unmeasured_usd")
    }


def job(con: duckdb.DuckDBPyConnection) -> dict:
    (row,) = [r for r in jobs_table(con).to_dicts() if r["job_id"] == "ci/42"]
    return row


ORDERS = list(itertools.permutations(["jobs", "smi", "wandb"]))


@pytest.mark.parametrize("order", ORDERS, ids=["-".join(o) for o in ORDERS])
def test_the_tester_case_spend_stays_and_idle_is_judged_from_the_real_card(ledger, tmp_path, order):
    paths = {"jobs": sacct(tmp_path), "smi": smi(tmp_path), "wandb": wandb_run(tmp_path)}
    for name in order:
        ingest(ledger, paths[name])
    # before the fix: spend $12.46 (W&B's GPU a second card, 2 h unheld) and idle $0 (the real card unheld)
    held = 1 * 2 * PRICE  # 1 GPU × 2 h = $5.98, all of it at 0 % on the real card
    assert figures(ledger) == {
        "spend": pytest.approx(held + TAIL_H * PRICE),  # $5.98 + $0.50 = $6.48: no card was added
        "idle": pytest.approx(held),
        "productive": pytest.approx(0, abs=1e-9),
        "underused": pytest.approx(0, abs=1e-9),
        "unallocated": pytest.approx(TAIL_H * PRICE),  # the 10 min after 12:00 only
        "unmeasured": pytest.approx(0, abs=1e-9),
    }
    row = job(ledger)
    assert (row["mean_util_pct"], row["attribution"], row["cost_usd"]) == (0.0, "exact", pytest.approx(held))
    # the job's samples are the real card's; W&B's are kept, the view of that card, and belong to no job
    assert ledger.execute(
        """SELECT s.gpu_id, g.parent_gpu_id, count(*), count(s.job_id)
           FROM samples s JOIN gpus g USING (gpu_id) GROUP BY ALL ORDER BY 1"""
    ).fetchall() == [("GPU-aaaa", None, 13, 12), ("wandb:g01:0", "GPU-aaaa", 12, 0)]


def test_two_gpus_two_real_cards_and_a_two_gpu_wandb_run(ledger, tmp_path):
    # job 42 holds 2 H100s; nvidia-smi reports both cards (GPU-aaaa, GPU-bbbb) at 0 %, W&B its GPUs 0 and 1
    # at 90 %; the whole run folder (events and metadata) is ingested with --job
    for path in (sacct(tmp_path, gpus=2), smi(tmp_path, cards=2)):
        ingest(ledger, path)
    before = figures(ledger)
    events = wandb_run(tmp_path, gpus=2)
    for path in (events.with_name("wandb-metadata.json"), events):
        ingest(ledger, path)
    held = 2 * 2 * PRICE  # 2 GPUs × 2 h = $11.96
    expected = {
        "spend": pytest.approx(held + 2 * TAIL_H * PRICE),  # + 2 cards × 10 min = $11.96 + $1.00 = $12.96
        "idle": pytest.approx(held),
        "productive": pytest.approx(0, abs=1e-9),
        "underused": pytest.approx(0, abs=1e-9),
        "unallocated": pytest.approx(2 * TAIL_H * PRICE),
        "unmeasured": pytest.approx(0, abs=1e-9),
    }
    assert before == expected
    assert figures(ledger) == expected  # the W&B run changed nothing: no card added, no time moved
    assert (job(ledger)["mean_util_pct"], job(ledger)["attribution"]) == (0.0, "exact")
    assert ledger.execute(
        "SELECT gpu_id, parent_gpu_id FROM gpus WHERE gpu_id LIKE 'wandb:%' ORDER BY 1"
    ).fetchall() == [("wandb:g01:0", "GPU-aaaa"), ("wandb:g01:1", "GPU-bbbb")]


def test_a_wandb_run_on_a_host_with_more_cards_does_not_say_which_card(ledger, tmp_path):
    # g01 has 2 cards, job 42 holds 1: W&B's "GPU 0" is the job's first visible device, not host index 0, so
    # its label is no evidence: the job is dealt the lowest free card (by share), the other is unallocated
    for path in (sacct(tmp_path), smi(tmp_path, cards=2), wandb_run(tmp_path)):
        ingest(ledger, path)
    held = 1 * 2 * PRICE
    assert figures(ledger) == {
        "spend": pytest.approx(held + (2 + 2 * TAIL_H) * PRICE),  # the free card's 2 h and both tails unheld
        "idle": pytest.approx(held),
        "productive": pytest.approx(0, abs=1e-9),
        "underused": pytest.approx(0, abs=1e-9),
        "unallocated": pytest.approx((2 + 2 * TAIL_H) * PRICE),  # $5.98 + $1.00 = $6.98
        "unmeasured": pytest.approx(0, abs=1e-9),
    }
    assert job(ledger)["attribution"] == "by_share"
    assert ledger.execute("SELECT gpu_id, evidence FROM host_attribution").fetchall() == [
        ("GPU-aaaa", "dealt")
    ]


def test_wandb_alone_stands_for_the_jobs_card(ledger, tmp_path):
    # no other telemetry of g01: W&B's series is the job's card, as before (12 samples 10:00-11:50, 90 %)
    for path in (sacct(tmp_path), wandb_run(tmp_path)):
        ingest(ledger, path)
    held = 1 * 2 * PRICE
    assert figures(ledger) == {
        "spend": pytest.approx(held),  # the W&B card reports 10:00-12:00, held throughout
        "idle": pytest.approx(0, abs=1e-9),
        "productive": pytest.approx(held),  # 90 % is above the 60 % target
        "underused": pytest.approx(0, abs=1e-9),
        "unallocated": pytest.approx(0, abs=1e-9),
        "unmeasured": pytest.approx(0, abs=1e-9),
    }
    assert ledger.execute("SELECT gpu_id, evidence FROM host_attribution").fetchall() == [
        ("wandb:g01:0", "sample_label")
    ]
    assert ledger.execute("SELECT parent_gpu_id FROM gpus").fetchall() == [(None,)]


@pytest.mark.parametrize("wandb_first", [False, True], ids=["smi-then-wandb", "wandb-then-smi"])
def test_wandb_stands_in_only_while_the_real_card_is_silent(ledger, tmp_path, wandb_first):
    # nvidia-smi logged GPU-aaaa only 10:00-10:50 (6 samples at 0 %, to 11:00); W&B the whole run at 90 %:
    # the first hour is judged from the card (idle), the second from W&B (productive), never both at once
    files = [sacct(tmp_path), smi(tmp_path, minutes=range(0, 60, 10)), wandb_run(tmp_path)]
    for path in files[::-1] if wandb_first else files:
        ingest(ledger, path)
    hour = 1 * 1 * PRICE
    assert figures(ledger) == {
        "spend": pytest.approx(2 * hour),  # one card 10:00-12:00, seen by either view: $5.98
        "idle": pytest.approx(hour),
        "productive": pytest.approx(hour),
        "underused": pytest.approx(0, abs=1e-9),
        "unallocated": pytest.approx(0, abs=1e-9),
        "unmeasured": pytest.approx(0, abs=1e-9),
    }
    assert job(ledger)["mean_util_pct"] == pytest.approx(45.0)  # (6 × 0 + 6 × 90) / 12
    assert ledger.execute(
        "SELECT min(ts), max(ts), count(*) FROM samples WHERE gpu_id = 'wandb:g01:0' AND job_id = 'ci/42'"
    ).fetchall() == [(T(2025, 3, 1, 11), T(2025, 3, 1, 11, 50), 6)]


def test_the_documented_cli_steps(tmp_path):
    """The tester's commands: ingest job.txt; ingest g01.csv --host g01 --tz UTC; summary; ingest the events
    with --job ci/42; summary. Before: $6.48 then $12.46, idle $5.98 then $0."""
    settings = write(tmp_path, "empty.toml", "")
    db = str(tmp_path / "ledger.duckdb")
    events = wandb_run(tmp_path)

    def run(*args: str) -> str:
        done = gpuledger(*args, "--db", db, "--settings", str(settings), env={"TZ": "UTC"})
        assert done.returncode == 0, done.stderr
        return done.stdout

    run("ingest", str(sacct(tmp_path)), "--quiet")
    run("ingest", str(smi(tmp_path)), "--host", "g01", "--tz", "UTC", "--quiet")
    first = json.loads(run("summary", "--json"))
    run("ingest", str(events), "--job", "ci/42", "--quiet")
    second = json.loads(run("summary", "--json"))
    for s in (first, second):
        assert (round(s["spend_usd"], 3), s["idle_usd"]) == (6.478, pytest.approx(5.98))  # 5.98 + 0.498
        assert round(s["waste"]["unallocated_usd"], 3) == 0.498


@pytest.mark.parametrize("wandb_first", [False, True], ids=["wandb-last", "wandb-first"])
def test_a_wandb_host_spelled_as_its_fqdn_is_the_same_host(ledger, tmp_path, wandb_first):
    # W&B writes the machine's hostname; where that is g01.cluster.local and sacct and nvidia-smi say g01,
    # the run is still a view of g01's card: the tester's figures, and the view sits where its card does
    events = wandb_run(tmp_path)
    meta = events.with_name("wandb-metadata.json")
    meta.write_text(
        json.dumps(json.loads(meta.read_text()) | {"host": "g01.cluster.local"}), encoding="utf-8"
    )
    files = [sacct(tmp_path), smi(tmp_path), events]
    for path in files[::-1] if wandb_first else files:
        ingest(ledger, path)
    held = 1 * 2 * PRICE
    assert (figures(ledger)["spend"], figures(ledger)["idle"]) == (
        pytest.approx(held + TAIL_H * PRICE),  # $6.48
        pytest.approx(held),  # $5.98
    )
    assert ledger.execute("SELECT gpu_id, host, parent_gpu_id FROM gpus ORDER BY 1").fetchall() == [
        ("GPU-aaaa", "g01", None),
        ("wandb:g01.cluster.local:0", "g01", "GPU-aaaa"),
    ]
