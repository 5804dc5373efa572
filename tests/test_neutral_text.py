"""Names are neutral text at every edge (issue 34): no terminal escape, line end or bidi override of a name
reaches the ledger, a terminal, a report or a mail.

A team, user or job name holding ``ESC[2J ESC[H`` (clear the screen), an OSC title ``ESC]0;…BEL``, CR/LF
or U+202E was stored, and ``gpuledger jobs`` printed it raw (it cleared the screen); the reports carried
the escapes (txt 11, md 7, csv 41, html 7). The rule is gpuledger.ledger.text.neutral: each control
character a space, each bidi control dropped.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from collectors.base import ingest_file
from gpuledger.ledger.db import writer
from gpuledger.ledger.text import clip, neutral, neutral_lines
from tests.conftest import ROOT, gpuledger

JOBS = ROOT / "tests" / "fixtures" / "dashboard" / "jobs.csv"
CLEAR = "\x1b[2J\x1b[H"
TITLE = "\x1b]0;owned\x07"
HOSTILE = {
    "team": f"nlp{CLEAR}",
    "user_name": f"alice{TITLE}\r\nBcc: evil@example.com",
    "name": "llm\u202etxt.exe",
}
BAD = ("\x1b", "\x07", "\u202e", "\x9b")  # ESC, BEL, RLO, CSI (C1)


def test_the_rule():
    assert neutral(f"a{CLEAR}b") == "a [2J [Hb"
    assert neutral("x\r\ny\u202ez\u2066w\x85") == "x  yzw "
    assert neutral("Zoë 東京 ok") == "Zoë 東京 ok"  # letters of any script stay
    assert neutral_lines("a\tb\r\nc\rd\n\x1b") == "a\tb\r\nc d\n "  # an output's own line ends stay
    assert clip("A" * 200) == "A" * 80 + "… (120 more characters)"
    assert clip(f"{CLEAR}x") == " [2J [Hx"


def test_names_land_neutral(ledger, tmp_path: Path):
    path = tmp_path / "jobs.csv"
    header, first, *rest = JOBS.read_text().splitlines()
    cells = first.split(",")
    cells[1] = '"' + HOSTILE["user_name"].replace('"', '""') + '"'  # a quoted CSV value may hold CR/LF
    cells[2] = HOSTILE["team"]
    cells[10] = HOSTILE["name"]
    path.write_text("\n".join([header, ",".join(cells), *rest]) + "\n")
    ingest_file(ledger, path)
    row = ledger.execute("SELECT user_name, team, name FROM jobs WHERE job_id = 'dash-1'").fetchall()[0]
    assert row == (neutral(HOSTILE["user_name"]), neutral(HOSTILE["team"]), "llmtxt.exe")
    assert row[0] == "alice ]0;owned   Bcc: evil@example.com"  # by hand: ESC, BEL, CR, LF → spaces
    held = ledger.execute(
        "SELECT count(*) FROM jobs WHERE regexp_matches(user_name || team || name, '[\\x00-\\x1f\\x{202E}]')"
    ).fetchall()
    assert held == [(0,)]


@pytest.fixture(scope="module")
def raw_ledger(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A ledger that holds hostile names as they are (written before names landed neutral, or by hand)."""
    db = str(tmp_path_factory.mktemp("neutral") / "ledger.duckdb")
    with writer(db) as con:
        ingest_file(con, JOBS)
        con.execute(
            "UPDATE jobs SET team = ?, user_name = ?, name = ? WHERE job_id IN ('dash-1', 'dash-2')",
            [HOSTILE["team"], HOSTILE["user_name"], HOSTILE["name"]],
        )
    con = duckdb.connect(db, read_only=True)
    assert con.execute("SELECT count(*) FROM jobs WHERE team LIKE '%' || chr(27) || '%'").fetchall() == [(2,)]
    con.close()
    return db


def _clean(text: str, what: str) -> None:
    for ch in BAD:
        assert ch not in text, (what, repr(ch), text.count(ch))
    assert "\nBcc:" not in text.replace("\r\n", "\n"), what  # no line of its own forged by a name


def test_the_jobs_table_prints_no_escape(raw_ledger: str):
    run = gpuledger("jobs", "--db", raw_ledger, "--limit", "50")
    assert run.returncode == 0, run.stderr
    _clean(run.stdout, "jobs")
    jobs = duckdb.connect(raw_ledger, read_only=True).execute("SELECT count(*) FROM jobs").fetchall()[0][0]
    assert len(run.stdout.splitlines()) == 1 + jobs  # the header and one line a job: no row was split


@pytest.mark.parametrize("fmt", ["txt", "md", "csv", "html", "json"])
def test_no_report_carries_an_escape(raw_ledger: str, fmt: str):
    run = gpuledger(
        "report", "--db", raw_ledger, "--format", fmt, "--since", "2026-11-01", "--until", "2026-12-01"
    )
    assert run.returncode == 0, run.stderr
    assert "nlp" in run.stdout  # the team is there, neutral
    _clean(run.stdout, fmt)


def test_recommend_prints_no_escape(raw_ledger: str):
    run = gpuledger("recommend", "--db", raw_ledger, "--min-usd-per-week", "0")
    assert run.returncode == 0, run.stderr
    _clean(run.stdout, "recommend")


def test_an_error_line_echoes_no_escape(tmp_path: Path):
    path = tmp_path / f"jobs{TITLE}.csv"  # the file's name too
    header, first = JOBS.read_text().splitlines()[:2]
    path.write_text(header + "\n" + first.replace("COMPLETED", f"DONE{CLEAR}" + "X" * 5000) + "\n")
    run = gpuledger("ingest", str(path), "--db", str(tmp_path / "l.duckdb"))
    assert run.returncode == 1
    _clean(run.stderr, "stderr")
    assert len(run.stderr.encode()) < 1000 and "more characters" in run.stderr, run.stderr
