"""W&B wandb-events.jsonl names the line a user's editor shows (1-based, blank lines counted): DuckDB numbers
records, not lines, and its "Malformed JSON ... in line N" counts them from 2."""

from __future__ import annotations

import json
import re

import pytest

from collectors.ingest import ingest_file
from gpuledger.ledger.errors import FormatError
from tests.conftest import write


def _event(ts: int | None, util: float = 5.0) -> str:
    return json.dumps({"system.gpu.0.gpu": util, **({"_timestamp": ts} if ts is not None else {})})


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        # the tester's wb.jsonl: line 2 cut short; DuckDB says "line 3"
        (
            [_event(1735689600), '{"system.gpu.0.gpu": 4.07, "system.gpu.0.memoryAlloc', _event(1735689630)],
            "wandb-events.jsonl:2: not valid JSON Lines: not valid JSON (unexpected end of data: a truncated or "
            "damaged file?)",
        ),
        # blank line 2, line 4 with no _timestamp
        (
            [_event(1735689600), "", _event(1735689630), _event(None)],
            'wandb-events.jsonl:4: no numeric "_timestamp": "None"',
        ),
        # blank lines 2-3, a utilization of 250 % on line 5: the plausibility check reads the samples' line
        (
            [_event(1735689600), "", "", _event(1735689630), _event(1735689660, 250.0)],
            "wandb-events.jsonl:5: system.gpu.N.gpu is 250%, above 100%",
        ),
    ],
    ids=["malformed", "blank-line-then-no-timestamp", "blank-lines-then-implausible-sample"],
)
def test_wandb_events_name_the_physical_line(ledger, tmp_path, lines, message):
    path = write(tmp_path, "wandb-events.jsonl", "\n".join(lines) + "\n")
    with pytest.raises(FormatError, match=re.escape(message) + "$"):
        ingest_file(ledger, path, fmt="wandb_events")
    assert ledger.execute("SELECT count(*) FROM samples").fetchall() == [(0,)]
