"""Cost per unit of work and model FLOPs utilization (MFU), from the runs' training / inference metrics.

Definitions (docs/metrics.md, "Unit costs" and "MFU"):
- a job's work counts come from its ``training_runs`` row: tokens = ``tokens``, else ``tokens_per_s ×
  runtime`` (``runtime_s``, else the job's wall time); samples likewise from ``samples``/``samples_per_s``;
- work is assumed spread evenly over the job, so a view holding a share of the job's wall time gets that
  share of its work (``view_share``); $ figures divide the in-view cost by the in-view work;
- MFU = tokens/s × FLOPs per token ÷ (GPUs × dense peak FLOP/s for the run's precision), FLOPs per token =
  6·N, plus 12·L·H·S (attention) when layers L, hidden size H and sequence length S are all known;
  peak: bf16 → ``bf16_tflops``, fp16 → ``fp16_tflops``, fp32 → ``fp32_tflops``; tf32, fp8 and int types
  have no catalog peak, so their MFU is NULL with that reason.
Every NULL figure comes with a ``*_reason`` saying which input is missing; nothing is guessed.
"""

from __future__ import annotations

import datetime as dt

import duckdb
import polars as pl

from analytics.cost import job_costs_sql
from analytics.filters import Filters, horizon
from analytics.query import frame

ALL_FILTERS = Filters()  # the whole ledger

UNIT_COST_COLUMNS = {
    "job_id": "",
    "kind": "",
    "gpu_model": "",
    "gpu_count": "",
    "cost_usd": "in-view cost",
    "view_share": "in-view wall time / the job's whole wall time (0–1)",
    "tokens": "tokens processed by the whole job (logged, else tokens_per_s × runtime)",
    "tokens_in_view": "tokens × view_share",
    "tokens_per_s": "whole-job tokens per second",
    "tokens_per_s_per_gpu": "tokens_per_s / gpu_count",
    "usd_per_mtok": "$ per 1M tokens processed",
    "usd_per_epoch": "$ per epoch",
    "usd_per_ksamples": "$ per 1,000 samples",
    "usd_per_mtok_generated": "inference: $ per 1M generated tokens",
    "usd_per_krequests": "inference: $ per 1,000 requests",
    "flops_per_token": "6·N (+ 12·L·H·S when known)",
    "peak_tflops": "catalog dense peak per GPU for the run's precision",
    "mfu": "model FLOPs utilization, 0–1",
    "mfu_reason": "why mfu is NULL (NULL when it is known)",
    "unit_cost_reason": "why usd_per_mtok is NULL (NULL when it is known)",
}


def job_unit_costs_sql(filters: Filters, as_of: dt.datetime | None) -> tuple[str, list[object]]:
    """SQL of :func:`job_unit_costs`."""
    jobs_sql, params = job_costs_sql(filters, as_of)
    as_of = as_of or dt.datetime(9999, 1, 1)
    sql = f"""
    WITH jc AS ({jobs_sql}),
    b AS (
        SELECT jc.job_id, jc.kind, jc.gpu_model, jc.gpu_count, jc.cost_usd,
               epoch(jc.span_end - jc.span_start)
                   / nullif(epoch(coalesce(jc.end_ts, greatest(?::TIMESTAMP, jc.start_ts)) - jc.start_ts), 0)
                   AS view_share,
               coalesce(tr.runtime_s,
                        nullif(epoch(coalesce(jc.end_ts, greatest(?::TIMESTAMP, jc.start_ts)) - jc.start_ts), 0))
                   AS runtime_s,
               tr.job_id IS NOT NULL AS has_run,
               tr.tokens, tr.tokens_per_s, tr.samples, tr.samples_per_s, tr.epochs, tr.generated_tokens,
               tr.requests, tr.params, tr.n_layers, tr.hidden_size, tr.seq_len, lower(tr.precision) AS precision,
               c.bf16_tflops, c.fp16_tflops, c.fp32_tflops
        FROM jc LEFT JOIN training_runs tr USING (job_id) LEFT JOIN gpu_catalog c ON c.model = jc.gpu_model
    ),
    w AS (
        SELECT b.*,
               coalesce(tokens, tokens_per_s * runtime_s) AS tok,
               coalesce(tokens_per_s, tokens / runtime_s) AS tok_s,
               coalesce(samples, samples_per_s * runtime_s) AS smp,
               6 * params + CASE WHEN n_layers IS NOT NULL AND hidden_size IS NOT NULL AND seq_len IS NOT NULL
                                 THEN 12.0 * n_layers * hidden_size * seq_len ELSE 0 END AS fpt,
               CASE precision WHEN 'bf16' THEN bf16_tflops WHEN 'fp16' THEN fp16_tflops
                              WHEN 'fp32' THEN fp32_tflops END AS peak
        FROM b
    )
    SELECT job_id, kind, gpu_model, gpu_count, cost_usd, view_share,
           tok AS tokens, tok * view_share AS tokens_in_view, tok_s AS tokens_per_s,
           tok_s / nullif(gpu_count, 0) AS tokens_per_s_per_gpu,
           cost_usd / nullif(tok * view_share, 0) * 1e6 AS usd_per_mtok,
           cost_usd / nullif(epochs * view_share, 0) AS usd_per_epoch,
           cost_usd / nullif(smp * view_share, 0) * 1e3 AS usd_per_ksamples,
           cost_usd / nullif(generated_tokens * view_share, 0) * 1e6 AS usd_per_mtok_generated,
           cost_usd / nullif(requests * view_share, 0) * 1e3 AS usd_per_krequests,
           fpt AS flops_per_token,
           peak AS peak_tflops,
           tok_s * fpt / nullif(gpu_count * peak * 1e12, 0) AS mfu,
           CASE WHEN NOT has_run THEN 'no training metrics for this job'
                WHEN tok_s IS NULL THEN 'no token count or tokens/s logged'
                WHEN params IS NULL THEN 'parameter count unknown'
                WHEN precision IS NULL THEN 'precision unknown'
                WHEN gpu_model IS NULL THEN 'GPU model unknown'
                WHEN precision NOT IN ('bf16', 'fp16', 'fp32')
                    THEN 'no catalog peak for precision ' || precision
                WHEN peak IS NULL THEN 'the catalog has no ' || precision || ' peak for ' || gpu_model
                WHEN gpu_count <= 0 THEN 'GPU count is 0'
           END AS mfu_reason,
           CASE WHEN NOT has_run THEN 'no training metrics for this job'
                WHEN tok IS NULL THEN 'no token count or tokens/s logged'
                WHEN cost_usd IS NULL THEN 'GPU model has no price'
                WHEN coalesce(tok * view_share, 0) = 0 THEN 'no tokens inside the view'
           END AS unit_cost_reason
    FROM w
    """
    return sql, [*params, as_of, as_of]


def job_unit_costs(
    con: duckdb.DuckDBPyConnection, *, filters: Filters = ALL_FILTERS, as_of: dt.datetime | None = None
) -> pl.DataFrame:
    """One row per job of the view with its unit costs and MFU (UNIT_COST_COLUMNS)."""
    as_of = as_of or horizon(con)
    sql, params = job_unit_costs_sql(filters, as_of)
    return frame(con, f"SELECT * FROM ({sql}) ORDER BY job_id", params)


def usd_per_mtok(
    con: duckdb.DuckDBPyConnection, *, filters: Filters = ALL_FILTERS, as_of: dt.datetime | None = None
) -> float | None:
    """The view's $ per 1M tokens: Σ cost of jobs with a token count ÷ Σ their in-view tokens × 1e6
    (NULL when no job in the view has tokens)."""
    as_of = as_of or horizon(con)
    sql, params = job_unit_costs_sql(filters, as_of)
    row = con.execute(
        f"""SELECT sum(cost_usd) / nullif(sum(tokens_in_view), 0) * 1e6 FROM ({sql})
            WHERE tokens_in_view > 0 AND cost_usd IS NOT NULL""",
        params,
    ).fetchall()
    return None if row[0][0] is None else float(row[0][0])
