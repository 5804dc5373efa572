"""An uploaded training log is a named run with its log (gpuledger/upload/naming.py, analysis.py): the name
comes from inside the file, else from the uploaded file's name; the log's loss curve, throughput, $ per epoch
and MFU (from total_flos ÷ runtime when the model's size is unknown) come with it (issue 37)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuledger.upload.naming import output_folder, run_identity
from tests.conftest import dataset

LOG = "hf-trainer/luojiu-7b-qlora-a10/trainer_state.json"  # one A10, 1,743 entries, train_runtime 371,992 s


@pytest.fixture
def plain_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "settings.toml"
    path.write_text("")
    monkeypatch.setenv("GPULEDGER_SETTINGS", str(path))
    return path


def test_a_log_that_names_nothing_is_named_after_the_uploaded_file() -> None:
    run = run_identity("trainer_state.json", dataset(LOG).read_bytes())
    assert run.run == "trainer_state.json" and "uploaded file's name" in run.run_basis
    assert run.model is None and run.model_reason == "the log does not name its model"
    assert run.output_dir is None and run.output_reason == "the log does not name its output folder"


def test_the_run_and_model_a_log_names_win_over_the_file_name() -> None:
    state = {"best_model_checkpoint": "/runs/llama-7b-sft/checkpoint-500", "log_history": []}
    run = run_identity("trainer_state.json", json.dumps(state).encode())
    assert (run.run, run.output_dir) == ("llama-7b-sft", "/runs/llama-7b-sft")  # the checkpoint's folder
    state |= {"run_name": "sft-v2", "model_name_or_path": "meta-llama/Llama-2-7b-hf"}
    run = run_identity("trainer_state.json", json.dumps(state).encode())
    assert (run.run, run.model, run.run_basis) == ("sft-v2", "meta-llama/Llama-2-7b-hf", "the log's run_name")
    # a W&B config wraps values as {"value": ...}
    assert run_identity("config.json", b'{"model": {"value": "gpt2"}}').model == "gpt2"
    # not JSON, or not an object: the file's name
    assert run_identity("gpus.csv", b"timestamp,index\n").run == "gpus.csv"
    assert run_identity("x.json", b"[1, 2]").run == "x.json"


def test_a_checkpoint_folder_is_inside_the_output_folder() -> None:
    assert output_folder("out/run-1/checkpoint-500/") == "out/run-1"
    assert output_folder("C:\\runs\\a\\checkpoint-10") == "C:/runs/a"
    assert output_folder("out/run-1") == "out/run-1"


def test_the_real_log_uploaded_is_a_named_run_with_its_curve_cost_per_epoch_and_mfu(
    plain_settings: Path,
) -> None:
    from pages import _data

    data = dataset(LOG).read_bytes()
    page = _data.analyse_upload("trainer_state.json", data, None, None, "A10", 1)
    assert page.error is None, page.error
    assert page.run is not None and page.run.run == "trainer_state.json"
    assert page.jobs is not None and page.jobs["job_id"].to_list() == [
        "hf:trainer_state.json"
    ]  # was hf:upload
    # every step entry of log_history is drawn: 1,743 entries less the final summary (no loss)
    entries = json.loads(data)["log_history"]
    steps = [e for e in entries if "loss" in e]
    assert page.train_log is not None and page.train_log.height == len(steps) == 1742
    assert page.train_log["loss"].to_list() == [e["loss"] for e in steps]
    summary = entries[-1]
    assert page.training_runs is not None
    run = page.training_runs.row(0, named=True)
    assert run["samples_per_s"] == summary["train_samples_per_second"] == 0.749
    assert page.unit_costs is not None
    uc = page.unit_costs.row(0, named=True)
    # by hand: 371,992.1593 s on one A10 at the shipped $0.75/h = $77.50 over 2.9997 epochs = $25.835
    cost = summary["train_runtime"] / 3600 * 0.75
    assert uc["usd_per_epoch"] == pytest.approx(cost / json.loads(data)["epoch"])
    assert uc["usd_per_epoch"] == pytest.approx(25.835, abs=0.001)
    # MFU with no model size: total_flos ÷ runtime ÷ (1 GPU × the A10's 125 TFLOP/s dense bf16 peak)
    assert uc["mfu"] == pytest.approx(1.13456296708811e19 / 371992.1593 / 125e12)  # 0.2440
    assert uc["mfu_basis"] == "training (total_flos ÷ runtime), bf16 assumed"


def test_a_log_not_priced_yet_has_no_cost_per_epoch_or_mfu(plain_settings: Path) -> None:
    from pages import _data

    page = _data.analyse_upload("trainer_state.json", dataset(LOG).read_bytes(), None, None)
    assert page.needs_gpu == ("hf:trainer_state.json",)
    # no GPUs known, no held time: no unit-cost row at all (the page shows n/a), never a $0 or a 0 % figure
    assert page.unit_costs is not None and page.unit_costs.is_empty()
    assert page.train_log is not None and page.train_log.height == 1742  # the curve needs no price


def test_a_checkpoint_trainer_state_without_a_runtime_is_not_priced_and_the_page_can_say_why(
    tmp_path: Path,
) -> None:
    """A checkpoint's trainer_state.json (TRL SFT here) has no train_runtime: given the GPUs, nothing can be
    timed, so nothing is priced (collectors/gpu_facts.py), and the Upload page's 'records no runtime' warning
    keys on exactly this: GPUs given, none assumed, every run's runtime_s unknown (issue 44 item 8)."""
    import shutil

    from collectors.gpu_facts import gpu_facts
    from gpuledger.ledger.settings import Settings
    from gpuledger.upload.analysis import analyse_file
    from tests.conftest import ROOT

    src = ROOT / "tests" / "fixtures" / "training" / "trl-sft" / "trainer_state.json"
    assert "train_runtime" not in src.read_text()
    (tmp_path / "up").mkdir()
    path = tmp_path / "up" / "trainer_state.json"
    shutil.copy(src, path)
    r = analyse_file(str(path), "trainer_state.json", Settings(), None, None, gpu_facts("H100-SXM-80GB", 8))
    assert r.error is None and not r.gpu_assumed and r.needs_gpu
    assert r.training_runs is not None and r.training_runs["runtime_s"].is_null().all()
    assert r.summary is not None and r.summary["spend_usd"] == 0.0
