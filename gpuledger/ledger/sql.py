"""SQL text helpers every layer shares: a quoted literal, an IN-list, and the pseudo-job of unclaimed telemetry.

Here, in the ledger layer, beside the tables they are written against, so the parsers (collectors/), the
analytics and the demo quote and list alike; before, the quoting was written in base.py, waste.py and
reference.py, and the pseudo-job CASE was pasted four times in utilization.py and job_signals.py.

Values from a file or a user go in as bound parameters; these helpers are for the product's own names (states,
sources, kinds, prefixes) and for the few texts DuckDB only takes as literals (a reader's path, a CASE arm).
"""

from __future__ import annotations

from collections.abc import Iterable

# Telemetry of a GPU no job claims (a telemetry-only card: analytics/cost.py TELEMETRY_ONLY_GPUS_SQL) is costed
# as one pseudo-job per physical card, ``unattributed:<card>``.
PSEUDO_PREFIX = "unattributed:"


def quote(value: str) -> str:
    """``value`` as a SQL string literal (``it's`` → ``'it''s'``)."""
    return "'" + value.replace("'", "''") + "'"


def sql_list(values: Iterable[str]) -> str:
    """``'a', 'b'``: string literals for an ``IN (...)``."""
    return ", ".join(quote(v) for v in values)


def pseudo_job_sql(tele: str, job_id: str) -> str:
    """SQL: the job a row's telemetry belongs to: its card's pseudo-job when ``tele`` (a LEFT JOIN of the
    telemetry-only GPUs, with ``gpu_id`` and ``card``) matched, else the row's ``job_id`` column."""
    return f"CASE WHEN {tele}.gpu_id IS NOT NULL THEN '{PSEUDO_PREFIX}' || {tele}.card ELSE {job_id} END"


def job_of_sql(jobs: str = "j", job_id: str | None = None) -> str:
    """SQL: the scheduler job a ``jobs`` row (alias ``jobs``) is billed to: the job an attempt of a requeued job
    is an attempt of (``<id>#<n>`` and ``<id>`` are one job, collectors/attempts.py), else the row's own id.
    ``job_id``: the id column when it comes from another relation joined to ``jobs`` (a pseudo-job of
    unclaimed telemetry has no ``jobs`` row and is its own job)."""
    return f"coalesce({jobs}.attempt_of, {job_id or f'{jobs}.job_id'})"


def job_count_sql(jobs: str = "j", job_id: str | None = None) -> str:
    """SQL: how many jobs the rows are, each requeued job once however many attempts it had (:func:`job_of_sql`).
    Every job count of the product (summary, overview, reports, pages, ``info``) is this."""
    return f"count(DISTINCT {job_of_sql(jobs, job_id)})"
