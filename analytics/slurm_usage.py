"""Slurm's own GPU accounting as a job's utilization when no telemetry covers the job.

With ``AccountingStorageTRES=gres/gpumem,gres/gpuutil`` sacct reports each step's mean GPU utilization and
memory (``TRESUsageInAve``); collectors/sacct.py weighs the steps by their time into ``jobs.gpu_util_mean_pct``
and ``jobs.gpu_mem_mean_mib``. Where the ledger has no utilization reading of a job (no sample), that mean
stands for the job's whole held time, the way a job-level mean can (docs/metrics.md, "Slurm accounting"):

- covered time = held time (the mean is a reading of all of it), busy time = held × mean / 100;
- **idle**: a mean at or under ``thresholds.idle_util_pct`` over a job of at least
  ``thresholds.idle_min_minutes`` (start to end, whatever part of it the view holds) is an idle stretch of
  the whole held time;
- **under-used**: otherwise a mean under ``thresholds.target_util_pct`` makes held × (target − mean) / target
  under-used, as one sample over the whole span would.

A mean cannot show an idle stretch inside a busy job (2 h idle then 2 h at 100 % reads 50 %: all of it
under-used, none idle), nor a burst inside an idle one. A job with any sample is judged from its samples
alone.
"""

from __future__ import annotations

from gpuledger.ledger.settings import Settings

SLURM_BASIS = "from Slurm accounting"
TELEMETRY_BASIS = "telemetry"


def _no_reading(t: str) -> str:
    return f"coalesce({t}.util_cov_s, 0) = 0"


def filled_totals_sql(settings: Settings, *, t: str = "t", job: str = "lj", held_s: str, span_s: str) -> str:
    """SELECT-list items ``util_cov_s, idle_s, underused_s, util_s``: the telemetry totals of ``t`` (one row
    per job, or per job and week), else, for a job without a utilization reading whose ``jobs`` row ``job``
    has Slurm's mean, the totals that mean gives over ``held_s`` (held GPU-seconds of the row) and ``span_s``
    (the row's wall-clock span, which decides whether an idle mean is long enough to be a stretch)."""
    idle, target, min_s = settings.idle_util_pct, settings.target_util_pct, settings.idle_min_minutes * 60
    u = f"{job}.gpu_util_mean_pct"
    use = f"({_no_reading(t)} AND {u} IS NOT NULL)"
    idle_mean = f"({u} <= {idle} AND {span_s} >= {min_s})"
    return f"""
        CASE WHEN {use} THEN {held_s} ELSE {t}.util_cov_s END AS util_cov_s,
        CASE WHEN {use} THEN CASE WHEN {idle_mean} THEN {held_s} ELSE 0.0 END ELSE {t}.idle_s END AS idle_s,
        CASE WHEN {use} THEN CASE WHEN NOT {idle_mean} AND {u} < {target}
                                  THEN {held_s} * ({target} - {u}) / {target} ELSE 0.0 END
             ELSE {t}.underused_s END AS underused_s,
        CASE WHEN {use} THEN {held_s} * {u} / 100.0 ELSE {t}.util_s END AS util_s,
        CASE WHEN {use} THEN '{SLURM_BASIS}' WHEN NOT {_no_reading(t)} THEN '{TELEMETRY_BASIS}' END
            AS util_basis"""
