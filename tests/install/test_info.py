"""Where the ledger and the settings come from: flag > environment > user > system > checkout (`gpuledger info`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from collectors.time_zones import local_zone
from gpuledger.ledger import paths
from gpuledger.ledger.settings import load_settings
from tests.conftest import ROOT


def _info(*args: str, env: dict[str, str]) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "gpuledger", *args, "info", "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.fixture
def clean_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULEDGER_")}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    env["XDG_DATA_HOME"] = str(tmp_path / "data")
    return env


def test_precedence_flag_environment_user_checkout(tmp_path: Path, clean_env: dict[str, str]) -> None:
    info = _info(env=clean_env)
    assert info["mode"] == "checkout"
    assert info["ledger"] == {
        "path": str(ROOT / "data" / "gpuledger.duckdb"),
        "origin": "checkout (data/)",
    } | {k: v for k, v in info["ledger"].items() if k not in ("path", "origin")}
    user = tmp_path / "config" / "gpuledger" / "settings.toml"
    user.parent.mkdir(parents=True)
    user.write_text("[thresholds]\nidle_util_pct = 4\n")
    assert _info(env=clean_env)["settings"] == {"path": str(user), "origin": "user"}
    env_file = tmp_path / "env.toml"
    env_file.write_text("")
    with_env = dict(clean_env, GPULEDGER_SETTINGS=str(env_file), GPULEDGER_DB=str(tmp_path / "e.duckdb"))
    info = _info(env=with_env)
    assert info["settings"]["origin"] == "environment ($GPULEDGER_SETTINGS)"
    assert info["ledger"]["path"] == str(tmp_path / "e.duckdb")
    flag = _info("--db", str(tmp_path / "f.duckdb"), "--settings", str(user), env=with_env)
    assert flag["ledger"]["origin"] == "flag (--db)" and flag["settings"]["origin"] == "flag (--settings)"


def test_the_user_file_beats_the_system_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    system = tmp_path / "etc" / "settings.toml"
    system.parent.mkdir()
    system.write_text("[thresholds]\nidle_util_pct = 3\n")
    monkeypatch.setattr(paths, "SYSTEM_SETTINGS", system)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    monkeypatch.delenv("GPULEDGER_SETTINGS", raising=False)
    assert paths.choose_settings().origin == "system"
    assert load_settings().idle_util_pct == 3
    user = tmp_path / "cfg" / "gpuledger" / "settings.toml"
    user.parent.mkdir(parents=True)
    user.write_text("[thresholds]\nidle_util_pct = 4\n")
    assert paths.choose_settings().origin == "user"
    assert load_settings().idle_util_pct == 4


def test_installed_defaults_live_in_the_users_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(paths, "in_checkout", lambda: False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "share"))
    monkeypatch.delenv("GPULEDGER_DB", raising=False)
    assert paths.choose_db() == paths.Choice(
        str(tmp_path / "share" / "gpuledger" / "gpuledger.duckdb"), "user data dir"
    )
    # the shipped files come from the package's bundle, not from a checkout
    assert paths.shipped("data/prices.toml").parts[-3:] == ("_bundle", "data", "prices.toml")


def test_global_options_before_the_subcommand(tmp_path: Path, clean_env: dict[str, str]) -> None:
    db = tmp_path / "before.duckdb"
    before = subprocess.run(
        [sys.executable, "-m", "gpuledger", "--db", str(db), "summary", "--json"],
        capture_output=True,
        text=True,
        env=clean_env,
        cwd=ROOT,
        check=False,
    )
    assert before.returncode == 0, before.stderr
    assert db.exists()  # the ledger named before the subcommand is the one used


@pytest.mark.parametrize(
    ("tz", "zone"),
    [
        ("Europe/Paris", "Europe/Paris"),
        (":Europe/Paris", "Europe/Paris"),
        ("/usr/share/zoneinfo/Asia/Tokyo", "Asia/Tokyo"),
        (":/usr/share/zoneinfo/Asia/Tokyo", "Asia/Tokyo"),
    ],
)
def test_tz_in_any_form(monkeypatch: pytest.MonkeyPatch, tz: str, zone: str) -> None:
    if not Path("/usr/share/zoneinfo/Asia/Tokyo").exists():
        pytest.skip("this machine has no zoneinfo database")
    monkeypatch.setenv("TZ", tz)
    assert local_zone() == zone


def test_tz_that_names_the_local_file_reads_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", ":/etc/localtime")
    monkeypatch.setattr(paths, "SYSTEM_SETTINGS", Path("/nonexistent"))
    expected = str(Path("/etc/localtime").resolve()).split("zoneinfo/")[-1]
    assert local_zone() == expected
    monkeypatch.setenv("TZ", "not/a zone")
    assert local_zone() == expected  # an unknown name falls back to the machine's zone, never an error


def test_nvidia_smi_ingest_with_a_path_tz(tmp_path: Path, clean_env: dict[str, str]) -> None:
    csv = tmp_path / "gpu.csv"
    csv.write_text(
        "timestamp, index, utilization.gpu [%], memory.used [MiB]\n"
        "2026/11/30 10:00:00.000, 0, 50 %, 1000 MiB\n"
        "2026/11/30 10:00:30.000, 0, 60 %, 1000 MiB\n"
    )
    env = dict(clean_env, TZ=":/etc/localtime")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuledger",
            "ingest",
            str(csv),
            "--host",
            "n1",
            "--db",
            str(tmp_path / "l.duckdb"),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=False,
    )
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["summary", "--json"], "summary"),
        (["--db", "x.duckdb", "summary"], "summary"),
        (["--db=x.duckdb", "--settings", "s.toml", "jobs", "--team", "nlp"], "jobs"),
        (["--help"], None),
        (["--version"], None),
        (["sumary"], None),  # a typo: the whole parser, so the error lists every command
        ([], None),
    ],
)
def test_only_the_named_command_is_imported_to_parse(argv: list[str], command: str | None) -> None:
    from gpuledger.cli.main import build_parser, command_in

    assert command_in(argv) == command
    if command is not None:
        # the one-command parser reads the arguments exactly as the whole parser does
        one, whole = build_parser(command).parse_args(argv), build_parser().parse_args(argv)
        assert {k: v for k, v in vars(one).items() if k != "func"} == {
            k: v for k, v in vars(whole).items() if k != "func"
        }
        assert one.func is whole.func
