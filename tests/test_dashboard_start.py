"""``gpuledger dashboard`` on an empty ledger says it is building the demo before the ~30 s build, then prints
one address to open (Streamlit's own banner, with a second address, is switched off) — issue 37 item 9."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from gpuledger.cli.commands import dashboard


def test_it_says_it_builds_the_demo_first_and_prints_one_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import gpuledger.demo.build as demo

    (tmp_path / "none.toml").write_text("")
    monkeypatch.setenv("GPULEDGER_SETTINGS", str(tmp_path / "none.toml"))

    def fake_build(con, **_: object) -> None:  # the real one takes ~30 s: what matters is what comes before
        print("BUILDING")

    started: list[list[str]] = []

    def fake_exec(file: str, argv: list[str], env: dict[str, str]) -> None:
        started.append(argv)
        raise SystemExit(0)

    monkeypatch.setattr(demo, "build_demo", fake_build)
    monkeypatch.setattr(dashboard.os, "execvpe", fake_exec)
    db = str(tmp_path / "ledger.duckdb")
    args = argparse.Namespace(db=db, settings=None, no_demo=False, port=8599, host="127.0.0.1")
    with pytest.raises(SystemExit):
        dashboard.run(args)
    out = capsys.readouterr().out
    announce = out.index("building the demo fleet (about 30 s)…")
    assert announce < out.index("BUILDING")
    assert re.findall(r"https?://\S+", out) == ["http://localhost:8599"]
    (argv,) = started
    assert argv[argv.index("--logger.hideWelcomeMessage") + 1] == "true"
    assert argv[argv.index("--logger.level") + 1] == "warning"  # no "Uvicorn server started on 127.0.0.1"


def test_a_ledger_with_data_is_served_without_building(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from collectors.ingest import ingest_file
    from gpuledger.ledger.db import writer
    from tests.conftest import ROOT

    (tmp_path / "none.toml").write_text("")
    monkeypatch.setenv("GPULEDGER_SETTINGS", str(tmp_path / "none.toml"))
    db = str(tmp_path / "ledger.duckdb")
    with writer(db) as con:
        ingest_file(con, ROOT / "tests" / "fixtures" / "dashboard" / "jobs.csv")
    monkeypatch.setattr(dashboard.os, "execvpe", lambda *a: (_ for _ in ()).throw(SystemExit(0)))
    with pytest.raises(SystemExit):
        dashboard.run(argparse.Namespace(db=db, settings=None, no_demo=False, port=8599, host="127.0.0.1"))
    out = capsys.readouterr().out
    assert "building" not in out
    assert out.count("http://") == 1
