"""Pricing a log for a GPU model: ``gpuledger ingest --gpu-model MODEL --gpu-count N`` (collectors/gpu_facts.py).

The Upload page used to UPDATE the jobs of its in-memory ledger to price a training log, which the CLI could
not do. The page now passes the same ingest option, so the CLI and the page give the same ledger rows.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from gpuledger.ledger.db import reader
from tests.conftest import dataset, gpuledger

LOG = "hf-trainer/luojiu-7b-qlora-a10/trainer_state.json"  # one A10, train_runtime 371,992 s
SHOWN = ("job_id", "kind", "state", "gpu_model", "gpu_count", "gpu_hours", "cost_usd", "waste_usd")


@pytest.fixture
def plain_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "settings.toml"
    path.write_text("")
    monkeypatch.setenv("GPULEDGER_SETTINGS", str(path))
    return path


def test_the_cli_and_the_upload_page_give_the_same_rows(tmp_path: Path, plain_settings: Path) -> None:
    from pages import _data

    # the page's copy sits in a folder named after the run the file names, else after the uploaded file (a
    # browser sends no folder, and the run is named for its folder): the CLI reads a copy there too, so the
    # job ids are the same, hf:trainer_state.json
    log = tmp_path / "trainer_state.json" / "trainer_state.json"
    log.parent.mkdir()
    log.write_bytes(dataset(LOG).read_bytes())
    db = str(tmp_path / "ledger.duckdb")
    done = gpuledger("ingest", str(log), "--gpu-model", "A10", "--gpu-count", "1", "--db", db)
    assert done.returncode == 0, done.stderr
    assert "priced as 1 × A10 for the logged runtime (103.33 h)" in done.stdout
    cli = json.loads(gpuledger("jobs", "--json", "--db", db).stdout)
    page = _data.analyse_upload(log.name, log.read_bytes(), None, None, "A10", 1)
    assert page.error is None, page.error
    assert page.jobs is not None
    rows = page.jobs.to_dicts()
    assert [{k: r[k] for k in SHOWN} for r in rows] == [{k: r[k] for k in SHOWN} for r in cli]
    # by hand: 371,992 s = 103.331 GPU-hours of one A10 at the shipped $0.75/h = $77.50
    assert cli[0]["gpu_hours"] == pytest.approx(371_992 / 3600)
    assert cli[0]["cost_usd"] == pytest.approx(371_992 / 3600 * 0.75)
    # the run lasts its logged runtime and ends at the ingest (the log does not say when it ran)
    for r in (cli[0], rows[0]):
        start, end = (dt.datetime.fromisoformat(str(r[k])) for k in ("start_ts", "end_ts"))
        assert (end - start).total_seconds() == 371_992
    assert page.gpu_assumed is not None and page.gpu_assumed.startswith("1 × A10 for the logged runtime")
    assert page.needs_gpu == ()


def test_without_the_option_the_log_costs_nothing_and_the_page_asks(
    tmp_path: Path, plain_settings: Path
) -> None:
    from pages import _data

    log = dataset(LOG)
    db = str(tmp_path / "ledger.duckdb")
    done = gpuledger("ingest", str(log), "--db", db)
    assert "1 job(s) name no GPU model or count and cost nothing (hf:luojiu-7b-qlora-a10)" in done.stdout
    page = _data.analyse_upload(log.name, log.read_bytes(), None, None)
    assert page.needs_gpu == ("hf:trainer_state.json",) and page.gpu_assumed is None
    assert page.summary is not None and page.summary["spend_usd"] == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--gpu-model", "H10", "--gpu-count", "8"],
            "--gpu-model 'H10' is not in the GPU catalog; close matches: H100-PCIe-80GB, H100-SXM-80GB",
        ),
        (["--gpu-model", "A10"], "--gpu-model and --gpu-count go together"),
        (
            ["--gpu-model", "A10", "--gpu-count", "0"],
            "--gpu-count must be a number of GPUs from 1 to 100,000, got 0",
        ),
        (["--gpu-model", "A10", "--gpu-count", "1", "--job", "c1/7"], "with --job the job's own record says"),
    ],
)
def test_a_bad_option_is_refused_and_the_ledger_untouched(
    tmp_path: Path, plain_settings: Path, args: list[str], message: str
) -> None:
    log = dataset(LOG)
    db = tmp_path / "ledger.duckdb"
    gpuledger(
        "ingest", str(dataset("hf-trainer/mistral7b-lora-translator/trainer_state.json")), "--db", str(db)
    )
    before = db.read_bytes()
    done = gpuledger("ingest", str(log), *args, "--db", str(db))
    assert done.returncode == 1
    assert done.stderr.startswith("error: ") and message in done.stderr, done.stderr
    assert len(done.stderr.splitlines()) == 1
    assert db.read_bytes() == before
    with reader(str(db)) as con:
        assert con.execute("SELECT count(*) FROM jobs").fetchone() == (1,)


def test_a_name_the_catalog_recognises_is_its_model(tmp_path: Path, plain_settings: Path) -> None:
    from collectors.gpu_facts import gpu_facts

    assert gpu_facts("NVIDIA A10", 2).model == "A10"
    assert gpu_facts("H100-SXM-80GB", 8).model == "H100-SXM-80GB"
