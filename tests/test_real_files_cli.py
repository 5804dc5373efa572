"""Every kind of real file lands through the CLI into a ledger file (the writer runs under its memory
limit, as a user's ingest does), and a second ingest of the same file is a no-op."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import dataset, gpuledger

REAL_FILES = {
    "hf-trainer/mistral7b-lora-translator/trainer_state.json": ("hf_trainer_state", "train_log", 866),
    "slurm-sacct/slurmdog_alpine_sacct.json": ("sacct_json", "jobs", 1),
    "hf-trainer/luojiu-7b-qlora-a10/trainer_log.jsonl": ("llamafactory_log", "train_log", 1743),
    "wandb/spaceinvaders-colab-T4/wandb-events.jsonl": ("wandb_events", "samples", 18),
    "alibaba-v2026-genai/pod_gpu_memory_used_bytes_anon.tar.gz": ("alibaba_genai2026", "samples", 161413),
    "lightning-csvlogger/slm_training_version_0_metrics.csv": ("lightning_csv", "train_log", 2824),
    "nvidia-smi-q-xml/telegraf_a100-sxm4-v12.xml": ("nvidia_smi_xml", "gpus", 5),
    "nvidia-smi-csv/eobo0530_vlm_optimization_gpu_log.csv": ("nvidia_smi_csv", "samples", 2619),
    "alibaba-gpu-v2023/openb_pod_list_default.csv": ("alibaba_openb2023", "jobs", 8152),
}


def _ingest(db, path):
    """A real ``gpuledger ingest`` process, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "gpuledger", "ingest", "--db", str(db), "--json", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.datasets
@pytest.mark.parametrize("relative", sorted(REAL_FILES))
def test_real_file_lands_through_the_cli_once(tmp_path, relative):
    fmt, table, rows = REAL_FILES[relative]
    path = dataset(relative)
    db = tmp_path / "ledger.duckdb"
    first = _ingest(db, path)
    assert first.returncode == 0, first.stderr
    report = json.loads(first.stdout)[0]
    assert report["format"] == fmt and report["rows"][table] == rows
    again = gpuledger("ingest", "--db", str(db), "--json", str(path))  # in-process: the same main()
    assert again.returncode == 0 and json.loads(again.stdout)[0]["already_ingested"] is True


@pytest.mark.datasets
def test_a_reader_that_goes_away_ends_the_command_quietly(tmp_path):
    """`gpuledger jobs --json | head`: once head has read enough and gone, the command stops writing and says
    nothing (it printed "error: unexpected failure (BrokenPipeError ...)"). 8,152 jobs are far more than a
    pipe holds, so the write does fail."""
    db = tmp_path / "l.duckdb"
    assert _ingest(db, dataset("alibaba-gpu-v2023/openb_pod_list_default.csv")).returncode == 0
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuledger", "jobs", "--db", str(db), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.read(100)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 1
    # nothing but the range line every reading command prints first (gpuledger/cli/commands/_common.py)
    assert all(line.startswith("period: ") for line in err.splitlines()), err
