"""``gpuledger notify``: one mail per user about their own jobs' worst patterns, with the $; dry run, mail
through a real SMTP server on 127.0.0.1, the cooldown remembered in the ledger, the editable template."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest

from gpuledger.ledger.db import writer
from tests.analytics.build import ingest, job
from tests.analytics.recommend_ledgers import recommend_ledger
from tests.conftest import ROOT, filled_once, gpuledger
from tests.test_report_mail import smtp_server

# tests/analytics/recommend_ledgers.py on 2025-03-03 (a Monday: ISO week 2025-W10), H100 $3/GPU-h,
# A100 $2, L4 $0.50, plus bob's failed 2-GPU run with no checkpoint
WEEK = ("--week", "2025-W10")
ALICE_OVER8 = 6 * 4 * 3.0  # over8: 6 of its 8 H100s unused for 4 h → $72.00 (idle GPUs)
ALICE_NB1 = 8 * 3.0  # nb1: one 8 h idle stretch on an H100 → $24.00 (idle GPUs)
BOB_FAIL1 = 2 * 2 * 3.0  # fail1: 2 × 2 h on H100, FAILED, no checkpoint → $12.00 lost
# nb2: 8 h on an A100 ($16) a 2g.20gb MIG slice would hold → 16 × (1 − 2/7) = $11.43 (GPU far bigger than needed).
# An L4 would do it too, but cluster c1 is paid for whether held or not: a cheaper card saves nothing there
# (analytics/problems.py), so the slice is the advice
BOB_NB2 = 16 * (1 - 2 / 7)


def _fill(con: duckdb.DuckDBPyConnection) -> None:
    recommend_ledger(con)
    ingest(
        con,
        jobs=[
            job(
                "fail1",
                0,
                120,
                state="FAILED",
                kind="training",
                gpu_count=2.0,
                name="crash-1",
                user_name="bob",
                team="vision",
            )
        ],
    )


@pytest.fixture(scope="module")
def _filled(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], str]:
    return filled_once(tmp_path_factory, _fill)


@pytest.fixture
def ledger_file(db_path: str, _filled: Callable[[str], str]) -> str:
    """A ledger of this test's own (a copy: notify writes what it sent)."""
    return _filled(db_path)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return gpuledger("notify", *args, env={"GPULEDGER_SMTP_PASSWORD": None})


def _sent_rows(db: str) -> list[tuple]:
    con = duckdb.connect(db, read_only=True)
    try:
        return con.execute(
            "SELECT user_name, kind, target, usd, period, address FROM notices ORDER BY ALL"
        ).fetchall()
    finally:
        con.close()


def test_dry_run_prints_one_notice_per_user_and_records_nothing(ledger_file):
    done = cli(*WEEK, "--db", ledger_file, "--dry-run", "--mail-domain", "example.org")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.count("To: ") == 2
    alice, bob = out.split("-" * 72)[:2]
    assert "To: alice@example.org" in alice
    assert f"Subject: Your GPU jobs in 2025-W10: ${ALICE_OVER8 + ALICE_NB1:,.2f} you could get back" in alice
    assert f"1. Idle GPUs: ${ALICE_OVER8:,.2f}" in alice and f"2. Idle GPUs: ${ALICE_NB1:,.2f}" in alice
    assert "Request 2 GPUs instead of 8" in alice  # what to change, jobstats style
    assert "To: bob@example.org" in bob
    assert f"Failed without a checkpoint: ${BOB_FAIL1:,.2f}" in bob
    assert "held 2 × H100-SXM-80GB for 2.0 h (4.0 GPU-hours) and ended FAILED with no checkpoint" in bob
    assert f"A GPU far bigger than needed: ${BOB_NB2:,.2f}" in bob
    assert "bob" not in alice and "over8" not in bob  # each user sees only their own jobs
    assert "2 notice(s) due, 0 user(s) only with notices in cooldown; dry run: nothing sent" in out
    assert _sent_rows(ledger_file) == []


@pytest.mark.parametrize(
    ("args", "users", "items"),
    [
        (("--min-usd", "20"), ["alice"], 2),  # bob's two $12 patterns are under $20
        (("--max-items", "1"), ["alice", "bob"], 2),  # one pattern each: alice's $72, one of bob's $12
        (("--min-usd", "100"), [], 0),
    ],
)
def test_thresholds(ledger_file, args, users, items):
    import json

    done = cli(*WEEK, "--db", ledger_file, "--dry-run", "--json", "--mail-domain", "example.org", *args)
    assert done.returncode == 0, done.stderr
    notices = json.loads(done.stdout)
    assert [n["user"] for n in notices] == users
    assert sum(len(n["findings"]) for n in notices) == items
    if "--max-items" in args:
        assert notices[0]["findings"] == [{"kind": "idle_gpus", "target": "over8", "usd": ALICE_OVER8}]


def test_mailed_notices_reach_the_server_and_the_cooldown_holds(ledger_file):
    with smtp_server() as inbox:
        smtp = (
            "--smtp",
            f"smtp://127.0.0.1:{inbox.port}",
            "--mail-domain",
            "example.org",
            "--mail-from",
            "hpc@example.org",
        )
        first = cli(*WEEK, "--db", ledger_file, *smtp)
        assert first.returncode == 0, first.stderr
        assert f"sent 2 notice(s) through smtp://127.0.0.1:{inbox.port}" in first.stdout
        again = cli(*WEEK, "--db", ledger_file, *smtp)
        assert again.returncode == 0, again.stderr
        assert (
            "sent 0 notice(s)" in again.stdout and "2 user(s) only with notices in cooldown" in again.stdout
        )
        assert len(inbox.messages) == 2  # nobody got the same notice twice
        without = cli(*WEEK, "--db", ledger_file, *smtp, "--cooldown-days", "0")
        assert "sent 2 notice(s)" in without.stdout
    by_rcpt = {rcpts[0]: msg for _, rcpts, msg in inbox.messages[:2]}
    assert set(by_rcpt) == {"alice@example.org", "bob@example.org"}
    alice = by_rcpt["alice@example.org"]
    assert alice["From"] == "hpc@example.org"
    assert (
        alice["Subject"] == f"Your GPU jobs in 2025-W10: ${ALICE_OVER8 + ALICE_NB1:,.2f} you could get back"
    )
    assert alice.get_content_type() == "text/plain"
    assert f"${ALICE_OVER8:,.2f}" in alice.get_content()
    # remembered in the ledger: one row per pattern sent, twice (the second run was --cooldown-days 0)
    rows = _sent_rows(ledger_file)
    assert sorted(set(rows)) == [
        ("alice", "idle_gpus", "nb1", ALICE_NB1, "2025-W10", "alice@example.org"),
        ("alice", "idle_gpus", "over8", ALICE_OVER8, "2025-W10", "alice@example.org"),
        ("bob", "failed_no_checkpoint", "fail1", BOB_FAIL1, "2025-W10", "bob@example.org"),
        ("bob", "oversized_gpu", "nb2", BOB_NB2, "2025-W10", "bob@example.org"),
    ]
    assert len(rows) == 8


def test_a_site_template(ledger_file, tmp_path: Path):
    tpl = tmp_path / "notice.j2"
    tpl.write_text(
        "Subject: [HPC] {{ user }}: {{ total_usd | usd }}\n"
        "{% for f in findings %}- {{ f.title }} on job {{ f.target }}: {{ f.usd | usd }}\n{% endfor %}"
    )
    done = cli(*WEEK, "--db", ledger_file, "--dry-run", "--template", str(tpl), "--user", "bob")
    assert done.returncode == 0, done.stderr
    assert f"Subject: [HPC] bob: ${BOB_FAIL1 + BOB_NB2:,.2f}" in done.stdout
    assert f"- Failed without a checkpoint on job fail1: ${BOB_FAIL1:,.2f}" in done.stdout
    assert "To: (no address: give --mail-domain)" in done.stdout
    shipped = subprocess.run(
        [sys.executable, "-m", "gpuledger", "notify", "--print-template"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert shipped.stdout.startswith("Subject: ")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("Subject: x\n{% for f in findings %}\n", ":2: template error: Unexpected end of template"),
        ("Subject: {{ nobody }}\n", "template error: 'nobody' is undefined"),
        ("Subject: x\n{{ ''.__class__.__mro__[1].__subclasses__() }}\n", "template error"),  # the sandbox
        ("Hello\n", ":1: the template's first line must be 'Subject: …'"),
    ],
)
def test_a_bad_template_is_one_error_line(ledger_file, tmp_path: Path, text, message):
    tpl = tmp_path / "bad.j2"
    tpl.write_text(text)
    done = cli(*WEEK, "--db", ledger_file, "--dry-run", "--template", str(tpl))
    assert done.returncode == 1
    assert done.stderr.startswith(f"error: {tpl}") and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_sending_needs_smtp_and_a_domain(ledger_file):
    done = cli(*WEEK, "--db", ledger_file)
    assert done.returncode == 2
    assert "sending needs --smtp URL and --mail-domain DOMAIN (or --dry-run" in done.stderr


def test_one_recipient_with_a_line_end_is_reported_and_skipped_and_the_rest_are_mailed(ledger_file):
    # a ledger written before names landed neutral: alice's name is an address with a CRLF and a Bcc line
    # in it. Before, the whole run stopped at her ("error: unexpected failure (ValueError …)"), so bob,
    # after her, got nothing.
    with writer(ledger_file) as con:
        con.execute(
            "UPDATE jobs SET user_name = ? WHERE user_name = 'alice'",
            ["alice@example.org\r\nBcc: evil@example.com"],
        )
    with smtp_server() as inbox:
        smtp = ("--smtp", f"smtp://127.0.0.1:{inbox.port}", "--mail-domain", "example.org")
        run = cli(*WEEK, "--db", ledger_file, *smtp)
    assert run.returncode == 1
    assert "sent 1 notice(s)" in run.stdout and "1 not mailed" in run.stdout, run.stdout
    assert "error: not mailed: 'alice@example.org  Bcc: evil@example.com'" in run.stderr, run.stderr
    assert [rcpts for _, rcpts, _ in inbox.messages] == [["bob@example.org"]]
    assert all("evil" not in str(rcpts) for _, rcpts, _ in inbox.messages)
    assert [r[0] for r in _sent_rows(ledger_file)] == ["bob", "bob"]  # only bob's notice is remembered
