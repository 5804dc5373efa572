"""Training logs in the shapes other sites write (issue 36, item 2): entries without a step are skipped and
counted, never a reason to refuse the file, and a run's tokens are the latest count of a train or an eval
entry, in every training-log reader.
"""

from __future__ import annotations

import json

from collectors.ingest import ingest_file
from collectors.training_logs import STEPLESS_NOTE
from tests.conftest import write

# A Seq2SeqTrainer run (transformers' run_summarization.py with --do_predict) as trainer_state.json has it,
# written by hand: the script appended its predict_* metrics to log_history after training, with no step.
SEQ2SEQ = {
    "best_metric": None,
    "best_model_checkpoint": None,
    "epoch": 3.0,
    "eval_steps": 500,
    "global_step": 5490,
    "is_hyper_param_search": False,
    "is_local_process_zero": True,
    "is_world_process_zero": True,
    "log_history": [
        {"epoch": 1.0, "grad_norm": 1.873, "learning_rate": 3.3e-05, "loss": 1.912, "step": 1830},
        {"epoch": 3.0, "step": 5490, "total_flos": 7.14e16, "train_loss": 1.654, "train_runtime": 64358.2,
         "train_samples_per_second": 0.512, "train_steps_per_second": 0.085},
        {"predict_gen_len": 61.4, "predict_loss": 1.532, "predict_rouge1": 41.2, "predict_runtime": 812.4,
         "predict_samples_per_second": 12.3, "predict_steps_per_second": 2.05},
    ],
    "logging_steps": 1830,
    "max_steps": 5490,
    "num_train_epochs": 3,
    "save_steps": 500,
    "total_flos": 7.14e16,
    "train_batch_size": 6,
    "trial_name": None,
    "trial_params": None,
}  # fmt: skip


def test_a_seq2seq_state_with_a_stepless_predict_entry_lands_its_run(ledger, tmp_path):
    run = tmp_path / "bart-summarize"
    run.mkdir()
    path = write(run, "trainer_state.json", json.dumps(SEQ2SEQ, indent=2))
    report = ingest_file(ledger, path)
    assert report.rows == {"jobs": 1, "training_runs": 1, "train_log": 1}
    assert report.skipped[STEPLESS_NOTE] == 1  # log_history[2], the predict_* metrics
    assert ledger.execute(
        "SELECT job_id, steps, batch_size, runtime_s, epochs, samples_per_s FROM training_runs"
    ).fetchall() == [("hf:bart-summarize", 5490, 6, 64358.2, 3.0, 0.512)]
    assert ledger.execute("SELECT step, loss FROM train_log").fetchall() == [(1830, 1.912)]
    assert ledger.execute("SELECT state FROM jobs").fetchall() == [("COMPLETED",)]


# TRL's SFTTrainer logs its cumulative training tokens as num_tokens on train entries and eval_num_tokens
# on eval entries (the eval entry's prefix on the same counter): the figures are the issue's.
TRL = {
    "global_step": 2800,
    "epoch": 0.98,
    "log_history": [
        {"epoch": 0.97, "step": 2790, "loss": 1.21, "num_tokens": 11424256.0, "mean_token_accuracy": 0.71},
        {"epoch": 0.98, "step": 2800, "eval_loss": 1.25, "eval_num_tokens": 11465216.0,
         "eval_mean_token_accuracy": 0.70},
    ],
    "train_batch_size": 8,
}  # fmt: skip


def test_trl_eval_num_tokens_is_the_run_count_when_it_is_the_latest(ledger, tmp_path):
    run = tmp_path / "sft"
    run.mkdir()
    ingest_file(ledger, write(run, "trainer_state.json", json.dumps(TRL)))
    # the eval entry at step 2,800 is later than the last train entry (11,424,256 at step 2,790)
    assert ledger.execute("SELECT tokens FROM training_runs").fetchall() == [(11465216.0,)]
    assert ledger.execute("SELECT step, tokens_seen FROM train_log ORDER BY step").fetchall() == [
        (2790, 11424256.0),
        (2800, 11465216.0),
    ]


def test_the_latest_count_wins_over_a_larger_earlier_one(ledger, tmp_path):
    # a count that went down (a resumed run that recounts): the run has the latest, not the largest
    state = {
        "global_step": 20,
        "log_history": [
            {"step": 10, "loss": 2.0, "num_input_tokens_seen": 5000},
            {"step": 20, "eval_loss": 2.1, "eval_num_tokens": 4000},
        ],
    }
    run = tmp_path / "resumed"
    run.mkdir()
    ingest_file(ledger, write(run, "trainer_state.json", json.dumps(state)))
    assert ledger.execute("SELECT tokens FROM training_runs").fetchall() == [(4000.0,)]


def test_llamafactory_lines_without_current_steps_are_skipped_and_counted(ledger, tmp_path):
    lines = [
        {"current_steps": 5, "total_steps": 10, "loss": 2.0, "elapsed_time": "0:00:10", "total_tokens": 1000},
        {"predict_loss": 1.9, "elapsed_time": "0:00:12"},
        {
            "current_steps": 10,
            "total_steps": 10,
            "loss": 1.5,
            "elapsed_time": "0:00:20",
            "total_tokens": 2000,
        },
        {"current_steps": None, "eval_loss": 1.7},
    ]
    run = tmp_path / "lf"
    run.mkdir()
    text = "".join(json.dumps(x) + "\n" for x in lines)
    report = ingest_file(ledger, write(run, "trainer_log.jsonl", text))
    assert report.skipped[STEPLESS_NOTE] == 2
    assert ledger.execute("SELECT steps, tokens, runtime_s, tokens_per_s FROM training_runs").fetchall() == [
        (10, 2000.0, 20.0, 2000 / 20)
    ]
    assert ledger.execute("SELECT count(*) FROM train_log").fetchall() == [(2,)]


def test_lightning_rows_without_a_step_are_skipped_and_counted(ledger, tmp_path):
    text = (
        "epoch,step,train_loss_step,val_loss,epoch_time\n0,9,2.5,,\n0,,,2.4,\n0,19,2.0,,\n0,19,,2.2,100.5\n"
    )
    run = tmp_path / "version_0"
    run.mkdir()
    report = ingest_file(ledger, write(run, "metrics.csv", text))
    assert report.skipped[STEPLESS_NOTE] == 1  # line 3: a val_loss with no step
    assert ledger.execute(
        "SELECT step, loss, eval_loss FROM train_log ORDER BY step, loss NULLS LAST"
    ).fetchall() == [
        (9, 2.5, None),
        (19, 2.0, None),
        (19, None, 2.2),
    ]
    assert ledger.execute("SELECT steps, runtime_s FROM training_runs").fetchall() == [(19, 100.5)]
