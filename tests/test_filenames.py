"""Names someone else chose never leave their folder (gpuledger/ledger/filenames.py, issue 43).

An upload's name comes from the browser, its run name and output folder from inside the file: a log whose
JSON said ``"run_name": ".."`` had its copy moved into the server's ``$TMPDIR`` and never removed, and an
upload named ``..`` failed with IsADirectoryError. Every such name now goes through ``safe_component``.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from gpuledger.ledger.filenames import MAX_BYTES, inside, safe_component
from gpuledger.ledger.settings import Settings
from gpuledger.reports.fmt import slug
from gpuledger.upload import analyse_isolated
from gpuledger.upload.analysis import named_copy
from gpuledger.upload.naming import run_identity

HOSTILE = {
    "dot-dot": "..",
    "dot": ".",
    "dots": "...",
    "absolute": "/etc/cron.d/x",
    "windows-absolute": "C:\\Windows\\system32",
    "climbing": "../../../../tmp/evil",
    "nul": "a\x00b",
    "only-nul": "\x00",
    "long": "x" * 300 + ".json",
    "long-utf8": "é" * 300,
    "con": "CON",
    "nul-device": "nul.txt",
    "com1": "COM1",
    "lpt9": "lpt9.csv",
    "com-superscript": "COM¹",
    "empty": "",
    "slash": "/",
    "backslashes": "..\\..",
    "newline": "a\nb",
}
RESERVED = {"CON", "PRN", "AUX", "NUL", "COM1", "COM9", "LPT1", "LPT9", "COM¹"}


@pytest.mark.parametrize("name", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_hostile_name_becomes_one_plain_component(name: str, tmp_path: Path) -> None:
    out = safe_component(name, fallback="upload")
    assert out and out not in (".", "..") and not out.startswith(".")
    assert "/" not in out and "\\" not in out and "\x00" not in out and "\n" not in out
    assert len(out.encode()) <= MAX_BYTES
    assert out.split(".", 1)[0].upper() not in RESERVED
    path = inside(tmp_path, name, fallback="upload")
    assert path.parent == tmp_path and path.name == out
    path.write_text("x")  # a real file system takes it
    assert [p.name for p in tmp_path.iterdir()] == [out]


def test_plain_names_are_kept_and_a_long_name_keeps_its_suffix() -> None:
    assert safe_component("trainer_state.json") == "trainer_state.json"
    assert safe_component("run 1 (v2).csv") == "run_1__v2_.csv"
    long = safe_component("y" * 300 + ".csv")
    assert long.endswith(".csv") and len(long) == MAX_BYTES
    assert safe_component("..", fallback="run") == "run"
    assert safe_component("CON.txt") == "_CON.txt"
    assert slug("CON") == "_CON" and slug("../..") == "team"  # per-team report files too


@pytest.mark.parametrize("run", ["..", ".", "/tmp/evil", "../..", "a\x00b", "NUL", "z" * 300], ids=repr)
def test_a_run_name_from_inside_the_log_stays_in_the_upload_folder(run: str, tmp_path: Path) -> None:
    """The copy moves into a folder named after the run: inside the upload's temp folder, whatever the run."""
    upload = tmp_path / "gpuledger-upload-x" / "upload"
    upload.mkdir(parents=True)
    src = upload / "trainer_state.json"
    data = json.dumps({"run_name": run, "log_history": []}).encode()
    src.write_bytes(data)
    moved = Path(named_copy(str(src), run_identity("trainer_state.json", data)))
    assert moved.is_file() and moved.read_bytes() == data
    assert moved.parent.parent == tmp_path / "gpuledger-upload-x"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpuledger-upload-x"]


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("trainer_state.json", json.dumps({"run_name": "..", "log_history": []}).encode()),
        ("..", b"job_id,gpu_model,gpu_count,start,end\nj1,T4,1,2025-01-01 00:00,2025-01-01 01:00\n"),
    ],
    ids=["run-named-dot-dot", "upload-named-dot-dot"],
)
def test_an_upload_leaves_nothing_behind_whatever_it_is_named(
    name: str, data: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole path a page takes (a worker process): no IsADirectoryError, and the server's temp folder is
    as empty afterwards as before (on 0c9145f the run named '..' left its file in $TMPDIR)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    result = analyse_isolated(name, data, Settings())
    assert result.name == name
    assert result.error is None or "unexpectedly" not in result.error, result.error
    assert list(tmp_path.iterdir()) == []
