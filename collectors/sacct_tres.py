"""Slurm TRES strings read in SQL: the GPUs a job held (``gres/gpu=N``, typed ``gres/gpu:TYPE=N``, MIG slices
as their share of a card), its GPU model, and the per-step usage peaks and means (``TRESUsageInMax`` /
``TRESUsageInAve``: ``gres/gpumem``, ``gres/gpuutil``). Its SQL runs on ``sacct_norm``, the table
collectors/sacct.py ``stage_from_raw`` builds.
"""

from __future__ import annotations

import duckdb

from gpuledger.ledger.mig import card_slices_sql
from gpuledger.ledger.reference import model_sql_case


def _mib(v: str) -> str:
    """A sacct size (``38888M``, ``17703340K``, ``2G``; bare = bytes) → MiB."""
    num = f"TRY_CAST(regexp_extract({v}, '^([0-9.]+)', 1) AS DOUBLE)"
    unit = f"upper(regexp_extract({v}, '^[0-9.]+([KMGTP]?)', 1))"
    return (
        f"({num} * CASE {unit} WHEN '' THEN 1.0 / 1048576 WHEN 'K' THEN 1.0 / 1024 WHEN 'M' THEN 1 "
        f"WHEN 'G' THEN 1024 WHEN 'T' THEN 1048576 WHEN 'P' THEN 1073741824 END)"
    )


def _gres_as_tres(v: str) -> str:
    """Legacy AllocGRES ``gpu:2`` / ``gpu:tesla:2(IDX:0-1)`` → TRES form ``gres/gpu=2`` / ``gres/gpu:tesla=2``."""
    item = "regexp_replace(x, '\\(.*\\)$', '')"
    return (
        f"nullif(array_to_string(list_transform(list_filter(string_split({v}, ','), "
        f"lambda x: starts_with(x, 'gpu')), lambda x: CASE len(string_split({item}, ':')) "
        f"WHEN 2 THEN 'gres/gpu=' || string_split({item}, ':')[2] "
        f"WHEN 3 THEN 'gres/gpu:' || string_split({item}, ':')[2] || '=' || string_split({item}, ':')[3] END), ','), '')"
    )


def _model_sql(v: str) -> str:
    # An A100 MIG profile whose card memory (slice memory × 7 / g) is over 60 GB is an 80 GB A100.
    big_a100 = (
        f"regexp_matches(lower({v}), 'a100') AND "
        f"TRY_CAST(regexp_extract({v}, '(\\d+)g\\.(\\d+)gb', 2) AS DOUBLE) * 7 "
        f"/ TRY_CAST(regexp_extract({v}, '(\\d+)g\\.(\\d+)gb', 1) AS DOUBLE) > 60"
    )
    return f"(CASE WHEN {big_a100} THEN 'A100-80GB' ELSE ({model_sql_case(v)}) END)"


def _parse_tres(con: duckdb.DuckDBPyConnection) -> None:
    """One row per distinct TRES string: gpu_count (cards; MIG slices as fractions), gpu_type, peaks."""
    con.execute(
        """
        CREATE TEMP TABLE sacct_tres AS
        WITH s AS (
            SELECT DISTINCT tres FROM (SELECT tres FROM sacct_norm UNION ALL SELECT usage_max FROM sacct_norm
                                       UNION ALL SELECT usage_ave FROM sacct_norm)
            WHERE tres IS NOT NULL
        ), kv AS (
            SELECT tres, unnest(string_split(tres, ',')) AS item FROM s
        ), p AS (
            SELECT tres, lower(trim(split_part(item, '=', 1))) AS k, trim(split_part(item, '=', 2)) AS v
            FROM kv
        ), typed AS (
            SELECT *, substr(k, 10) AS typ,
                   TRY_CAST(regexp_extract(k, '(\\d+)g\\.\\d+gb', 1) AS DOUBLE) AS mig_g,
                   """
        + card_slices_sql("k")
        + """ AS slices
            FROM p
        )
        SELECT tres,
            CASE WHEN bool_or(mig_g IS NOT NULL AND starts_with(k, 'gres/gpu:'))
                 THEN sum(CASE WHEN starts_with(k, 'gres/gpu:')
                               THEN TRY_CAST(v AS DOUBLE) * coalesce(mig_g / slices, 1) END)
                 ELSE coalesce(max(CASE WHEN k = 'gres/gpu' THEN TRY_CAST(v AS DOUBLE) END),
                               sum(CASE WHEN starts_with(k, 'gres/gpu:') THEN TRY_CAST(v AS DOUBLE) END))
            END AS gpu_count,
            arg_max(typ, TRY_CAST(v AS DOUBLE)) FILTER (WHERE starts_with(k, 'gres/gpu:')) AS gpu_type,
            max(CASE WHEN k = 'gres/gpumem' THEN """
        + _mib("v")
        + """ END) AS gpu_mem_mib,
            max(CASE WHEN k = 'gres/gpuutil' THEN TRY_CAST(v AS DOUBLE) END) AS gpu_util_pct
        FROM typed GROUP BY tres
        """
    )


def _step_means_sql() -> str:
    """Per job: Slurm's mean GPU utilisation and memory, from its steps' ``TRESUsageInAve`` (docs/metrics.md).

    A step counts when its processes held GPU memory (``gres/gpumem`` > 0): a batch script's shell that only
    starts ``srun`` steps, and the ``extern`` step (processes adopted by pam_slurm_adopt, the whole
    allocation long), read 0 and would pull a busy job's mean toward 0 (a real dump: batch 100 %, extern 0 %).
    Where no step held GPU memory (an idle job, or gpumem not tracked) every step but ``extern`` counts. Each
    counted step weighs its own elapsed time (the job's when the step has none): Σ value × t / Σ t.
    """
    return """
            SELECT n.base_id,
                   sum(u.gpu_util_pct * coalesce(n.elapsed_s, j.job_s, 1.0)) FILTER (WHERE u.gpu_util_pct IS NOT NULL)
                       / nullif(sum(coalesce(n.elapsed_s, j.job_s, 1.0)) FILTER (WHERE u.gpu_util_pct IS NOT NULL), 0) AS gpu_util_mean_pct,
                   sum(u.gpu_mem_mib * coalesce(n.elapsed_s, j.job_s, 1.0)) FILTER (WHERE u.gpu_mem_mib IS NOT NULL)
                       / nullif(sum(coalesce(n.elapsed_s, j.job_s, 1.0)) FILTER (WHERE u.gpu_mem_mib IS NOT NULL), 0) AS gpu_mem_mean_mib
            FROM sacct_norm n
            JOIN sacct_tres u ON u.tres = n.usage_ave
            JOIN (SELECT base_id, max(elapsed_s) FILTER (WHERE NOT is_step) AS job_s,
                         bool_or(u2.gpu_mem_mib > 0) AS any_mem
                  FROM sacct_norm n2 LEFT JOIN sacct_tres u2 ON u2.tres = n2.usage_ave
                  GROUP BY base_id) j ON j.base_id = n.base_id
            WHERE n.is_step AND (u.gpu_util_pct IS NOT NULL OR u.gpu_mem_mib IS NOT NULL)
              AND CASE WHEN coalesce(j.any_mem, false) THEN coalesce(u.gpu_mem_mib, 0) > 0
                       ELSE lower(split_part(n.raw_id, '.', 2)) <> 'extern' END
            GROUP BY n.base_id"""
