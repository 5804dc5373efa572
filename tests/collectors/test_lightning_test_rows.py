"""Lightning CSVLogger: a row holding only test/predict metrics (``trainer.test()`` after fitting, logged at the
next epoch number) is not an epoch trained. ``tests/fixtures/training/lightning-test-row/metrics.csv`` is
hand-written in the shape of the held-out file of issue 42: epochs 0–99, 61 steps each (steps 0–6099), a
``train_loss`` row every 50 steps (122 rows), one validation row per epoch (100 rows), then
``100,6100,,,,0.0871,0.2951`` (test_loss, test_RMSE)."""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors.base import IngestOptions
from collectors.ingest import ingest_file
from collectors.training_logs import TEST_COL
from tests.conftest import write

FIXTURE = Path(__file__).parent.parent / "fixtures" / "training" / "lightning-test-row" / "metrics.csv"


def test_a_trailing_test_row_is_not_an_epoch_trained(ledger):
    report = ingest_file(ledger, FIXTURE, opts=IngestOptions(tz="UTC"))
    assert report.format == "lightning_csv"
    # epochs 0..99 → 100 (not 101: the test row's epoch 100 was never trained); steps: the largest logged,
    # 6100, the global step the test row was written at
    assert ledger.execute("SELECT epochs, steps FROM training_runs").fetchall() == [(100.0, 6100)]
    # 122 train_loss rows + 100 val rows reach train_log; the test row does not
    assert ledger.execute("SELECT count(*) FROM train_log").fetchall() == [(222,)]
    assert report.skipped["test/predict rows (no training or validation metric: not epochs trained)"] == 1


@pytest.mark.parametrize(
    ("name", "is_test"),
    [
        ("test_RMSE", True),
        ("test/acc", True),
        ("test_loss_epoch", True),
        ("predict_loss", True),
        ("acc_test", True),
        ("loss/test", True),
        ("val_RMSE", False),
        ("train_loss", False),
        ("latest_checkpoint", False),
        ("contest_score", False),
    ],
)
def test_which_columns_are_test_metrics(name, is_test):
    assert bool(TEST_COL.search(name)) is is_test


def test_a_validation_only_row_still_counts_as_an_epoch(ledger, tmp_path):
    """Epoch 2 logged only validation (a resumed run's last row): epochs 0–2 → 3."""
    text = "epoch,step,train_loss,val_acc,test_acc\n0,9,0.5,,\n1,19,0.4,0.7,\n2,29,,0.8,\n3,30,,,0.79\n"
    ingest_file(ledger, write(tmp_path, "metrics.csv", text), opts=IngestOptions(tz="UTC"))
    assert ledger.execute("SELECT epochs FROM training_runs").fetchall() == [(3.0,)]
