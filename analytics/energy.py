"""Energy per job: kWh from the GPU energy counter, else from power × time; its dollars and CO2e.

Per sample (the rollup's ``e_j``, gpuledger/ledger/rollup_columns.py): the rise of ``energy_j`` (NVML total energy
consumption / DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, a counter since driver load) to the next sample of the
same GPU, when both read it, the next sample comes without a gap and the counter did not go down (a reset);
otherwise ``power_w × interval_s`` (nvidia-smi power.draw); otherwise unknown. A job's energy is the sum over
its samples inside the view; ``energy_coverage`` says which share of its sampled time had a figure.
"""

from __future__ import annotations

import datetime as dt

import duckdb
import polars as pl

from analytics.filters import Filters, horizon
from analytics.utilization import ROLLUPS, Source, job_totals
from gpuledger.ledger.settings import Settings

ALL_FILTERS = Filters()  # the whole ledger
DEFAULT_SETTINGS = Settings()

ENERGY_COLUMNS = {
    "job_id": "",
    "energy_kwh": "Σ per-sample energy / 3.6e6 (NULL when no sample had power or energy)",
    "energy_usd": "energy_kwh × settings usd_per_kwh",
    "co2e_kg": "energy_kwh × settings gco2e_per_kwh / 1000",
    "energy_coverage": "share of the job's sampled seconds with an energy figure (0–1)",
}


def job_energy(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters = ALL_FILTERS,
    settings: Settings = DEFAULT_SETTINGS,
    as_of: dt.datetime | None = None,
    source: Source = ROLLUPS,
) -> pl.DataFrame:
    """One row per job with samples in the view (ENERGY_COLUMNS)."""
    as_of = as_of or horizon(con)
    t = job_totals(con, filters=filters, settings=settings, as_of=as_of, source=source)
    kwh = pl.col("energy_j") / 3.6e6
    return t.select(
        "job_id",
        kwh.alias("energy_kwh"),
        (kwh * settings.usd_per_kwh).alias("energy_usd"),
        (kwh * settings.gco2e_per_kwh / 1000.0).alias("co2e_kg"),
        (pl.col("energy_cov_s").fill_null(0) / pl.col("sampled_s")).alias("energy_coverage"),
    )
