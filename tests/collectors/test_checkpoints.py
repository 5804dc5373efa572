"""Checkpoints found in training logs place the tied job's last_checkpoint_ts (collectors/checkpoints.py).

Every expected time is worked out by hand from the job's span and the log's steps; every expected dollar from
the test price sheet (H100 on_demand $4.00/GPU-h, tests/analytics/build.py).
"""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

import pytest

from analytics.waste import job_waste
from collectors.base import IngestOptions
from collectors.checkpoints import elapsed_at, save_steps_checkpoint
from collectors.ingest import ingest_file
from gpuledger.ledger.errors import FormatError
from tests.analytics.build import at, ingest, job, set_test_prices
from tests.conftest import dataset, write

RATE = 4.0  # $/GPU-hour, H100 on_demand in the test sheet
JOB = "c1/7"
FROM_LOG = "lost after the last checkpoint found in the training log"


@pytest.fixture
def con(ledger):
    """A 1-GPU H100 training job from the scheduler (no checkpoint field) that failed after 10 h."""
    set_test_prices(ledger)
    ingest(ledger, jobs=[job(JOB, 0, 600, state="FAILED", source="sacct")])
    return ledger


def hf_state(last_step: int, *, every: int = 50, **extra: object) -> str:
    log = [
        {"epoch": s / 1000, "step": s, "loss": 2.0 - s / 1e4, "learning_rate": 1e-4}
        for s in range(every, last_step + 1, every)
    ]
    return json.dumps({"global_step": last_step, "max_steps": 5000, "epoch": last_step / 1000, **extra, "log_history": log})  # fmt: skip


def checkpoint_ts(con, job_id: str = JOB) -> dt.datetime | None:
    return con.execute("SELECT last_checkpoint_ts FROM jobs WHERE job_id = ?", [job_id]).fetchall()[0][0]


def waste_row(con, job_id: str = JOB) -> dict:
    return next(r for r in job_waste(con).to_dicts() if r["job_id"] == job_id)


def tie(path: Path, **kw: object) -> IngestOptions:
    return IngestOptions(job_id=JOB, **kw)  # type: ignore[arg-type]


def set_mtime(path: Path, when: dt.datetime) -> None:
    epoch = when.replace(tzinfo=dt.UTC).timestamp()
    os.utime(path, (epoch, epoch))


# --- Hugging Face trainer_state.json ---------------------------------------------------------------------


def test_hf_save_steps_worked_example_failed_waste_is_2_of_10(con, tmp_path):
    # 10-h job, save_steps 500, last logged step 1,250 → last save at step ⌊1250/500⌋·500 = 1,000;
    # step time 36,000 s / 1,250 = 28.8 s → checkpoint at 1,000 × 28.8 s = 28,800 s = hour 8.
    run = tmp_path / "run"
    run.mkdir()
    path = write(run, "trainer_state.json", hf_state(1250, save_steps=500))
    report = ingest_file(con, path, opts=tie(path))
    assert report.skipped == {}
    assert checkpoint_ts(con) == at(8 * 60)
    row = waste_row(con)
    cost = 1 * 10 * RATE  # 1 GPU × 10 h × $4 = $40
    assert row["cost_usd"] == pytest.approx(cost)
    assert row["failed_usd"] == pytest.approx(2 / 10 * cost)  # $8: the 2 h after the checkpoint
    assert row["failed_checkpointed_usd"] == pytest.approx(8 / 10 * cost)  # $32 kept
    assert row["failed_basis"] == FROM_LOG

    # the same bytes again: a no-op; the same file with --replace: the same answer, not a second move
    assert ingest_file(con, path, opts=tie(path)).already
    again = ingest_file(con, path, opts=tie(path, replace=True))
    assert again.replaced == [report.ingest_id]
    assert checkpoint_ts(con) == at(8 * 60)
    assert waste_row(con)["failed_usd"] == pytest.approx(8.0)


def test_a_newer_scheduler_record_keeps_the_checkpoint_a_log_placed(con, tmp_path):
    # the 10-h example, then the scheduler reports the job again (the next sacct export or Slurm poll), with
    # no checkpoint field and its end 1 h later (11 h): the checkpoint stays at hour 8, so 3 of 11 h are lost
    run = tmp_path / "run"
    run.mkdir()
    path = write(run, "trainer_state.json", hf_state(1250, save_steps=500))
    ingest_file(con, path, opts=tie(path))
    assert checkpoint_ts(con) == at(8 * 60)
    ingest(con, jobs=[job(JOB, 0, 660, state="FAILED", source="sacct")])
    assert checkpoint_ts(con) == at(8 * 60)
    row = waste_row(con)
    assert row["cost_usd"] == pytest.approx(11 * RATE)  # 1 GPU × 11 h × $4 = $44
    assert row["failed_usd"] == pytest.approx(3 * RATE)  # $12: hours 8–11


def test_hf_newest_checkpoint_folder_wins_over_save_steps(con, tmp_path):
    out = tmp_path / "output_dir"
    for n in (500, 1000):
        (out / f"checkpoint-{n}").mkdir(parents=True)
    write(out / "checkpoint-1000", "trainer_state.json", hf_state(1000, save_steps=300))
    (out / "tmp-checkpoint-1250").mkdir()  # a save in progress (HF renames it when done): not a checkpoint
    write(out, "checkpoint-2000", "not a folder")
    # save_steps 300 alone would say step 1,200; the folders say 1,000 → 1,000/1,250 × 10 h = hour 8
    path = write(out, "trainer_state.json", hf_state(1250, save_steps=300))
    ingest_file(con, path, opts=tie(path))
    assert checkpoint_ts(con) == at(8 * 60)
    assert waste_row(con)["failed_usd"] == pytest.approx(2 * RATE)


def test_hf_checkpoint_file_time_inside_the_job_is_the_checkpoint_time(con, tmp_path):
    out = tmp_path / "output_dir"
    ckpt = out / "checkpoint-1000"
    ckpt.mkdir(parents=True)
    state = write(ckpt, "trainer_state.json", hf_state(1000, save_steps=500))
    set_mtime(state, at(7 * 60 + 30))  # written at hour 7.5 of the job: where training left it
    path = write(out, "trainer_state.json", hf_state(1250, save_steps=500))
    ingest_file(con, path, opts=tie(path))
    assert checkpoint_ts(con) == at(7 * 60 + 30)
    assert waste_row(con)["failed_usd"] == pytest.approx(2.5 * RATE)  # 2.5 h lost × $4


def test_hf_log_that_stops_at_its_checkpoint_places_nothing_and_says_why(con, tmp_path):
    # The newest checkpoint's own trainer_state.json ends at step 1,000: how long the run went on after the
    # save is unknown (the file's time is today, outside the job), so no time is invented.
    ckpt = tmp_path / "output_dir" / "checkpoint-1000"
    ckpt.mkdir(parents=True)
    path = write(ckpt, "trainer_state.json", hf_state(1000, save_steps=500))
    report = ingest_file(con, path, opts=tie(path))
    assert report.skipped == {
        "checkpoint at step 1,000 (checkpoint-1000 folder) not placed in time for job c1/7: the log stops at "
        "that step, so it cannot say how long the run went on after it": 1
    }
    assert checkpoint_ts(con) is None
    row = waste_row(con)
    assert row["failed_usd"] == pytest.approx(10 * RATE)  # the whole run, and it says so
    assert row["failed_basis"] == "no checkpoint known: whole run lost"
    # the same file where training wrote it (file time at hour 6): placed
    set_mtime(path, at(6 * 60))
    ingest_file(con, path, opts=tie(path, replace=True))
    assert checkpoint_ts(con) == at(6 * 60)
    assert waste_row(con)["failed_usd"] == pytest.approx(4 * RATE)


def test_hf_checkpoint_state_with_llamafactory_elapsed_time_in_its_output_dir(con, tmp_path):
    # LLaMA-Factory ran the Trainer: its trainer_log.jsonl in output_dir logs 9 s a step, so the newest
    # checkpoint's own state (which stops at step 1,000) is placed at 1,000 × 9 s = 9,000 s = minute 150.
    out = tmp_path / "output_dir"
    (out / "checkpoint-1000").mkdir(parents=True)
    lines = [
        json.dumps({"current_steps": s, "total_steps": 5000, "elapsed_time": _hms(9 * s)})
        for s in (500, 1000, 1100)
    ]
    write(out, "trainer_log.jsonl", "\n".join(lines) + "\nnot json\n")  # a line it cannot read is left out
    path = write(out / "checkpoint-1000", "trainer_state.json", hf_state(1000, save_steps=500))
    assert ingest_file(con, path, opts=tie(path)).skipped == {}
    assert checkpoint_ts(con) == at(150)
    assert waste_row(con)["failed_usd"] == pytest.approx((600 - 150) / 60 * RATE)  # 7.5 h lost


def test_a_rejected_log_leaves_the_job_untouched(con, tmp_path):
    state = json.loads(hf_state(1250, save_steps=500))
    state["log_history"].append({"step": -5, "loss": 1.0})  # a negative step: the whole file is rejected
    path = write(tmp_path, "trainer_state.json", json.dumps(state))
    with pytest.raises(FormatError, match=r"trainer_state\.json"):
        ingest_file(con, path, opts=tie(path))
    assert checkpoint_ts(con) is None
    assert con.execute("SELECT count(*) FROM ingests").fetchall() == [(1,)]  # only the job's own
    # with --skip-bad-rows the rest lands, and the checkpoint with it
    ingest_file(con, path, opts=tie(path, skip_bad_rows=True))
    assert checkpoint_ts(con) == at(8 * 60)


def test_hf_job_not_in_the_ledger_yet_is_a_note_and_no_row(ledger, tmp_path):
    path = write(tmp_path, "trainer_state.json", hf_state(1250, save_steps=500))
    report = ingest_file(ledger, path, opts=IngestOptions(job_id="c1/99"))
    assert report.skipped == {
        "checkpoint at step 1,000 (save_steps 500) not placed in time for job c1/99: the job is not in the "
        "ledger yet (ingest its record, then this log with --replace)": 1
    }
    assert ledger.execute("SELECT count(*) FROM jobs").fetchall() == [(0,)]


def test_hf_without_job_option_places_nothing(ledger, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    path = write(run, "trainer_state.json", hf_state(1250, save_steps=500))
    report = ingest_file(ledger, path)
    assert report.skipped == {}
    assert ledger.execute("SELECT job_id, start_ts, last_checkpoint_ts FROM jobs").fetchall() == [
        ("hf:run", None, None)
    ]


def test_a_jobs_table_checkpoint_is_never_moved_later(ledger, tmp_path):
    set_test_prices(ledger)
    jobs = write(
        tmp_path,
        "jobs.csv",
        "job_id,user,team,cluster,gpu_model,gpu_count,start,end,state,kind,last_checkpoint\n"
        "early,a,t,c1,H100-SXM-80GB,1,2025-03-03T00:00,2025-03-03T10:00,FAILED,training,2025-03-03T02:00\n"
        "late,a,t,c1,H100-SXM-80GB,1,2025-03-03T00:00,2025-03-03T10:00,FAILED,training,2025-03-03T09:00\n",
    )
    ingest_file(ledger, jobs)
    for job_id in ("early", "late"):
        d = tmp_path / job_id
        d.mkdir()
        path = write(
            d, "trainer_state.json", hf_state(1250, save_steps=500, trial_name=job_id)
        )  # says hour 8
        ingest_file(ledger, path, opts=IngestOptions(job_id=job_id))
    assert checkpoint_ts(ledger, "early") == dt.datetime(2025, 3, 3, 2)  # hour 2 kept: the log is later
    assert checkpoint_ts(ledger, "late") == dt.datetime(2025, 3, 3, 8)  # the log shows an earlier one
    assert waste_row(ledger, "early")["failed_usd"] == pytest.approx(8 * RATE)
    assert waste_row(ledger, "early")["failed_basis"] == "lost after the last checkpoint"


# --- LLaMA-Factory trainer_log.jsonl ---------------------------------------------------------------------


def _hms(seconds: int) -> str:
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def test_llamafactory_elapsed_time_places_the_checkpoint(con, tmp_path):
    # logged every 100 steps, 6 s a step → elapsed 6,000 s at step 1,000; checkpoint-1000 beside the log
    out = tmp_path / "output_dir"
    (out / "checkpoint-1000").mkdir(parents=True)
    lines = [
        json.dumps({"current_steps": s, "total_steps": 5000, "loss": 1.0, "epoch": s / 1000,
                    "elapsed_time": _hms(6 * s), "remaining_time": "1:00:00"})
        for s in range(100, 1201, 100)
    ]  # fmt: skip
    path = write(out, "trainer_log.jsonl", "\n".join(lines) + "\n")
    report = ingest_file(con, path, opts=tie(path))
    assert report.format == "llamafactory_log" and report.skipped == {}
    assert checkpoint_ts(con) == at(100)  # start + 6,000 s
    assert waste_row(con)["failed_usd"] == pytest.approx((600 - 100) / 60 * RATE)  # 500 min lost


def test_llamafactory_save_steps_from_the_trainer_state_beside_it(con, tmp_path):
    out = tmp_path / "output_dir"
    out.mkdir()
    write(out, "trainer_state.json", json.dumps({"global_step": 1000, "save_steps": 400, "log_history": []}))
    lines = [
        json.dumps({"current_steps": s, "total_steps": 5000, "elapsed_time": _hms(3 * s)})
        for s in (100, 700, 1000)
    ]
    path = write(out, "trainer_log.jsonl", "\n".join(lines) + "\n")
    ingest_file(con, path, opts=tie(path))
    # save_steps 400 by step 1,000 → step 800, between the logged 700 (2,100 s) and 1,000 (3,000 s):
    # 2,100 + 900 × 100/300 = 2,400 s → minute 40
    assert checkpoint_ts(con) == at(40)


# --- PyTorch Lightning metrics.csv + ModelCheckpoint files -----------------------------------------------


def _lightning_run(tmp_path: Path, ckpts: list[str]) -> Path:
    version = tmp_path / "lightning_logs" / "version_0"
    (version / "checkpoints").mkdir(parents=True)
    for name in ckpts:
        (version / "checkpoints" / name).write_bytes(b"\x00")
    rows = [
        f"{(s - 1) // 500},{s},{2.0 - s / 1e4}," for s in range(50, 1501, 50)
    ]  # epochs 0–2, steps to 1,500
    rows += [f"{e},{500 * (e + 1)},,{1.5 - e / 10}" for e in range(3)]  # epoch-end validation rows
    return write(version, "metrics.csv", "epoch,step,train_loss_step,val_loss\n" + "\n".join(rows) + "\n")


def test_lightning_model_checkpoint_step_in_the_file_name(con, tmp_path):
    path = _lightning_run(tmp_path, ["epoch=0-step=500.ckpt", "epoch=1-step=1000.ckpt", "last.ckpt"])
    report = ingest_file(con, path, opts=tie(path))
    assert report.format == "lightning_csv" and report.skipped == {}
    # step 1,000 of 1,500 logged steps in a 600-min job → minute 400
    assert checkpoint_ts(con) == at(400)
    assert waste_row(con)["failed_usd"] == pytest.approx(200 / 60 * RATE)


def test_lightning_epoch_only_name_stands_for_that_epochs_last_step(con, tmp_path):
    path = _lightning_run(tmp_path, ["epoch=1.ckpt"])  # epoch 1's last logged step is 1,000
    ingest_file(con, path, opts=tie(path))
    assert checkpoint_ts(con) == at(400)


def test_lightning_last_ckpt_alone_names_no_step(con, tmp_path):
    path = _lightning_run(tmp_path, ["last.ckpt"])
    assert ingest_file(con, path, opts=tie(path)).skipped == {}
    assert checkpoint_ts(con) is None


# --- the rules as functions ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("save_steps", "strategy", "max_steps", "last", "step"),
    [
        (500, None, None, 1250, 1000),
        (500, "steps", None, 1250, 1000),
        (500, "no", None, 1250, None),  # saving was off
        (500, "epoch", None, 1250, None),  # saves per epoch: save_steps is not the schedule
        (0.1, None, 5000, 1250, 1000),  # a ratio of max_steps: every ⌈5000 × 0.1⌉ = 500 steps
        (500, None, None, 499, None),  # no save yet
        (None, None, None, 1250, None),
        (float("inf"), None, None, 1250, None),
    ],
)
def test_save_steps_schedule(save_steps, strategy, max_steps, last, step):
    ckpt = save_steps_checkpoint(save_steps, strategy, max_steps, last)
    assert (ckpt.step if ckpt else None) == step


def test_elapsed_at_is_linear_between_logged_steps():
    logged = [(100, 50.0), (200, 150.0)]
    assert elapsed_at(100, logged) == 50.0
    assert elapsed_at(150, logged) == 100.0  # halfway between 50 s and 150 s
    assert elapsed_at(50, logged) == 25.0  # from (0, 0) to the first entry
    assert elapsed_at(201, logged) is None  # past the log: unknown


# --- the real files ---------------------------------------------------------------------------------------


def test_real_llamafactory_log_with_the_trainer_state_beside_it(con):
    # luojiu: save_steps 100 in the trainer_state.json beside the log, last step 8,712 → step 8,700; its
    # elapsed_time, read here straight from the file's line for step 8,700, places it after the job's start.
    path = dataset("hf-trainer/luojiu-7b-qlora-a10/trainer_log.jsonl")
    line = next(e for e in map(json.loads, path.read_text().splitlines()) if e["current_steps"] == 8700)
    days, hms = line["elapsed_time"].split(" days, ")  # "4 days, 7:17:…"
    h, m, s = (int(x) for x in hms.split(":"))
    elapsed_s = int(days) * 86400 + h * 3600 + m * 60 + s
    ingest(con, jobs=[job("c1/8", 0, 5 * 24 * 60, state="FAILED", source="sacct")])  # 5 days
    report = ingest_file(con, path, opts=IngestOptions(job_id="c1/8"))
    assert report.skipped == {}
    assert checkpoint_ts(con, "c1/8") == at(0) + dt.timedelta(seconds=elapsed_s)
    lost_h = 5 * 24 - elapsed_s / 3600
    assert waste_row(con, "c1/8")["failed_usd"] == pytest.approx(lost_h * RATE)


def test_real_hf_trainer_state_save_steps_timed_by_the_llamafactory_log_beside_it(con):
    # mistral7b: save_steps 500, global_step 8,660 → step 8,500; LLaMA-Factory ran the Trainer, so the
    # trainer_log.jsonl beside it times that step (its line for step 8,500, read here by hand)
    path = dataset("hf-trainer/mistral7b-lora-translator/trainer_state.json")
    log = path.with_name("trainer_log.jsonl").read_text().splitlines()
    line = next(e for e in map(json.loads, log) if e["current_steps"] == 8500)
    h, m, s = (int(x) for x in line["elapsed_time"].split(":"))  # "5:33:…", under a day
    ingest_file(con, path, opts=tie(path))
    assert checkpoint_ts(con) == at(0) + dt.timedelta(seconds=h * 3600 + m * 60 + s)
