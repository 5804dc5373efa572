"""The generic jobs table names the line a user's editor shows (1-based, the header and blank lines counted),
whether DuckDB's reader or a check finds the fault: DuckDB numbers records, not lines."""

from __future__ import annotations

import re

import pytest

from collectors.ingest import ingest_file
from gpuledger.ledger.errors import FormatError
from tests.conftest import write

HEADER = "job_id,user,team,cluster,gpu_model,gpu_count,start,end,state"
ROW = "{id},u,t,c,H100,{n},2025-03-01T00:00:00,2025-03-01T01:00:00,COMPLETED"
# lines 1-5: the header, a row, a row whose quoted name goes on to line 4, a blank line
QUOTED = [HEADER + ",name", ROW.format(id="a1", n=1) + ",x", ROW.format(id="a2", n=1) + ',"two', 'lines"', ""]


def _json_row(job_id: str, n: object = 1) -> str:
    return (
        f'{{"job_id": "{job_id}", "user": "u", "team": "t", "cluster": "c", "gpu_model": "H100", '
        f'"gpu_count": {n}, "start": "2025-03-01T00:00:00", "end": "2025-03-01T01:00:00", "state": "COMPLETED"}}'
    )


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        # line 1 header, 2 a1, 3 blank (CRLF), 4 the bad row: DuckDB skips the blank, row_number said 3
        (
            [HEADER, ROW.format(id="a1", n=1), "", ROW.format(id="a3", n=-1)],
            'jobs.csv:4: column "gpu_count" is not a GPU count: "-1"',
        ),
        # a quoted value over lines 3-4, a blank line 5, the bad row on line 6
        (
            [*QUOTED, ROW.format(id="a3", n=-1) + ",y"],
            'jobs.csv:6: column "gpu_count" is not a GPU count: "-1"',
        ),
        # the same, DuckDB's reader finds the fault (2 fields missing): its "Line: 5" counts the blank line
        # but not the quoted value's second line
        (
            [*QUOTED, "a3,u,t,c,H100,1,2025-03-01T00:00:00,2025-03-01T01:00:00"],
            "jobs.csv:6: expected 10 fields, found 8 (a truncated line?)",
        ),
        # a job listed twice, on lines 2 and 5 with blank lines 3-4 between
        (
            [HEADER, ROW.format(id="a1", n=1), "", "", ROW.format(id="a1", n=2)],
            "jobs.csv:5: job_id 'a1' appears twice (first on line 2)",
        ),
    ],
    ids=["blank-line", "quoted-value-over-two-lines", "reader-error-after-both", "duplicate-after-blanks"],
)
def test_jobs_csv_names_the_physical_line(ledger, tmp_path, lines, message):
    path = write(tmp_path, "jobs.csv", "\r\n".join(lines) + "\r\n")
    with pytest.raises(FormatError, match=re.escape(message) + "$"):
        ingest_file(ledger, path)
    assert ledger.execute("SELECT count(*) FROM jobs").fetchall() == [(0,)]


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        # line 2 lacks its closing brace; DuckDB says "line 3" (it counts malformed records from 2)
        (
            [_json_row("a1"), _json_row("a2")[:-1], _json_row("a3")],
            "jobs.jsonl:2: not valid JSON (unexpected character: a truncated or damaged file?)",
        ),
        # blank line 2 (DuckDB skips it), the bad count on line 3
        (
            [_json_row("a1"), "", _json_row("a3", -1)],
            'jobs.jsonl:3: column "gpu_count" is not a GPU count: "-1"',
        ),
        # a whitespace-only line 2, line 4 malformed: DuckDB says "line 4" (record 3, counted from 2)
        (
            [_json_row("a1"), "  \t", _json_row("a2"), '{"job_id": }'],
            "jobs.jsonl:4: not valid JSON (unexpected character: a truncated or damaged file?)",
        ),
        # a key twice on line 4 after a blank line 2: DuckDB's transform error says "line 3" (from 1)
        (
            [
                _json_row("a1"),
                "",
                _json_row("a2"),
                _json_row("a3").replace('"user": "u"', '"user": "u", "user": "v"'),
            ],
            'jobs.jsonl:4: the name "user" appears twice (duplicate column names or keys)',
        ),
    ],
    ids=["malformed", "blank-then-bad-value", "whitespace-then-malformed", "blank-then-duplicate-key"],
)
def test_jobs_jsonl_names_the_physical_line(ledger, tmp_path, lines, message):
    path = write(tmp_path, "jobs.jsonl", "\n".join(lines) + "\n")
    with pytest.raises(FormatError, match=re.escape(message) + "$"):
        ingest_file(ledger, path, fmt="jobs_jsonl")
    assert ledger.execute("SELECT count(*) FROM jobs").fetchall() == [(0,)]


@pytest.mark.parametrize("block", [7, 64, 1 << 22])
def test_lines_are_counted_across_scan_blocks(ledger, tmp_path, monkeypatch, block):
    # The scan reads the file in blocks; with blocks of 7 and 64 bytes lines, blank lines and a quoted value
    # are cut at every place. 40 rows, a blank line after every 10th (lines 12, 23, 34), row 25 quoted over
    # two lines: row 33 is on line 1 + 33 + 3 blanks + 1 (the quoted value's second line) = 38.
    import collectors.lines as tl

    monkeypatch.setattr(tl, "SCAN_BLOCK_BYTES", block)
    rows = [HEADER + ",name"]
    for i in range(1, 41):
        name = '"two\nlines"' if i == 25 else "x"
        rows.append(ROW.format(id=f"j{i}", n=-1 if i == 33 else 1) + f",{name}")
        if i % 10 == 0:
            rows.append("")
    path = write(tmp_path, "jobs.csv", "\n".join(rows) + "\n")
    with pytest.raises(
        FormatError, match=re.escape('jobs.csv:38: column "gpu_count" is not a GPU count: "-1"')
    ):
        ingest_file(ledger, path)
