"""LLaMA-Factory trainer_log.jsonl and Lightning metrics.csv name the line a user's editor shows (1-based,
the header and blank lines counted): DuckDB numbers records, not lines, and its "Malformed JSON ... in line
N" counts them from 2."""

from __future__ import annotations

import json
import re

import pytest

from collectors.ingest import ingest_file
from gpuledger.ledger.errors import FormatError
from tests.conftest import write


def _lf(step: int, elapsed: str = "0:00:10") -> str:
    return json.dumps(
        {"current_steps": step, "total_steps": 100, "loss": 2.0, "epoch": 0.1, "elapsed_time": elapsed}
    )


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        # the tester's t3.jsonl: line 3 is damaged; DuckDB says "line 4"
        (
            [_lf(10), _lf(20), '{"current_steps": 30, "elapsed_time": "0:00:30", "loss": }', _lf(40)],
            "trainer_log.jsonl:3: not valid JSON Lines: not valid JSON (unexpected character: a truncated or "
            "damaged file?)",
        ),
        # blank line 2 and a CRLF-only line 3 are skipped by DuckDB; line 5 is cut short
        (
            [_lf(10), "", "\r", _lf(20), '{"current_steps": 30, "loss": 1.0'],
            "trainer_log.jsonl:5: not valid JSON Lines: not valid JSON (unexpected end of data: a truncated or "
            "damaged file?)",
        ),
        # a check on the staged lines: blank line 2, the bad elapsed_time on line 4
        (
            [_lf(10), "", _lf(20), _lf(30, "soon")],
            'trainer_log.jsonl:4: elapsed_time is not a duration: "soon"',
        ),
    ],
    ids=["malformed", "blank-lines-then-truncated", "blank-line-then-bad-value"],
)
def test_llamafactory_names_the_physical_line(ledger, tmp_path, lines, message):
    path = write(tmp_path, "trainer_log.jsonl", "\n".join(lines) + "\n")
    with pytest.raises(FormatError, match=re.escape(message) + "$"):
        ingest_file(ledger, path, fmt="llamafactory_log")
    assert ledger.execute("SELECT count(*) FROM train_log").fetchall() == [(0,)]


def test_llamafactory_train_log_rows_keep_their_lines_past_blank_lines(ledger, tmp_path):
    # lines 1, 3 and 6 hold steps 10, 20, 30 (blank lines 2, 4, 5); a loss of NaN on line 6 is rejected
    # by the plausibility check, which reads the staged line_no
    nan = _lf(30).replace('"loss": 2.0', '"loss": NaN')
    path = write(tmp_path, "trainer_log.jsonl", "\n".join([_lf(10), "", _lf(20), "", "", nan]) + "\n")
    with pytest.raises(
        FormatError, match=re.escape("trainer_log.jsonl:6: loss is nan, not a finite number") + "$"
    ):
        ingest_file(ledger, path, fmt="llamafactory_log")


PL_HEADER = "epoch,step,train_loss_step,val_loss"


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        # blank line 3 (the reader skips it), the bad step on line 5
        (
            [PL_HEADER, "0,9,1.5,", "", "0,19,1.4,", "0,x,1.3,"],
            'metrics.csv:5: column "step" is not a number: "x"',
        ),
        # two blank lines, the run's epochs (largest epoch + 1) from line 7
        (
            [PL_HEADER, "0,9,1.5,", "", "", "0,19,1.4,", "0,29,1.3,", "inf,39,1.2,"],
            "metrics.csv:7: epochs is inf, not a finite number",
        ),
    ],
    ids=["blank-line-then-bad-value", "blank-lines-then-run-figure"],
)
def test_lightning_names_the_physical_line(ledger, tmp_path, lines, message):
    path = write(tmp_path, "metrics.csv", "\n".join(lines) + "\n")
    with pytest.raises(FormatError, match=re.escape(message) + "$"):
        ingest_file(ledger, path, fmt="lightning_csv")
    assert ledger.execute("SELECT count(*) FROM train_log").fetchall() == [(0,)]
