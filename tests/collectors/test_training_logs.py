"""Training logs: HF trainer_state.json, LLaMA-Factory trainer_log.jsonl, Lightning metrics.csv, W&B run files."""

from __future__ import annotations

import datetime as dt
import json
import re

import pytest

from collectors.base import IngestOptions
from collectors.ingest import ingest_file
from gpuledger.ledger.errors import FormatError
from tests.conftest import dataset, write

T = dt.datetime


def one(ledger, sql: str) -> tuple:
    rows = ledger.execute(sql).fetchall()
    assert len(rows) == 1, rows
    return rows[0]


# --- Hugging Face trainer_state.json ---------------------------------------------------------------------

NEW_STATE = {
    "global_step": 30,
    "epoch": 1.5,
    "num_input_tokens_seen": 61440,
    "train_batch_size": 4,
    "total_flos": 1.5e15,
    "log_history": [
        {"epoch": 0.5, "step": 10, "loss": 2.5, "learning_rate": 1e-4, "grad_norm": 3.0, "num_input_tokens_seen": 20480},
        {"epoch": 1.0, "step": 20, "eval_loss": 2.1, "eval_runtime": 3.2},
        {"epoch": 1.0, "step": 20, "loss": 2.0, "learning_rate": 5e-5, "num_input_tokens_seen": 40960},
        {"epoch": 1.5, "step": 30, "train_runtime": 120.0, "train_samples_per_second": 8.0, "train_loss": 2.2,
         "total_flos": 1.5e15},
    ],
}  # fmt: skip


def test_hf_new_schema_run_and_log(ledger, tmp_path):
    run = tmp_path / "my-run"
    run.mkdir()
    path = write(run, "trainer_state.json", json.dumps(NEW_STATE))
    report = ingest_file(ledger, path)
    assert report.format == "hf_trainer_state"
    assert report.rows == {"jobs": 1, "training_runs": 1, "train_log": 3}  # the summary entry is the run row
    assert one(
        ledger,
        "SELECT job_id, source, batch_size, tokens, epochs, steps, runtime_s, samples_per_s, total_flos FROM training_runs",
    ) == ("hf:my-run", "hf_trainer", 4, 61440.0, 1.5, 30, 120.0, 8.0, 1.5e15)
    assert ledger.execute(
        "SELECT step, loss, eval_loss, learning_rate, tokens_seen FROM train_log ORDER BY step, loss NULLS FIRST"
    ).fetchall() == [
        (10, 2.5, None, 1e-4, 20480.0),
        (20, None, 2.1, None, None),
        (20, 2.0, None, 5e-5, 40960.0),
    ]
    assert one(ledger, "SELECT job_id, kind, gpu_count, state, start_ts FROM jobs") == (
        "hf:my-run", "training", 0.0, "COMPLETED", None,
    )  # fmt: skip


def test_hf_job_option_ties_the_run_and_writes_no_job(ledger, tmp_path):
    state = {**NEW_STATE, "num_input_tokens_seen": 0}  # 0 = token counting off, not zero tokens
    state["log_history"] = [{"epoch": 0.1, "step": 5, "loss": 1.0, "num_input_tokens_seen": 0}]
    path = write(tmp_path, "trainer_state.json", json.dumps(state))
    report = ingest_file(ledger, path, opts=IngestOptions(job_id="ci/100"))
    assert "jobs" not in report.rows
    assert one(ledger, "SELECT job_id, tokens, runtime_s FROM training_runs") == ("ci/100", None, None)
    assert one(ledger, "SELECT job_id, tokens_seen FROM train_log") == ("ci/100", None)


def test_hf_entry_without_step_is_skipped_and_counted(ledger, tmp_path):
    # was an error for the whole file (issue 36): an entry without a step is no point of the curve
    state = {**NEW_STATE, "log_history": [{"step": 1, "loss": 1.0}, {"loss": 2.0}, "not an entry"]}
    path = write(tmp_path, "trainer_state.json", json.dumps(state))
    report = ingest_file(ledger, path)
    assert report.skipped["log entries without a step (skipped)"] == 2
    assert ledger.execute("SELECT step, loss FROM train_log").fetchall() == [(1, 1.0)]


# A trainer_state.json as the Trainer writes it (indent 2), with a string that holds JSON punctuation: the
# line numbers in the tests below are counted by hand from this text.
HF_LINES = """{
  "global_step": 20,
  "log_history": [
    {
      "epoch": 0.5,
      "note": "a ], { and \\" , \\"x\\": [ inside a string",
      "loss": 2.5,
      "step": 10
    },
    {
      "epoch": 1.0,
      "loss": LOSS,
      "step": STEP
    },
    {
      "epoch": 1.0,
      "step": 20,
      "train_runtime": RUNTIME
    }
  ],
  "train_batch_size": 4
}
"""


def hf_lines(loss="2.0", step="20", runtime="120.0") -> str:
    return HF_LINES.replace("LOSS", loss).replace("STEP", step).replace("RUNTIME", runtime)


def test_hf_lines_helper_text_is_valid_json():
    assert json.loads(hf_lines())["log_history"][0]["note"] == 'a ], { and " , "x": [ inside a string'


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        # log_history[1] starts on line 10; its "loss" key is on line 12, its "step" key on line 13
        ({"loss": "NaN"}, "trainer_state.json:12: loss is nan, not a finite number"),
        ({"step": "NaN"}, "trainer_state.json:13: log_history[1] step is nan, not a finite number"),
        ({"step": "1e30"}, "trainer_state.json:13: log_history[1] step is 1e+30, too large for a step count"),
        # the run's figure comes from the summary entry (log_history[2]): train_runtime is on line 18
        ({"runtime": "-20388"}, "trainer_state.json:18: train_runtime is -20,388 s, below 0 s"),
    ],
)
def test_hf_implausible_value_names_the_line_of_its_key(ledger, tmp_path, edit, message):
    path = write(tmp_path, "trainer_state.json", hf_lines(**edit))
    with pytest.raises(FormatError, match=re.escape(message) + "$"):
        ingest_file(ledger, path, fmt="hf_trainer_state")
    assert ledger.execute("SELECT count(*) FROM ingests").fetchall() == [(0,)]


def test_hf_truncated_json_is_an_error(ledger, tmp_path):
    text = json.dumps(NEW_STATE, indent=1)
    path = write(tmp_path, "trainer_state.json", text[: len(text) // 2])
    with pytest.raises(FormatError, match="not valid JSON"):
        ingest_file(ledger, path, fmt="hf_trainer_state")
    assert ledger.execute("SELECT count(*) FROM ingests").fetchall() == [(0,)]


def test_hf_real_old_schema_luojiu(ledger):
    path = dataset("hf-trainer/luojiu-7b-qlora-a10/trainer_state.json")
    report = ingest_file(ledger, path)
    # 1,743 log_history entries: 1,742 loss entries every 5 steps + the final summary
    assert report.rows == {"jobs": 1, "training_runs": 1, "train_log": 1742}
    assert one(ledger, "SELECT steps, runtime_s, samples_per_s, total_flos, tokens, batch_size FROM training_runs") == (
        8712, 371992.1593, 0.749, 1.13456296708811e19, None, None,  # old schema: no tokens, no batch size
    )  # fmt: skip
    assert one(ledger, "SELECT min(step), max(step), max(epoch) FROM train_log") == (5, 8710, 3.0)


def test_hf_real_new_schema_mistral(ledger):
    path = dataset("hf-trainer/mistral7b-lora-translator/trainer_state.json")
    ingest_file(ledger, path)
    assert one(ledger, "SELECT batch_size, tokens, epochs, steps, runtime_s, samples_per_s FROM training_runs") == (
        1, None, 4.0, 8660, 20387.7129, 6.796,  # num_input_tokens_seen 0 in the file → unknown
    )  # fmt: skip
    assert one(ledger, "SELECT count(*), min(step), max(step) FROM train_log") == (866, 10, 8660)


# --- LLaMA-Factory trainer_log.jsonl ---------------------------------------------------------------------

LF_LINES = [
    '{"current_steps": 5, "total_steps": 10, "loss": 1.5, "learning_rate": 1e-4, "epoch": 0.5, "elapsed_time": "0:03:29", "remaining_time": "0:03:29"}',
    '{"current_steps": 10, "total_steps": 10, "loss": 1.2, "learning_rate": 0.0, "epoch": 1.0, "elapsed_time": "1 day, 2:00:01", "remaining_time": "0:00:00", "total_tokens": 5000}',
]


def test_llamafactory_human_durations(ledger, tmp_path):
    path = write(tmp_path, "trainer_log.jsonl", "\n".join(LF_LINES) + "\n")
    report = ingest_file(ledger, path)
    assert report.format == "llamafactory_log"
    assert ledger.execute("SELECT step, elapsed_s, loss FROM train_log ORDER BY step").fetchall() == [
        (5, 3 * 60 + 29.0, 1.5),
        (10, 86400 + 2 * 3600 + 1.0, 1.2),  # "1 day, 2:00:01"
    ]
    assert one(ledger, "SELECT steps, runtime_s, tokens, tokens_per_s FROM training_runs") == (
        10, 93601.0, 5000.0, pytest.approx(5000 / 93601),
    )  # fmt: skip


def test_llamafactory_bad_duration_names_its_line(ledger, tmp_path):
    bad = LF_LINES[1].replace("1 day, 2:00:01", "soon")
    path = write(tmp_path, "trainer_log.jsonl", "\n".join([LF_LINES[0], bad]) + "\n")
    with pytest.raises(
        FormatError, match=re.escape('trainer_log.jsonl:2: elapsed_time is not a duration: "soon"')
    ):
        ingest_file(ledger, path)


def test_llamafactory_run_figure_names_the_line_it_came_from(ledger, tmp_path):
    # the run's runtime is the largest elapsed_time: 99999 days = 99999 * 86400 s, on line 2
    bad = LF_LINES[1].replace("1 day, 2:00:01", "99999 days, 0:00:00")
    path = write(tmp_path, "trainer_log.jsonl", "\n".join([LF_LINES[0], bad]) + "\n")
    with pytest.raises(
        FormatError,
        match=re.escape(
            "trainer_log.jsonl:2: elapsed_time is 8,639,913,600 s, longer than thresholds.max_job_days"
        ),
    ):
        ingest_file(ledger, path)


def test_llamafactory_real_luojiu(ledger):
    path = dataset("hf-trainer/luojiu-7b-qlora-a10/trainer_log.jsonl")
    report = ingest_file(ledger, path)
    assert report.rows["train_log"] == 1743
    # last line: current_steps 8712, elapsed_time "4 days, 7:19:52" = 4*86400 + 7*3600 + 19*60 + 52
    assert one(ledger, "SELECT job_id, steps, runtime_s FROM training_runs") == (
        "llamafactory:luojiu-7b-qlora-a10", 8712, 4 * 86400 + 7 * 3600 + 19 * 60 + 52.0,
    )  # fmt: skip
    assert one(ledger, "SELECT state FROM jobs") == ("COMPLETED",)


# --- Lightning CSVLogger ---------------------------------------------------------------------------------

PL_CSV = (
    "epoch,epoch_time,step,train_loss_step,train_loss_epoch,val_loss,lr-AdamW\n"
    "0,,49,7.5,,,0.001\n"
    "0,,99,7.0,,,0.0009\n"
    "0,,99,,,6.8,\n"
    "0,100.5,99,,7.2,,\n"
    "1,,149,6.5,,,0.0008\n"
    "1,99.5,199,,6.4,,\n"
)


def test_lightning_sparse_rows_and_hparams(ledger, tmp_path):
    run = tmp_path / "version_3"
    run.mkdir()
    path = write(run, "metrics.csv", PL_CSV)
    write(run, "hparams.yaml", "d_model: 512\nnum_layers: 6\nmax_seq_len: 256\nlr: 0.001\nnested:\n  a: 1\n")
    report = ingest_file(ledger, path)
    assert report.format == "lightning_csv"
    assert report.skipped == {"epoch-summary rows (folded into the run)": 2}
    assert ledger.execute("SELECT step, epoch, loss, eval_loss, learning_rate FROM train_log").fetchall() == [
        (49, 0.0, 7.5, None, 0.001),
        (99, 0.0, 7.0, None, 0.0009),
        (99, 0.0, None, 6.8, None),
        (149, 1.0, 6.5, None, 0.0008),
    ]
    assert one(ledger, "SELECT job_id, epochs, steps, runtime_s, hidden_size, n_layers, seq_len FROM training_runs") == (
        "lightning:version_3", 2.0, 199, 200.0, 512, 6, 256,  # epochs 0..1; runtime 100.5 + 99.5
    )  # fmt: skip


def test_lightning_bad_value_names_its_line(ledger, tmp_path):
    path = write(tmp_path, "metrics.csv", PL_CSV.replace("7.0,,,0.0009", "seven,,,0.0009"))
    with pytest.raises(
        FormatError, match=re.escape('metrics.csv:3: column "train_loss_step" is not a number: "seven"')
    ):
        ingest_file(ledger, path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # a line cut short: 3 values where the header has 7 (line 4)
        (
            PL_CSV.replace("0,,99,,,6.8,\n", "0,,99\n"),
            "metrics.csv:4: not valid CSV: 3 values where the header has 7 (a truncated or mixed line?)",
        ),
        # CRLF written twice (\r\r\n): the stray \r is on the header line already
        (
            PL_CSV.replace("\n", "\r\r\n"),
            "metrics.csv:1: not valid CSV: a stray carriage return (\\r) inside the line",
        ),
        # the run's epochs is the largest epoch + 1: inf, from line 6
        (PL_CSV.replace("1,,149,", "inf,,149,"), "metrics.csv:6: epochs is inf, not a finite number"),
    ],
)
def test_lightning_layout_and_run_figures_name_their_line(ledger, tmp_path, text, message):
    path = write(tmp_path, "metrics.csv", text)
    with pytest.raises(FormatError, match=re.escape(message) + "$"):
        ingest_file(ledger, path, fmt="lightning_csv")
    assert ledger.execute("SELECT count(*) FROM ingests").fetchall() == [(0,)]


def test_lightning_blank_line_inside_a_real_log_names_its_line(ledger, tmp_path):
    # the fuzzer's case: 300 lines of the real log (CRLF line ends) with one blank line moved in, where
    # DuckDB's sniffer can only say it found no dialect; the blank line is line 134
    real = dataset("lightning-csvlogger/slm_training_version_0_metrics.csv").read_bytes().split(b"\n")[:300]
    lines = [*real[:133], b"", *real[133:]]
    path = tmp_path / "metrics.csv"
    path.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(
        FormatError,
        match=re.escape(
            "metrics.csv:134: not valid CSV: an empty line inside the table (a blank or broken line)"
        )
        + "$",
    ):
        ingest_file(ledger, path, fmt="lightning_csv")


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("a,b\n1,2\n3,4\n\n\n", None),  # blank lines at the end are no problem
        ("\ufeffa,b\r\n1,2\r\n", None),  # a BOM and CRLF line ends are no problem
        ('a,b\n1,"two\nlines"\n3,4\n', None),  # a quoted value may hold a line break
        ('a,b\n1,2\n3,"4\n5,6\n', (3, 'a quote (") that is never closed')),
        ("a,b\n1,2\n\n3,4\n", (3, "an empty line inside the table (a blank or broken line)")),
        ("a,b\n1,2,3\n", (2, "3 values where the header has 2 (a truncated or mixed line?)")),
        ('a,b\n1,"2"x\n', (2, "not well-formed CSV (a stray quote or a broken line)")),
    ],
)
def test_csv_layout_problem_finds_the_first_line_that_breaks_the_layout(tmp_path, text, found):
    from collectors.lines import csv_layout_problem

    path = tmp_path / "m.csv"
    path.write_bytes(text.encode("utf-8"))
    assert csv_layout_problem(path) == found


def test_json_lines_counts_entries_of_any_kind_and_skips_nested_lists(tmp_path):
    from collectors.json_lines import json_lines

    path = tmp_path / "s.json"
    # line 1 "{", 2 "a", 3 "log_history": [, 4 the scalar 7, 5-6 an object with a nested list, 7 "],", 8 "b"
    path.write_text('{\n"a": [1, 2],\n"log_history": [\n7,\n{"x": [1, {"y": 2}],\n "z": NaN}\n],\n"b": 1}\n')
    found = json_lines(path, "log_history")
    assert found is not None
    assert found.keys == {"a": 2, "log_history": 3, "b": 8}
    assert found.items == [(4, {}), (5, {"x": 5, "z": 6})]


def test_lightning_real_slm(ledger):
    path = dataset("lightning-csvlogger/slm_training_version_0_metrics.csv")
    report = ingest_file(ledger, path)
    # 2,834 data rows: 10 epoch-summary rows, the rest step or validation rows
    assert report.rows["train_log"] == 2834 - 10
    row = one(ledger, "SELECT epochs, steps, hidden_size, n_layers, seq_len, runtime_s FROM training_runs")
    assert row[:5] == (10.0, 140739, 768, 12, 128)  # from hparams.yaml: d_model 768, 12 layers, seq 128
    assert 10 * 2400 < row[5] < 10 * 2520  # sum of ten epoch_time values of ≈2,400–2,520 s
    assert one(ledger, "SELECT count(*) FROM train_log WHERE eval_loss IS NOT NULL")[0] == 10


# --- W&B -------------------------------------------------------------------------------------------------


def test_wandb_events_both_key_styles(ledger, tmp_path):
    run = tmp_path / "run-20250101_000000-abc" / "files"
    run.mkdir(parents=True)
    lines = [
        {"system.gpu.0.gpu": 50, "system.gpu.1.gpu": 10, "system.gpu.0.powerWatts": 200.5, "_timestamp": 1735689600},
        {"system/gpu.0.gpu": 60, "system/gpu.1.gpu": 0, "system/gpu.0.memoryAllocatedBytes": 2147483648,
         "system/gpu.0.temp": 55, "_timestamp": 1735689630.0},
        {"system.cpu": 3.0, "_timestamp": 1735689660},
    ]  # fmt: skip
    path = write(run, "wandb-events.jsonl", "\n".join(json.dumps(x) for x in lines) + "\n")
    write(run, "wandb-metadata.json", json.dumps({"host": "node7", "gpu": "NVIDIA A100-SXM4-80GB", "gpu_count": 2,
                                                  "startedAt": "2025-01-01T00:00:00.000000", "state": "finished"}))  # fmt: skip
    report = ingest_file(ledger, path)
    assert report.format == "wandb_events"
    assert report.skipped == {"lines without GPU metrics": 1}
    assert ledger.execute(
        "SELECT ts, gpu_id, util_pct, power_w, mem_used_mib, temp_c, job_id FROM samples ORDER BY ts, gpu_id"
    ).fetchall() == [
        (T(2025, 1, 1), "wandb:node7:0", 50.0, 200.5, None, None, "wandb:run-20250101_000000-abc"),
        (T(2025, 1, 1), "wandb:node7:1", 10.0, None, None, None, "wandb:run-20250101_000000-abc"),
        (T(2025, 1, 1, 0, 0, 30), "wandb:node7:0", 60.0, None, 2048.0, 55.0, "wandb:run-20250101_000000-abc"),
        (T(2025, 1, 1, 0, 0, 30), "wandb:node7:1", 0.0, None, None, None, "wandb:run-20250101_000000-abc"),
    ]  # 2147483648 B / 1048576 = 2048 MiB
    assert one(ledger, "SELECT gpu_model, gpu_count, start_ts, end_ts, state FROM jobs") == (
        "A100-80GB", 2.0, T(2025, 1, 1), T(2025, 1, 1, 0, 0, 30), "COMPLETED",  # no heartbeat: last sample
    )  # fmt: skip
    assert ledger.execute("SELECT gpu_id, model FROM gpus ORDER BY 1").fetchall() == [
        ("wandb:node7:0", "A100-80GB"),
        ("wandb:node7:1", "A100-80GB"),
    ]


def test_wandb_events_bad_timestamp_names_its_line(ledger, tmp_path):
    path = write(
        tmp_path, "wandb-events.jsonl", '{"system.gpu.0.gpu": 1, "_timestamp": 1}\n{"system.gpu.0.gpu": 1}\n'
    )
    with pytest.raises(FormatError, match=re.escape("wandb-events.jsonl:2: no numeric")):
        ingest_file(ledger, path)
    assert ledger.execute("SELECT count(*) FROM samples").fetchall() == [(0,)]


def test_wandb_real_colab_t4(ledger):
    path = dataset("wandb/spaceinvaders-colab-T4/wandb-events.jsonl")
    report = ingest_file(ledger, path)
    assert report.rows["samples"] == 18  # 18 lines, one GPU
    first_ts = dt.datetime.fromtimestamp(1582070941, dt.UTC).replace(tzinfo=None)  # first _timestamp
    # from the file: system.gpu.0.gpu ranges 3.87–7.13 %; the idle-waste case
    assert one(ledger, "SELECT min(ts), min(util_pct), max(util_pct), count(DISTINCT gpu_id) FROM samples") == (
        first_ts, pytest.approx(3.87), pytest.approx(7.13), 1,
    )  # fmt: skip
    assert one(ledger, "SELECT power_w, temp_c FROM samples ORDER BY ts LIMIT 1") == pytest.approx(
        (27.79, 49.93)
    )  # FLOAT columns
    assert one(ledger, "SELECT gpu_id, model FROM gpus") == ("wandb:e50231ccd8dd:0", "T4")
    assert one(ledger, "SELECT job_id, gpu_model, gpu_count, start_ts, name FROM jobs") == (
        "wandb:spaceinvaders-colab-T4", "T4", 1.0, T(2020, 2, 19, 0, 8, 33, 249681), "apricot-fire-21",
    )  # fmt: skip
    assert ingest_file(ledger, path).already


def test_wandb_real_metadata(ledger):
    path = dataset("wandb/spaceinvaders-colab-T4/wandb-metadata.json")
    report = ingest_file(ledger, path)
    assert report.format == "wandb_metadata"
    assert one(ledger, "SELECT gpu_model, gpu_count, start_ts, end_ts, user_name, project FROM jobs") == (
        "T4", 1.0, T(2020, 2, 19, 0, 8, 33, 249681), T(2020, 2, 19, 0, 17, 9, 330135), "root",
        "spaceinvaders-challenge",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("key", "value", "line"),
    [("startedAt", "1970-02-19T00:08:33.249681", 5), ("heartbeatAt", "0001-02-19T00:17:09.330135", 24)],
)
def test_wandb_metadata_time_out_of_range_names_the_line_of_its_key(ledger, tmp_path, key, value, line):
    # the real file with one time off: startedAt is on line 5, heartbeatAt on line 24 (counted by hand)
    real = dataset("wandb/spaceinvaders-colab-T4/wandb-metadata.json").read_text(encoding="utf-8")
    run = tmp_path / "run-1"
    run.mkdir()
    old = json.loads(real)[key]
    path = write(run, "wandb-metadata.json", real.replace(old, value))
    shown = value.replace("T", " ")
    with pytest.raises(
        FormatError,
        match=rf"wandb-metadata\.json:{line}: {key} is {re.escape(shown)}, not a time between 2000-01-01 and ",
    ):
        ingest_file(ledger, path)
    assert ledger.execute("SELECT count(*) FROM ingests").fetchall() == [(0,)]


# --- real-file shapes that went wrong (issue 8) -----------------------------------------------------------


def test_trl_sft_num_tokens_are_read_as_tokens(ledger, tmp_path):
    # TRL's SFTTrainer logs a cumulative "num_tokens"; num_input_tokens_seen stays 0 (counting off)
    state = {
        "global_step": 20,
        "epoch": 1.0,
        "num_input_tokens_seen": 0,
        "train_batch_size": 8,
        "log_history": [
            {"epoch": 0.5, "step": 10, "loss": 1.9, "learning_rate": 2e-5, "num_tokens": 163840.0},
            {"epoch": 1.0, "step": 20, "loss": 1.7, "learning_rate": 1e-5, "num_tokens": 327680.0},
            {"epoch": 1.0, "step": 20, "train_runtime": 64.0, "train_samples_per_second": 2.5},
        ],
    }
    run = tmp_path / "sft-out"
    run.mkdir()
    ingest_file(ledger, write(run, "trainer_state.json", json.dumps(state)))
    assert ledger.execute("SELECT step, tokens_seen FROM train_log ORDER BY step").fetchall() == [
        (10, 163840.0),
        (20, 327680.0),
    ]
    # the run's tokens: the last cumulative count, 20 steps × 8 samples × 2048 tokens = 327,680
    assert one(ledger, "SELECT tokens FROM training_runs") == (20 * 8 * 2048,)


NESTED_HPARAMS = """\
cfg:
  data:
    batch_size: 64
    seq_len: 1024  # tokens
  model:
    d_model: 768
    n_layers: 12
    dropout: 0.1
  trainer:
    accumulate_grad_batches: 4
lr: 0.0003
tags:
- baseline
"""


def test_lightning_nested_hparams_are_read(ledger, tmp_path):
    run = tmp_path / "version_0"
    run.mkdir()
    path = write(run, "metrics.csv", PL_CSV)
    write(run, "hparams.yaml", NESTED_HPARAMS)
    ingest_file(ledger, path)
    assert one(
        ledger, "SELECT batch_size, seq_len, hidden_size, n_layers, grad_accum FROM training_runs"
    ) == (
        64,
        1024,
        768,
        12,
        4,
    )


def test_read_flat_yaml_gives_dotted_keys():
    import tempfile
    from pathlib import Path

    from collectors.training_logs import hparam, read_flat_yaml

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "h.yaml"
        p.write_text(NESTED_HPARAMS + "cfg.data.batch_size: 32\nbatch_size: 16\n", encoding="utf-8")
        raw = read_flat_yaml(p)
    assert raw["cfg.data.batch_size"] == "32"  # the literal dotted line, read later, wins the same key
    assert raw["cfg.model.dropout"] == "0.1" and raw["lr"] == "0.0003" and "tags" not in raw
    assert hparam(raw, ("batch_size",)) == 16  # a top-level key beats a nested one


def test_wandb_metadata_saved_under_another_name_is_read_by_content(ledger, tmp_path):
    meta = {
        "host": "node3",
        "gpu": "NVIDIA H100 80GB HBM3",
        "gpu_count": 8,
        "startedAt": "2025-06-01T10:00:00.000000",
        "heartbeatAt": "2025-06-01T12:00:00.000000",
        "username": "alice",
        "project": "llm",
        "state": "finished",
    }
    run = tmp_path / "run-20250601_100000-xyz"
    run.mkdir()
    path = write(run, "wandb-metadata (1).json", json.dumps(meta))  # a browser's second download
    report = ingest_file(ledger, path)
    assert report.format == "wandb_metadata"
    assert one(ledger, "SELECT job_id, gpu_model, gpu_count, start_ts, end_ts FROM jobs") == (
        "wandb:run-20250601_100000-xyz",
        "H100-SXM-80GB",
        8.0,
        T(2025, 6, 1, 10),
        T(2025, 6, 1, 12),
    )
    assert ledger.execute("SELECT count(*) FROM gpus WHERE host = 'node3'").fetchall() == [(8,)]
