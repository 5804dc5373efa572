"""W&B's startedAt in every spelling its SDKs write: legacy ones naive UTC (``2020-02-19T00:08:33.249681``),
current ones with a Z (``2025-07-17T11:27:27.220480Z``). A value that is no time is an error naming the
metadata file and the key's line, never a job silently without its start."""

from __future__ import annotations

import datetime as dt
import json
import re

import pytest

from collectors.ingest import ingest_file
from gpuledger.ledger.errors import FormatError
from tests.conftest import write

T = dt.datetime


def _metadata(run, started: object) -> str:
    # startedAt is on line 3 of this layout (json.dumps with indent puts one key on a line)
    meta = {"host": "node7", "startedAt": started, "gpu": "NVIDIA H100 80GB HBM3", "gpu_count": 2}
    return write(run, "wandb-metadata.json", json.dumps(meta, indent=2))


@pytest.mark.parametrize(
    ("started", "expected"),
    [
        ("2025-07-17T11:27:27.220480Z", T(2025, 7, 17, 11, 27, 27, 220480)),  # current SDKs (the tester's)
        ("2025-07-17T11:27:27.220480", T(2025, 7, 17, 11, 27, 27, 220480)),  # legacy: naive UTC
        ("2025-07-17T11:27:27Z", T(2025, 7, 17, 11, 27, 27)),
        ("2025-07-17T11:27:27", T(2025, 7, 17, 11, 27, 27)),
        ("2025-07-17T13:27:27.5+02:00", T(2025, 7, 17, 11, 27, 27, 500000)),  # 13:27 at +02:00 = 11:27 UTC
    ],
    ids=["fraction-Z", "fraction-naive", "Z", "naive", "offset"],
)
def test_metadata_started_at_in_every_spelling(ledger, tmp_path, started, expected):
    run = tmp_path / "run-20250717_112727-abc" / "files"
    run.mkdir(parents=True)
    ingest_file(ledger, _metadata(run, started))
    assert ledger.execute("SELECT job_id, start_ts, gpu_count FROM jobs").fetchall() == [
        ("wandb:run-20250717_112727-abc", expected, 2.0)
    ]


def test_events_job_starts_at_a_started_at_with_z(ledger, tmp_path):
    # startedAt 11:27:27.220480Z, samples at 11:30:00 and 11:30:30 UTC (epoch 1752751800 = 2025-07-17 11:30 UTC),
    # no heartbeatAt: the job spans startedAt to the last sample
    run = tmp_path / "run-20250717_112727-abc" / "files"
    run.mkdir(parents=True)
    _metadata(run, "2025-07-17T11:27:27.220480Z")
    events = [
        {"system.gpu.0.gpu": 40.0, "_timestamp": 1752751800},
        {"system.gpu.0.gpu": 60.0, "_timestamp": 1752751830},
    ]
    path = write(run, "wandb-events.jsonl", "\n".join(json.dumps(e) for e in events) + "\n")
    ingest_file(ledger, path)
    assert ledger.execute("SELECT start_ts, end_ts FROM jobs").fetchall() == [
        (T(2025, 7, 17, 11, 27, 27, 220480), T(2025, 7, 17, 11, 30, 30))
    ]


@pytest.mark.parametrize("started", ["yesterday", "2025-07-17T11:27:27ZZ", 1752751647])
def test_a_started_at_that_is_no_time_is_an_error_naming_the_metadata_file(ledger, tmp_path, started):
    run = tmp_path / "run-1" / "files"
    run.mkdir(parents=True)
    meta = _metadata(run, started)
    expected = f'{meta}:3: "startedAt" is not a time: {started!r}'
    with pytest.raises(FormatError, match=re.escape(expected) + "$"):
        ingest_file(ledger, meta)
    # the events beside it need the same start for their job
    events = write(
        run, "wandb-events.jsonl", json.dumps({"system.gpu.0.gpu": 1.0, "_timestamp": 1752751800}) + "\n"
    )
    with pytest.raises(FormatError, match=re.escape(expected) + "$"):
        ingest_file(ledger, events)
    assert ledger.execute("SELECT count(*) FROM jobs").fetchall() == [(0,)]
