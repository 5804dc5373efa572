"""The Budgets page of a view without a ``[[budget]]`` (issue 47): below the hint on adding one, each team's
month so far and its forecast to the month's end, then the fleet's, as ``gpuledger budgets --forecast`` prints
them. The month-to-date spend is checked against values worked by hand (tests/budgets/ledgers.py ``two_days``)
and plain SQL over the jobs; the forecast against the command's JSON.

By hand, March 2025 as of 2025-03-04 (the horizon, 10:00): nlp's job a, 1 H100 for 8 h × $4.00 = $32.00; cv's
job b, 1 T4 for 10 h × $0.50 = $5.00; the fleet: 2 H100 declared on c1 for the 14 h from day 0 20:00 to the
horizon (28 GPU-h × $4.00 = $112.00, a's hours among them) plus b's T4 = $117.00.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import duckdb
import pytest
from streamlit.testing.v1 import AppTest

from gpuledger.ledger.db import reader
from tests.budgets.ledgers import two_days
from tests.conftest import app_page, filled_ledger, gpuledger

HAND = {"nlp": 32.0, "cv": 5.0, "fleet": 117.0}
PRICE = {"H100-SXM-80GB": 4.0, "T4": 0.5}  # tests/analytics/build.py set_test_prices


@pytest.fixture(scope="module")
def no_budget(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with filled_ledger(tmp_path_factory.mktemp("forecastpage"), two_days) as db:
        yield db


def sql_team_spend(con: duckdb.DuckDBPyConnection) -> dict[str, float]:
    """Each team's jobs in March 2025 (all ended by the horizon): GPUs × hours × the test price."""
    rows = con.execute(
        "SELECT team, gpu_model, SUM(gpu_count * date_diff('second', start_ts, end_ts) / 3600.0) FROM jobs "
        "WHERE start_ts >= TIMESTAMP '2025-03-01' AND end_ts < TIMESTAMP '2025-04-01' GROUP BY ALL"
    ).fetchall()
    out: dict[str, float] = {}
    for team, model, hours in rows:
        out[team] = out.get(team, 0.0) + hours * PRICE[model]
    return out


def cli(spec: str) -> dict:
    out = gpuledger("budgets", "--forecast", spec, "--json")
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)
    return row


def page(**query: list[str]) -> AppTest:
    return app_page("pages/budgets.py", **query)


def test_each_team_and_the_fleet_month_so_far_and_forecast(no_budget: str) -> None:
    with reader(no_budget) as con:
        assert sql_team_spend(con) == pytest.approx({"nlp": HAND["nlp"], "cv": HAND["cv"]})
    at = page()
    assert "No budget for this view" in at.info[0].value
    assert any("This month without a budget: 2025-03" in h.value for h in at.subheader)
    table = at.dataframe[0].value
    shown = {r["team"]: r for r in table.to_dict("records")}
    assert sorted(shown) == ["cv", "fleet", "nlp"]
    for name in ("nlp", "cv", "fleet"):
        r = shown[name]
        assert r["spent_so_far_usd"] == pytest.approx(HAND[name], abs=0.005)
        want = cli("fleet" if name == "fleet" else f"team:{name}")
        assert (want["period_label"], want["as_of"]) == ("2025-03", "2025-03-04")
        assert want["spent_usd"] == pytest.approx(HAND[name], abs=0.005)
        for k in ("forecast_usd", "forecast_low_usd", "forecast_high_usd"):
            assert r[k] == pytest.approx(want[k], abs=0.005), (name, k)
        assert r["forecast_low_usd"] <= r["forecast_usd"] <= r["forecast_high_usd"]
        assert r["forecast_usd"] >= r["spent_so_far_usd"]
    fleet = next(m.value for m in at.markdown if "The fleet" in m.value)
    assert "$117.00 so far" in fleet.replace("\\", "")
    assert len(at.get("plotly_chart")) == 1  # the fleet's chart


def test_a_view_of_one_team_shows_that_team_only(no_budget: str) -> None:
    at = page(team=["nlp"])
    table = at.dataframe[0].value
    assert list(table["team"]) == ["nlp"]
    assert table["spent_so_far_usd"].iloc[0] == pytest.approx(HAND["nlp"], abs=0.005)
    assert not any("The fleet" in m.value for m in at.markdown)
