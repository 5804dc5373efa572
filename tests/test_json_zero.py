"""No "-0.0" and no float residue in any JSON gpuledger prints (issue 37: ``summary --json`` for a team and
week printed "unmeasured_usd": -0.0). analytics.money is the one place money is rounded and floats are
cleaned; every --json command on the demo is read back here and every number in it checked, and none below zero
outside the report's week-over-week change (issue 41: no negative cost, GPU-hour or part on any face)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from analytics.money import RESIDUE, cents, clean_float
from tests.conftest import gpuledger


def test_cents_and_clean_float() -> None:
    assert math.copysign(1.0, cents(-0.001)) == 1.0  # round(-0.001, 2) is -0.0
    assert math.copysign(1.0, cents(-0.0)) == 1.0
    assert cents(-8.326672684688674e-15) == 0.0
    assert cents(1234.565001) == 1234.57
    assert cents(-3.204) == -3.2
    assert cents(None) is None and cents(float("nan")) is None
    assert clean_float(-1e-15) == 0.0 and math.copysign(1.0, clean_float(-1e-15)) == 1.0
    assert clean_float(2 * RESIDUE) == 2 * RESIDUE  # a small measured value stays
    assert clean_float(float("inf")) is None


def _numbers(value: Any) -> Iterator[float]:
    if isinstance(value, float):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _numbers(v)
    elif isinstance(value, list):
        for v in value:
            yield from _numbers(v)


def _signless(text: str) -> None:
    assert "-0.0," not in text and "-0.0\n" not in text and not text.startswith("-0.0")
    for x in _numbers(json.loads(text)):
        assert not (x == 0 and math.copysign(1.0, x) < 0), "-0.0 in the JSON"
        assert x == 0 or abs(x) >= RESIDUE, f"float residue {x!r} in the JSON"


SIGNED = frozenset(
    {"change"}
)  # the report's week-over-week deltas: the only figures that may fall below zero


def _negatives(value: Any, path: tuple[str, ...] = ()) -> Iterator[str]:
    """Each number below zero outside a SIGNED key: a cost, GPU-hour, energy or count never is (issue 41)."""
    if isinstance(value, dict):
        for k, v in value.items():
            if k not in SIGNED:
                yield from _negatives(v, (*path, str(k)))
    elif isinstance(value, list):
        for v in value:
            yield from _negatives(v, path)
    elif isinstance(value, int | float) and not isinstance(value, bool) and value < 0:
        yield f"{'/'.join(path)} = {value}"


def test_every_json_command_on_the_demo(demo_db: str, tmp_path: Path) -> None:
    def printed(*cmd: str) -> str:
        res = gpuledger(*cmd, "--db", demo_db)
        assert res.returncode == 0, (cmd, res.stderr)
        _signless(res.stdout)
        assert list(_negatives(json.loads(res.stdout))) == [], cmd
        return res.stdout

    # the whole demo; the summary's horizon and the report's teams set the views below
    day = json.loads(printed("summary", "--json"))["as_of"][:10]
    teams = [r["team"] for r in json.loads(printed("report", "--format", "json"))["by_team"]]
    for cmd in (
        ["jobs", "--json"],
        ["recommend", "--json", "--limit", "0"],
        ["recommend", "--total", "--json"],
        ["notify", "--dry-run", "--json", "--mail-domain", "example.org"],
        ["check", "--json"],
        ["info", "--json"],
        ["export", "--parquet", str(tmp_path / "pq"), "--json"],
        ["budgets", "--json"],
        ["whatif", "--json"],
        ["chargeback", "--month", day[:7], "--format", "json"],
    ):
        printed(*cmd)
    # the view the issue saw: a team and a single day each (parts of a small view cancel to residue)
    assert len(teams) > 1
    for team in teams:
        for cmd in (
            ["summary", "--json"],
            ["recommend", "--total", "--json"],
            ["report", "--format", "json"],
            ["whatif", "--json", "--spot", team],
        ):
            printed(*cmd, "--team", team, "--since", day, "--until", day)
            printed(*cmd, "--team", team)


@pytest.mark.parametrize("value", [-0.0, -1e-15])
def test_print_json_has_no_signed_zero(value: float, capsys: pytest.CaptureFixture[str]) -> None:
    from gpuledger.cli.commands._common import print_json

    print_json({"a": value, "b": [value], "c": {"d": value}})
    assert json.loads(capsys.readouterr().out) == {"a": 0.0, "b": [0.0], "c": {"d": 0.0}}
