"""The summary contract: keys, hand-worked figures, agreement with its parts and the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from analytics.filters import Filters
from analytics.summary import SUMMARY_KEYS, summary
from analytics.waste import PARTS
from gpuledger.ledger.db import writer
from tests.analytics.build import alloc, gpu, ingest, job, series, set_test_prices
from tests.conftest import gpuledger

WASTE_KEYS = {
    "productive_usd",
    "idle_allocated_usd",
    "underused_usd",
    "failed_usd",
    "unallocated_usd",
    "unmeasured_usd",
}


def _fleet(con):
    set_test_prices(con)
    ingest(
        con,
        jobs=[
            job("j1", 0, 120, team="nlp"),  # 40 min idle, 80 min at 90 %, 300 W
            job("j2", 0, 60, team="cv", state="FAILED"),  # no telemetry
        ],
        allocations=[alloc("j1", "h1:0", 0, 120)],
        samples=series("h1:0", 0, [0.0] * 40 + [90.0] * 80, power_w=300.0),
        gpus=[gpu("h1:0")],
        training_runs=[{"job_id": "j1", "source": "test", "tokens": 2.0e9}],
    )


def test_summary_has_the_contract_keys_and_hand_worked_values(ledger):
    _fleet(ledger)
    s = summary(ledger)
    assert tuple(s) == SUMMARY_KEYS
    assert set(s["waste"]) == WASTE_KEYS
    assert s["spend_usd"] == pytest.approx(2 * 4.0 + 1 * 4.0)  # j1 2 h + j2 1 h at $4
    assert s["gpu_hours"] == pytest.approx(3.0)
    assert s["jobs"] == 2
    assert s["mean_util_pct"] == pytest.approx((40 * 0 + 80 * 90) / 120)  # 60 %, time-weighted
    assert s["idle_gpu_hours"] == pytest.approx(40 / 60)
    assert s["idle_usd"] == pytest.approx(40 / 60 * 4.0)
    assert s["waste"]["failed_usd"] == pytest.approx(4.0)
    assert s["team_waste_usd"] == pytest.approx(40 / 60 * 4.0 + 4.0)  # idle 40 min + the failed run
    assert s["unheld_capacity_usd"] == 0.0  # no cluster declares capacity
    assert "waste_usd" not in s  # the ambiguous sum is gone (issue 44)
    assert s["energy_kwh"] == pytest.approx(0.3 * 2)  # 300 W × 2 h
    assert s["co2e_kg"] == pytest.approx(0.6 * 390 / 1000)
    assert s["training_usd_per_mtok"] == pytest.approx(8.0 / 2000)  # $8 / 2,000 M tokens
    assert s["inference_usd_per_mtok_generated"] is None  # no inference job
    assert s["unpriced_gpu_hours"] == 0.0
    assert s["as_of"] == "2025-03-03T02:00:00"
    assert round(sum(s["waste"][p] for p in PARTS), 2) == round(s["spend_usd"], 2)


def test_summary_of_a_team_and_of_an_empty_ledger(ledger):
    assert summary(ledger)["spend_usd"] == 0.0
    assert summary(ledger)["mean_util_pct"] is None and summary(ledger)["energy_kwh"] is None
    _fleet(ledger)
    nlp = summary(ledger, filters=Filters(teams=("nlp",)))
    cv = summary(ledger, filters=Filters(teams=("cv",)))
    assert nlp["spend_usd"] + cv["spend_usd"] == pytest.approx(summary(ledger)["spend_usd"])
    assert cv["mean_util_pct"] is None and cv["training_usd_per_mtok"] is None


def _cli(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "gpuledger", *args], capture_output=True, text=True, check=False, env=env
    )


def test_cli_summary_json_and_table(db_path, tmp_path):
    with writer(db_path) as con:
        _fleet(con)
    settings = tmp_path / "settings.toml"
    settings.write_text("")  # defaults: the reference tables stay as the test wrote them
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULEDGER_")}
    unset = {k: None for k in os.environ if k.startswith("GPULEDGER_")}
    # in-process (tests/conftest.py gpuledger: the command's main()); the usage error below is a real process
    out = gpuledger("summary", "--json", "--db", db_path, "--settings", str(settings), env=unset)
    assert out.returncode == 0, out.stderr
    s = json.loads(out.stdout)
    assert s["spend_usd"] == pytest.approx(12.0)
    assert s["waste"]["failed_usd"] == pytest.approx(4.0)
    team = gpuledger(
        "summary", "--json", "--team", "nlp", "--db", db_path, "--settings", str(settings), env=unset
    )
    assert json.loads(team.stdout)["spend_usd"] == pytest.approx(8.0)
    assert json.loads(team.stdout)["filters"]["teams"] == ["nlp"]
    table = gpuledger("summary", "--db", db_path, "--settings", str(settings), env=unset)
    assert table.returncode == 0
    assert "spend" in table.stdout and "$12.00" in table.stdout and "idle while allocated" in table.stdout
    bad = _cli("summary", "--since", "yesterday", "--db", db_path, env=env)
    assert bad.returncode == 2 and "not a date" in bad.stderr


def test_summary_unit_costs_are_split_by_kind_never_blended(ledger):
    set_test_prices(ledger)
    ingest(
        ledger,
        jobs=[
            job("t", 0, 120),  # 2 h × $4 = $8 for 2,000 M training tokens
            job("i", 0, 60, kind="inference"),  # 1 h × $4 = $4 for 40 M generated tokens
            job("i2", 0, 60, kind="inference"),  # $4, no generated-token count: left out
        ],
        training_runs=[
            {"job_id": "t", "source": "test", "tokens": 2.0e9},
            {"job_id": "i", "source": "test", "generated_tokens": 4.0e7},
        ],
    )
    s = summary(ledger)
    assert s["training_usd_per_mtok"] == pytest.approx(8.0 / 2000)  # $0.004
    assert s["inference_usd_per_mtok_generated"] == pytest.approx(4.0 / 40)  # $0.10
    assert "usd_per_mtok" not in s  # a blended $12 / 2,040 M would mean neither
