"""The price in force, through the commands a user runs (issue 41): a row counts from its ``effective_from`` on,
never before, and the what-if prices each day at the row in force then, like the figures it is compared with.

Every figure is worked by hand below from the ``[[price]]`` rows of the test's settings (they replace the
shipped sheet's rows of the same model, tier, cluster and date, 2025-01-01) and the jobs' GPU-hours.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import gpuledger, write

HEADER = "job_id,user,team,cluster,gpu_model,gpu_count,start,end,state"
# two GPUs, 2026-11-20 00:00 to 2026-11-22 00:00: 96 GPU-h on each of clusters x and y
JOBS = [
    "x1,alice,nlp,x,H100,2,2026-11-20T00:00:00,2026-11-22T00:00:00,COMPLETED",
    "y1,bob,cv,y,H100,2,2026-11-20T00:00:00,2026-11-22T00:00:00,COMPLETED",
]


def price(model: str, usd: float, since: str, tier: str = "on_demand", cluster: str | None = None) -> str:
    where = f'cluster = "{cluster}"\n' if cluster else ""
    return (
        f'[[price]]\ngpu_model = "{model}"\ntier = "{tier}"\nusd_per_gpu_hour = {usd}\n'
        f'effective_from = {since}\nsource = "test"\n{where}'
    )


H100_3 = price("H100-SXM-80GB", 3.00, "2025-01-01")  # the generic on-demand row, $3.00 from 2025


def ledger(tmp_path: Path, rows: list[str], *prices: str) -> tuple[str, str]:
    db, settings = str(tmp_path / "l.duckdb"), write(tmp_path, "settings.toml", "\n".join(prices))
    jobs = write(tmp_path, "jobs.csv", "\n".join([HEADER, *rows]) + "\n")
    done = gpuledger("ingest", "--db", db, "--settings", str(settings), str(jobs))
    assert done.returncode == 0, done.stderr
    return db, str(settings)


def spend(db: str, settings: str, *args: str) -> float:
    done = gpuledger("summary", "--json", "--db", db, "--settings", settings, *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["spend_usd"]


def test_a_cluster_row_dated_after_the_jobs_does_not_reprice_them(tmp_path: Path) -> None:
    # cluster x's own H100 row, $1.10 from 2026-12-01: x's November jobs stay at the generic $3.00
    db, settings = ledger(
        tmp_path,
        [*JOBS, "x2,alice,nlp,x,H100,1,2026-12-02T00:00:00,2026-12-02T10:00:00,COMPLETED"],
        H100_3,
        price("H100-SXM-80GB", 1.10, "2026-12-01", cluster="x"),
    )
    # x: 96 GPU-h × $3.00 = $288 in November, then 10 GPU-h × $1.10 = $11 from its row's date on
    assert spend(db, settings, "--cluster", "x", "--until", "2026-11-30") == pytest.approx(288.0)
    assert spend(db, settings, "--cluster", "x") == pytest.approx(288.0 + 11.0)
    assert spend(db, settings, "--cluster", "y") == pytest.approx(288.0)


def test_a_row_dated_2099_changes_nothing_in_the_past(tmp_path: Path) -> None:
    rows = (H100_3, price("H100-SXM-80GB", 1.10, "2026-01-01", cluster="y"))
    db, settings = ledger(tmp_path, JOBS, *rows)
    # x: 96 × $3.00 = $288; y: 96 × $1.10 = $105.60 (its own row in force since January)
    assert spend(db, settings) == pytest.approx(288.0 + 105.6)
    later = write(
        tmp_path,
        "later.toml",
        "\n".join(
            [
                *rows,
                price("H100-SXM-80GB", 0.10, "2099-01-01"),
                price("H100-SXM-80GB", 0.10, "2099-01-01", cluster="x"),
                price("H100-SXM-80GB", 0.10, "2099-01-01", tier="reserved", cluster="x"),
            ]
        ),
    )
    assert spend(db, str(later)) == pytest.approx(288.0 + 105.6)


def test_a_cluster_row_dated_inside_a_job_splits_it_there(tmp_path: Path) -> None:
    db, settings = ledger(tmp_path, JOBS, H100_3, price("H100-SXM-80GB", 1.10, "2026-11-21", cluster="x"))
    # x1: 48 GPU-h on the 20th at $3.00 = $144, 48 on the 21st at $1.10 = $52.80
    assert spend(db, settings, "--cluster", "x") == pytest.approx(144.0 + 52.8)
    assert spend(
        db, settings, "--cluster", "x", "--since", "2026-11-20", "--until", "2026-11-20"
    ) == pytest.approx(144.0)


# The what-if: one job per team, 1 GPU from 2026-11-20 14:00 to 2026-11-21 10:00 (10 GPU-h each day), on
# elastic clusters (the default tier, on_demand); a price row of each series takes effect on the 21st.
WHATIF_JOBS = [
    "a,alice,nlp,cloud,H100,1,2026-11-20T14:00:00,2026-11-21T10:00:00,COMPLETED",
    "b,bob,cv,edge,H100,1,2026-11-20T14:00:00,2026-11-21T10:00:00,COMPLETED",
]
WHATIF_PRICES = (
    price("H100-SXM-80GB", 2.50, "2025-01-01"),  # both jobs: 20 GPU-h × $2.50 = $50 now
    price("H100-SXM-80GB", 1.50, "2025-01-01", tier="spot"),
    price("H100-SXM-80GB", 2.50, "2026-11-21", tier="spot"),
    price("H100-SXM-80GB", 1.00, "2025-01-01", tier="spot", cluster="edge"),
    price("H100-SXM-80GB", 2.00, "2026-11-21", tier="spot", cluster="edge"),
    price("A100-80GB", 0.40, "2025-01-01"),
    price("A100-80GB", 0.60, "2026-11-21"),
    price("A100-80GB", 0.20, "2025-01-01", cluster="edge"),
    price("A100-80GB", 0.30, "2026-11-21", cluster="edge"),
)
DAY_ONE = ("--since", "2026-11-20", "--until", "2026-11-20")


def whatif(db: str, settings: str, *args: str) -> dict:
    done = gpuledger("whatif", "--json", "--db", db, "--settings", settings, *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize(
    ("args", "now", "saving"),
    [
        # cloud: 10 GPU-h × $1.50 + 10 × $2.50 = $40 instead of $50 (the latest row alone: $50, nothing saved)
        (("--spot", "nlp"), 100.0, 10.0),
        # edge's own spot rows: 10 × $1.00 + 10 × $2.00 = $30 instead of $50
        (("--spot", "cv"), 100.0, 20.0),
        # the 20th alone: 10 GPU-h at $2.50 = $25 now; at spot 10 × $1.50 = $15 (cloud), 10 × $1.00 (edge)
        (("--spot", "nlp", *DAY_ONE), 50.0, 10.0),
        (("--spot", "cv", *DAY_ONE), 50.0, 15.0),
        # A100 instead at the same GPU-hours (:1, no speed-up): cloud 10 × $0.40 + 10 × $0.60 = $10, edge 10 × $0.20 + 10 × $0.30 = $5: $15 for $100
        (("--model", "H100-SXM-80GB=A100-80GB:1"), 100.0, 85.0),
        # the 20th: $50 now; cloud 10 × $0.40 = $4, edge 10 × $0.20 = $2
        (("--model", "H100-SXM-80GB=A100-80GB:1", *DAY_ONE), 50.0, 44.0),
        # the models named as a jobs file names them ("A100 80GB": the catalog's A100-80GB)
        (("--model", "H100=A100 80GB:1"), 100.0, 85.0),
        # twice as slow (:0.5): 40 GPU-h on A100, $30, $70 saved
        (("--model", "H100-SXM-80GB=A100-80GB:0.5"), 100.0, 70.0),
        # no SPEEDUP: the catalog's bf16 peaks, 312 ÷ 989.4: $15 × 989.4 / 312 = $47.567, $52.433 saved
        (("--model", "H100-SXM-80GB=A100-80GB"), 100.0, 100.0 - 15.0 * 989.4 / 312.0),
    ],
)
def test_whatif_prices_each_day_at_the_row_in_force(
    tmp_path: Path, args: tuple[str, ...], now: float, saving: float
) -> None:
    db, settings = ledger(tmp_path, WHATIF_JOBS, *WHATIF_PRICES)
    out = whatif(db, settings, *args)
    assert out["now"]["spend_usd"] == pytest.approx(now)
    assert out["changes"][0]["saving_usd"] == pytest.approx(saving)
    assert out["with_changes"]["spend_usd"] == pytest.approx(now - saving)
    # "now" is the summary of the same view
    view = DAY_ONE if "--since" in args else ()
    assert out["now"]["spend_usd"] == pytest.approx(spend(db, settings, *view))


def test_whatif_refuses_a_speed_up_that_is_not_above_zero(tmp_path: Path) -> None:
    db, settings = ledger(tmp_path, WHATIF_JOBS, *WHATIF_PRICES)
    done = gpuledger("whatif", "--db", db, "--settings", settings, "--model", "H100=A100-80GB:0")
    assert done.returncode != 0 and "SPEEDUP must be a number above 0" in done.stderr
    assert "Traceback" not in done.stderr
