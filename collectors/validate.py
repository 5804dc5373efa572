"""Plausibility: the physical range of every canonical column, checked on the staged rows before they land.

Every parser stages canonical columns (collectors/contract.py); :func:`validate_stage` then holds each staged row
against the ranges below, the same way for every source, so a value no GPU, scheduler or trainer can produce
(a sample dated 2099 by a node with a wrong clock, ``250 %`` utilization, ``1e30 W``, ``gpu_count = inf``, a
job ending on 9999-12-31) never becomes GPU-hours or money:

- utilization, memory utilization, SM and tensor activity: 0–100 %; a process's SM, memory, encoder and
  decoder utilization (nvidia-smi pmon) too, and its poll interval is positive and at most a day;
- memory used ≥ 0 and ≤ the sample's memory total; memory total ≤ the catalog's memory × 1.05 where the GPU
  model is known, else ≤ 1 TiB;
- power 0 … 2 × the catalog's TDP where the model is known, else ≤ 3,000 W;
- an energy counter is ≥ 0; a decrease between samples is a counter reset (driver reload), which the energy
  figures already treat as such (the rollup's per-sample energy), never negative energy;
- temperature −20…130 °C; SM clock 0…5 GHz;
- GPU counts 0…100,000 (a CPU-only job, count 0, lands as before);
- every time between 2000-01-01 and now + 1 day; a job or allocation ends no earlier than it starts and lasts
  at most ``thresholds.max_job_days`` (default 365 days);
- every number finite (no NaN, no ±infinity).

By default the first bad row rejects the whole file (``FormatError`` naming its line, the source's column name,
the value and the limit; the ledger is untouched). With ``skip_bad_rows`` every bad row is removed from the
stage instead (with the rows of other stage tables that belong to a removed job) and recorded in the ledger's
``rejected_rows`` table; the rest lands.

Parsers help the messages by staging a ``line_no`` column (the row's line in the file; ``line_no__<column>``
where one row comes from many lines; or no column at all where the stage's rows are the file's lines in order,
:func:`lines_by_rowid`), or ``row_label`` where lines say nothing (``log_history[12]`` of a JSON
document), and by naming their columns with :func:`name_columns` (``power.draw`` rather than ``power_w``). ``gpuledger check`` runs the same
rules over what is already in the ledger (:func:`ledger_violations`).
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, replace
from pathlib import Path

import duckdb

from gpuledger.ledger.errors import FormatError
from gpuledger.ledger.text import clip

# Sample columns a second series for the same (gpu_id, ts) never changes (collectors/landing.py _land_samples).
MERGE_KEPT = frozenset({"ts", "gpu_id", "interval_s", "ingest_id"})

EARLIEST = dt.datetime(2000, 1, 1)
MAX_GPU_COUNT = 100_000
MAX_POWER_UNKNOWN_W = 3000.0
TDP_FACTOR = 2.0
MEMORY_FACTOR = 1.05
MAX_MEMORY_MIB = 1024.0 * 1024.0  # 1 TiB: no GPU has more
MAX_JOB_DAYS = 365.0
NAMES_TABLE = "stage__names"  # (tbl, col, source): the source's own column names, for messages

# Stage tables in the order they are checked (samples first: their lines are the file's lines).
TABLES = (
    "samples",
    "jobs",
    "allocations",
    "training_runs",
    "train_log",
    "processes",
    "gpu_events",
    "capacity",
    "gpus",
    "prices",
)
# Removing a job's row removes these rows of the same job from the stage too (skip mode).
JOB_CHILDREN = ("allocations", "training_runs", "train_log")


def _num(x: float) -> str:
    """``1400`` → ``1,400``; ``1e30`` → ``1e+30``; ``305.81`` → ``305.81``."""
    if not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    if float(x).is_integer() and abs(x) < 1e15:
        return f"{int(x):,}"
    if abs(x) >= 1e7 or (x != 0 and abs(x) < 1e-4):
        return f"{x:.6g}"
    return f"{x:,.6g}" if abs(x) < 1000 else f"{x:,.2f}".rstrip("0").rstrip(".")


def _show(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return _num(value)
    return str(value)


@dataclass(frozen=True)
class Rule:
    """One range: ``bad`` is SQL over the stage row ``s`` (and ``cat``: the GPU's catalog entry for samples
    and gpus) that is true for a bad row; ``reason`` is the sentence, with ``{name}`` (the column as the
    source calls it), ``{value}`` (the value, formatted) and ``{limit}``/``{model}`` (from ``limit_sql`` and
    the catalog) filled in."""

    column: str
    bad: str
    reason: str
    limit_sql: str = "NULL"
    needs: tuple[str, ...] = ()  # other staged columns the rule reads
    catalog: bool = False  # reads cat.memory_mib / cat.tdp_w / cat.model


def _finite(col: str) -> Rule:
    return Rule(col, f"NOT isfinite(s.{col})", "{name} is {value}, not a finite number")


def _range(col: str, lo: float, hi: float, unit: str) -> list[Rule]:
    u = f" {unit}" if unit and unit != "%" else unit
    return [
        _finite(col),
        Rule(col, f"s.{col} < {lo}", f"{{name}} is {{value}}{u}, below {_num(lo)}{u}"),
        Rule(col, f"s.{col} > {hi}", f"{{name}} is {{value}}{u}, above {_num(hi)}{u}"),
    ]


def _nonneg(col: str, unit: str = "", hi: float | None = None, what: str = "") -> list[Rule]:
    u = f" {unit}" if unit else ""
    rules = [_finite(col), Rule(col, f"s.{col} < 0", f"{{name}} is {{value}}{u}, below 0{u}")]
    if hi is not None:
        rules.append(Rule(col, f"s.{col} > {hi}", f"{{name}} is {{value}}{u}, above {_num(hi)}{u}{what}"))
    return rules


def _time(col: str) -> Rule:
    return Rule(
        col,
        f"(NOT isfinite(s.{col}) OR s.{col} < TIMESTAMP '{EARLIEST:%Y-%m-%d}' OR s.{col} > $latest)",
        "{name} is {value}, not a time between 2000-01-01 and {limit} (a wrong clock?)",
        limit_sql="strftime($latest, '%Y-%m-%d %H:%M')",
    )


def _required(col: str) -> Rule:
    return Rule(col, f"s.{col} IS NULL", "{name} is empty or unreadable (every row needs it)")


def _span(start: str, end: str) -> list[Rule]:
    return [
        Rule(
            end,
            f"s.{end} < s.{start}",
            "{name} is {value}, before its start ({limit})",
            limit_sql=f"CAST(s.{start} AS VARCHAR)",
            needs=(start,),
        ),
        Rule(
            end,
            f"epoch(s.{end}) - epoch(s.{start}) > $max_job_s",
            "{name} is {value}: the job would have run {limit} days, longer than thresholds.max_job_days",
            limit_sql=f"round((epoch(s.{end}) - epoch(s.{start})) / 86400, 1)",
            needs=(start,),
        ),
    ]


def _count(col: str) -> list[Rule]:
    return [_finite(col), *_nonneg(col, "", MAX_GPU_COUNT, " (no fleet has more GPUs)")[1:]]


_PCT = [
    rule
    for col in ("util_pct", "mem_util_pct", "sm_active_pct", "tensor_active_pct")
    for rule in _range(col, 0, 100, "%")
]

RULES: dict[str, list[Rule]] = {
    "samples": [
        _required("ts"),
        _time("ts"),
        *_PCT,
        _finite("interval_s"),
        Rule("interval_s", "s.interval_s <= 0", "{name} is {value} s, not a positive interval"),
        Rule("interval_s", "s.interval_s > 86400", "{name} is {value} s, above a day"),
        *_nonneg("mem_total_mib", "MiB"),
        Rule(
            "mem_total_mib",
            f"s.mem_total_mib > cat.memory_mib * {MEMORY_FACTOR}",
            "{name} is {value} MiB, above the {limit} MiB of {model}",
            limit_sql="cat.memory_mib",
            catalog=True,
        ),
        Rule(
            "mem_total_mib",
            f"cat.memory_mib IS NULL AND s.mem_total_mib > {MAX_MEMORY_MIB}",
            "{name} is {value} MiB, above 1 TiB (no GPU has more)",
            catalog=True,
        ),
        *_nonneg("mem_used_mib", "MiB"),
        Rule(
            "mem_used_mib",
            "s.mem_used_mib > s.mem_total_mib",
            "{name} is {value} MiB, above the memory total ({limit} MiB)",
            limit_sql="s.mem_total_mib",
            needs=("mem_total_mib",),
        ),
        Rule(
            "mem_used_mib",
            f"s.mem_used_mib > cat.memory_mib * {MEMORY_FACTOR}",
            "{name} is {value} MiB, above the {limit} MiB of {model}",
            limit_sql="cat.memory_mib",
            catalog=True,
        ),
        Rule(
            "mem_used_mib",
            f"cat.memory_mib IS NULL AND s.mem_used_mib > {MAX_MEMORY_MIB}",
            "{name} is {value} MiB, above 1 TiB (no GPU has more)",
            catalog=True,
        ),
        *_nonneg("power_w", "W"),
        Rule(
            "power_w",
            f"s.power_w > {TDP_FACTOR} * cat.tdp_w",
            "{name} is {value} W, above 2 × TDP ({limit} W) of {model}",
            limit_sql=f"{TDP_FACTOR} * cat.tdp_w",
            catalog=True,
        ),
        Rule(
            "power_w",
            f"cat.tdp_w IS NULL AND s.power_w > {MAX_POWER_UNKNOWN_W}",
            "{name} is {value} W, above 3,000 W (no GPU draws more; the model is not in the catalog)",
            catalog=True,
        ),
        *_nonneg("energy_j", "J"),
        *_range("temp_c", -20, 130, "°C"),
        *_nonneg("sm_clock_mhz", "MHz", 5000, " (5 GHz)"),
    ],
    "jobs": [
        *_count("gpu_count"),
        _time("submit_ts"),
        _time("start_ts"),
        _time("end_ts"),
        _time("last_checkpoint_ts"),
        *_span("start_ts", "end_ts"),
        *_nonneg("gpu_mem_peak_mib", "MiB", MAX_MEMORY_MIB),
        *_range("gpu_util_peak_pct", 0, 100, "%"),
        *_nonneg("gpu_mem_mean_mib", "MiB", MAX_MEMORY_MIB),
        *_range("gpu_util_mean_pct", 0, 100, "%"),
    ],
    "allocations": [
        *_count("gpu_count"),
        _required("start_ts"),
        _time("start_ts"),
        _time("end_ts"),
        *_span("start_ts", "end_ts"),
    ],
    "training_runs": [
        rule
        for col, unit in (
            ("params", ""),
            ("tokens", ""),
            ("samples", ""),
            ("epochs", ""),
            ("steps", ""),
            ("runtime_s", "s"),
            ("peak_mem_mib", "MiB"),
            ("samples_per_s", ""),
            ("tokens_per_s", ""),
            ("requests", ""),
            ("generated_tokens", ""),
            ("total_flos", ""),
            ("batch_size", ""),
            ("grad_accum", ""),
            ("global_batch_size", ""),
            ("seq_len", ""),
            ("n_layers", ""),
            ("hidden_size", ""),
        )
        for rule in _nonneg(col, unit)
    ]
    + [
        Rule(
            "runtime_s",
            "s.runtime_s > $max_job_s",
            "{name} is {value} s, longer than thresholds.max_job_days",
        )
    ],
    "train_log": [
        _time("ts"),
        *_nonneg("elapsed_s", "s"),
        *_nonneg("step"),
        *_nonneg("tokens_seen"),
        _finite("epoch"),
        _finite("loss"),
        _finite("eval_loss"),
        _finite("learning_rate"),
    ],
    "processes": [
        _required("ts"),
        _time("ts"),
        *_nonneg("used_mem_mib", "MiB", MAX_MEMORY_MIB),
        # per-process utilization (nvidia-smi pmon): each engine's share of the poll, 0-100 %
        *(
            rule
            for col in ("sm_pct", "mem_util_pct", "enc_pct", "dec_pct")
            for rule in _range(col, 0, 100, "%")
        ),
        _finite("interval_s"),
        Rule("interval_s", "s.interval_s <= 0", "{name} is {value} s, not a positive interval"),
        Rule("interval_s", "s.interval_s > 86400", "{name} is {value} s, above a day"),
    ],
    "gpu_events": [_required("ts"), _time("ts")],
    "capacity": [
        *_count("gpu_count"),
        _required("start_ts"),
        _time("start_ts"),
        _time("end_ts"),
        *_span("start_ts", "end_ts"),
    ],
    "gpus": [
        *_nonneg("memory_total_mib", "MiB"),
        Rule(
            "memory_total_mib",
            f"s.memory_total_mib > cat.memory_mib * {MEMORY_FACTOR}",
            "{name} is {value} MiB, above the {limit} MiB of {model}",
            limit_sql="cat.memory_mib",
            catalog=True,
        ),
        Rule(
            "memory_total_mib",
            f"cat.memory_mib IS NULL AND s.memory_total_mib > {MAX_MEMORY_MIB}",
            "{name} is {value} MiB, above 1 TiB (no GPU has more)",
            catalog=True,
        ),
        _time("first_seen"),
        _time("last_seen"),
    ],
    "prices": [*_nonneg("usd_per_gpu_hour", "US$/GPU-h", 1000)],
}


# How ``gpuledger check`` names a ledger row.
KEYS = {
    "samples": "s.gpu_id || ' at ' || CAST(s.ts AS VARCHAR)",
    "jobs": "'job ' || s.job_id",
    "allocations": "'allocation of job ' || s.job_id",
    "training_runs": "'training run of job ' || s.job_id",
    "train_log": "'train log of job ' || s.job_id || coalesce(' step ' || s.step, '')",
    "processes": "'process ' || coalesce(CAST(s.pid AS VARCHAR), '?') || ' on ' || s.gpu_id",
    "gpu_events": "'event on ' || s.gpu_id",
    "capacity": "'capacity of ' || s.cluster || ' ' || s.gpu_model",
    "gpus": "'GPU ' || s.gpu_id",
    "prices": "'price of ' || s.gpu_model || ' ' || s.tier",
}


@dataclass(frozen=True)
class Violation:
    table: str
    line: int | None
    column: str  # as the source names it
    value: str
    reason: str
    rid: int | None = None  # the row's rowid in the checked table
    key: str = ""  # which row, for a ledger table: job id, GPU and time, ...
    ingest_id: int | None = None  # for a ledger table: the ingest that brought the row


def latest_time(now: dt.datetime | None = None) -> dt.datetime:
    """The latest plausible time: now (UTC) + 1 day."""
    now = now or dt.datetime.now(dt.UTC).replace(tzinfo=None)
    return now + dt.timedelta(days=1)


def name_columns(con: duckdb.DuckDBPyConnection, table: str, names: dict[str, str]) -> None:
    """Tell the messages what the source calls a staged column (``power_w`` → ``power.draw``)."""
    con.execute(f"CREATE TEMP TABLE IF NOT EXISTS {NAMES_TABLE} (tbl VARCHAR, col VARCHAR, source VARCHAR)")
    con.executemany(f"INSERT INTO {NAMES_TABLE} VALUES (?, ?, ?)", [[table, c, n] for c, n in names.items()])


def _source_names(con: duckdb.DuckDBPyConnection, table: str) -> dict[str, str]:
    if not _exists(con, NAMES_TABLE, temp=True):
        return {}
    rows = con.execute(f"SELECT col, source FROM {NAMES_TABLE} WHERE tbl = ?", [table]).fetchall()
    return {c: n for c, n in rows}


def _exists(con: duckdb.DuckDBPyConnection, table: str, *, temp: bool) -> bool:
    return bool(
        con.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE table_name = ? AND temporary = ?", [table, temp]
        ).fetchall()[0][0]
    )


def _cols(con: duckdb.DuckDBPyConnection, table: str, *, temp: bool) -> dict[str, str]:
    rows = con.execute(
        """SELECT column_name, data_type FROM duckdb_columns()
           WHERE table_name = ? AND (database_name = 'temp') = ?""",
        [table, temp],
    ).fetchall()
    return {r[0]: r[1] for r in rows}


def _applicable(table: str, cols: dict[str, str], *, has_catalog: bool) -> list[Rule]:
    numeric = ("FLOAT", "DOUBLE", "REAL", "DECIMAL")
    out = []
    for rule in RULES.get(table, []):
        if rule.column not in cols or any(n not in cols for n in rule.needs):
            continue
        if rule.catalog and not has_catalog:
            continue
        # isfinite is for floating values; integers and text are finite by type
        if rule.bad.startswith("NOT isfinite(s.") and not (
            cols[rule.column].startswith(numeric) or cols[rule.column].startswith("TIMESTAMP")
        ):
            continue
        out.append(rule)
    return out


def _catalog_join(con: duckdb.DuckDBPyConnection, table: str, source: str, staged: bool) -> str | None:
    """SQL joining ``s`` to its GPU's catalog entry as ``cat`` (gpu model from the stage's gpus, else the
    ledger's); None when the table has no gpu_id."""
    if table not in ("samples", "gpus"):
        return None
    if table == "gpus":
        return "LEFT JOIN gpu_catalog cat ON cat.model = s.model"
    stage_gpus = (
        staged and _exists(con, "stage_gpus", temp=True) and "model" in _cols(con, "stage_gpus", temp=True)
    )
    models = "SELECT gpu_id, model FROM gpus WHERE model IS NOT NULL"
    if stage_gpus:
        models = f"SELECT gpu_id, model FROM temp.stage_gpus WHERE model IS NOT NULL UNION ALL ({models})"
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE valid_models AS
            SELECT gpu_id, model FROM ({models})
            WHERE gpu_id IN (SELECT DISTINCT gpu_id FROM {source})
            QUALIFY row_number() OVER (PARTITION BY gpu_id) = 1"""
    )
    return (
        "LEFT JOIN temp.valid_models vm ON vm.gpu_id = s.gpu_id "
        "LEFT JOIN gpu_catalog cat ON cat.model = vm.model"
    )


LINES_TABLE = "stage_lines"


def lines_by_rowid(con: duckdb.DuckDBPyConnection, table: str, first_line: int) -> None:
    """Say that the rows of TEMP ``table`` are the file's lines in order from ``first_line``, so that a row's
    line is its ``rowid`` plus a base, without a ``line_no`` column.

    A ``CREATE TABLE AS`` over DuckDB's reader keeps the file's order and numbers the new table's rows
    consecutively; a column of line numbers would cost an UPDATE of every row and 8 bytes a row in the stage
    (2 M rows: 0.15 s, and 16 MB more to spill under the writer's memory limit). The base lives in TEMP
    ``stage_lines``, which is dropped with the other ``stage_*`` tables; deleting rows later (a skipped bad
    row) changes no other row's rowid."""
    base = first_line - int(con.execute(f"SELECT coalesce(min(rowid), 0) FROM temp.{table}").fetchall()[0][0])
    con.execute(f"CREATE TEMP TABLE IF NOT EXISTS {LINES_TABLE} (tbl VARCHAR, base BIGINT)")
    con.execute(f"DELETE FROM temp.{LINES_TABLE} WHERE tbl = ?", [table])
    con.execute(f"INSERT INTO temp.{LINES_TABLE} VALUES (?, ?)", [table, base])


def line_sql(con: duckdb.DuckDBPyConnection, table: str, alias: str) -> str:
    """SQL for the file line of a row ``alias`` of TEMP ``table``: its ``line_no`` column, else its rowid plus
    the base :func:`lines_by_rowid` recorded, else NULL."""
    if "line_no" in _cols(con, table, temp=True):
        return f"{alias}.line_no"
    if _exists(con, LINES_TABLE, temp=True):
        rows = con.execute(f"SELECT base FROM temp.{LINES_TABLE} WHERE tbl = ?", [table]).fetchall()
        if rows:
            return f"({alias}.rowid + {int(rows[0][0])})"
    return "NULL"


def find_violations(
    con: duckdb.DuckDBPyConnection,
    table: str,
    *,
    source: str,
    staged: bool,
    max_job_days: float = MAX_JOB_DAYS,
    now: dt.datetime | None = None,
    limit: int | None = 1,
) -> list[Violation]:
    """Rows of ``source`` (a stage table, or a ledger table) that break a rule of ``table``, first line first;
    at most ``limit`` (None: all)."""
    cols = _cols(con, source.removeprefix("temp."), temp=staged)
    if not cols:
        return []
    has_catalog = "gpu_id" in cols if table == "samples" else ("model" in cols if table == "gpus" else False)
    rules = _applicable(table, cols, has_catalog=has_catalog)
    if not rules:
        return []
    join = _catalog_join(con, table, source, staged) if has_catalog else None
    names = _source_names(con, table) if staged else {}
    arms = " ".join(f"WHEN {r.bad} THEN {i}" for i, r in enumerate(rules))
    # the value as DOUBLE for numbers (formatted here), as text for times
    num_vals = " ".join(
        f"WHEN {i} THEN TRY_CAST(s.{r.column} AS DOUBLE)"
        for i, r in enumerate(rules)
        if not cols[r.column].startswith("TIMESTAMP")
    )
    txt_vals = " ".join(
        f"WHEN {i} THEN CAST(s.{r.column} AS VARCHAR)"
        for i, r in enumerate(rules)
        if cols[r.column].startswith("TIMESTAMP")
    )
    limits = " ".join(f"WHEN {i} THEN CAST({r.limit_sql} AS VARCHAR)" for i, r in enumerate(rules))
    line = (
        line_sql(con, source.removeprefix("temp."), "s")
        if staged
        else "s.line_no"
        if "line_no" in cols
        else "NULL"
    )
    # a stage may say per column which line its value came from (dcgm: one sample from many lines)
    per_col = [
        f"WHEN {i} THEN coalesce(s.line_no__{r.column}, {line})"
        for i, r in enumerate(rules)
        if f"line_no__{r.column}" in cols
    ]
    if per_col:
        line = f"CASE CASE {arms} END {' '.join(per_col)} ELSE {line} END"
    key = "NULL" if staged else KEYS.get(table, "NULL")
    ingest = "s.ingest_id" if "ingest_id" in cols and not staged else "NULL"
    model = "cat.model" if join else "NULL"
    latest = latest_time(now)
    sql = f"""
        WITH hit AS (
            SELECT s.rowid AS rid, {line} AS line, CASE {arms} END AS which, s.*, {model} AS cat_model,
                   CAST({key} AS VARCHAR) AS row_key, {ingest} AS row_ingest,
                   {"s.row_label" if "row_label" in cols else "NULL::VARCHAR"} AS row_label_
                   {", cat.memory_mib AS cat_memory_mib, cat.tdp_w AS cat_tdp_w" if join else ""}
            FROM {source} s {join or ""}
        )
        SELECT rid, line, which,
               {f"CASE which {num_vals} END" if num_vals else "NULL::DOUBLE"} AS num,
               {f"CASE which {txt_vals} END" if txt_vals else "NULL::VARCHAR"} AS txt,
               CASE which {limits} END AS lim, cat_model, row_key, row_ingest, row_label_
        FROM (SELECT * FROM hit WHERE which IS NOT NULL) s
        {"LEFT JOIN gpu_catalog cat ON cat.model = s.cat_model" if join else ""}
        ORDER BY line NULLS LAST, rid
        {f"LIMIT {int(limit)}" if limit else ""}
    """
    params = {"latest": latest, "max_job_s": max_job_days * 86400.0}
    used = {k: v for k, v in params.items() if f"${k}" in sql}
    rows = con.execute(sql, used).fetchall()
    out = []
    for rid, ln, which, num, txt, lim, cat_model, row_key, row_ingest, row_label in rows:
        rule = rules[int(which)]
        value = _show(num) if txt is None else txt
        try:
            shown_lim = _num(float(lim)) if lim is not None else ""
        except ValueError:
            shown_lim = str(lim)
        name = names.get(rule.column, rule.column)
        reason = rule.reason.format(name=name, value=clip(value), limit=shown_lim, model=cat_model or "")
        if ln is None and row_label:  # a JSON document's entry (log_history[12]) where lines say nothing
            reason = f"{row_label}: {reason}"
        out.append(
            Violation(
                table,
                int(ln) if ln is not None else None,
                name,
                value,
                reason,
                int(rid),
                row_key or "",
                int(row_ingest) if row_ingest is not None else None,
            )
        )
    return out


def _staged(con: duckdb.DuckDBPyConnection) -> list[str]:
    rows = con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE temporary AND table_name LIKE 'stage\\_%' ESCAPE '\\'"
    ).fetchall()
    have = {r[0].removeprefix("stage_") for r in rows}
    return [t for t in TABLES if t in have]


def validate_stage(
    con: duckdb.DuckDBPyConnection,
    path: str | Path,
    *,
    skip_bad_rows: bool = False,
    max_job_days: float = MAX_JOB_DAYS,
    now: dt.datetime | None = None,
) -> list[Violation]:
    """Hold every staged row against :data:`RULES`.

    Default: raise ``FormatError(path, line, reason)`` for the first bad row (samples first, then by line).
    ``skip_bad_rows``: delete every bad row from its stage table (and the staged rows of a removed job in
    :data:`JOB_CHILDREN`), re-derive the staged GPUs' first/last seen from the samples that stay, and return
    the violations (one per removed row) for :func:`record_rejections`.
    """
    found: list[Violation] = []
    for table in _staged(con):
        source = f"temp.stage_{table}"
        hits = find_violations(
            con,
            table,
            source=source,
            staged=True,
            max_job_days=max_job_days,
            now=now,
            limit=None if skip_bad_rows else 1,
        )
        if not hits:
            continue
        if not skip_bad_rows:
            v = hits[0]
            raise FormatError(path, v.line, v.reason)
        found.extend(hits)
        if table == "gpus":
            _null_gpu_values(con, hits)
            continue
        con.execute("CREATE OR REPLACE TEMP TABLE valid_bad (rid BIGINT)")
        con.executemany("INSERT INTO valid_bad VALUES (?)", [[v.rid] for v in hits])
        if table == "jobs":
            con.execute(
                f"CREATE OR REPLACE TEMP TABLE valid_bad_jobs AS SELECT job_id FROM {source} "
                "WHERE rowid IN (SELECT rid FROM valid_bad)"
            )
        con.execute(f"DELETE FROM {source} WHERE rowid IN (SELECT rid FROM valid_bad)")
        if table == "jobs":
            for child in JOB_CHILDREN:
                if _exists(con, f"stage_{child}", temp=True):
                    con.execute(
                        f"DELETE FROM temp.stage_{child} WHERE job_id IN (SELECT job_id FROM valid_bad_jobs)"
                    )
        if table == "samples":
            _reseen_gpus(con)
    for t in ("valid_bad", "valid_bad_jobs", "valid_models"):
        con.execute(f"DROP TABLE IF EXISTS temp.{t}")
    return found


_LEDGER_NAMES = {
    "util_pct": "utilization",
    "mem_util_pct": "memory utilization",
    "mem_used_mib": "memory used",
    "mem_total_mib": "memory total",
    "power_w": "power",
    "temp_c": "temperature",
    "sm_clock_mhz": "SM clock",
}


def validate_merge(
    con: duckdb.DuckDBPyConnection, path: str | Path, *, skip_bad_rows: bool = False
) -> list[Violation]:
    """Hold the rows a merge would make against :data:`RULES` before anything lands.

    A staged sample whose GPU and time the ledger has already fills that row's empty columns
    (collectors/landing.py ``_land_samples``): each file's values passed on their own, but together they can
    break a rule between columns (one log's memory total, the other's memory used above it). Same answers
    as :func:`validate_stage`: the first such row as ``FormatError(path, line, reason)``, or with
    ``skip_bad_rows`` the staged rows left out and returned. Costs one probe of the ledger over the
    stage's time span (zone maps skip the rest)."""
    if not _exists(con, "stage_samples", temp=True):
        return []
    staged = _cols(con, "stage_samples", temp=True)
    ledger = _cols(con, "samples", temp=False)
    merge = [c for c in staged if c in ledger and c not in MERGE_KEPT]
    if not merge:
        return []
    fills = " OR ".join(f"(o.{c} IS NULL AND sp.{c} IS NOT NULL)" for c in merge)
    # the row as it would be: every ledger column, filled from the stage where the ledger has none
    values = ", ".join(
        f"coalesce(o.{c}, sp.{c}) AS {c}" if c in merge else f"o.{c}" for c in ledger if c not in MERGE_KEPT
    )
    # a message about a value only the ledger has names it so (the file's own columns have their names)
    name_columns(
        con, "samples", {c: f"the ledger's {_LEDGER_NAMES.get(c, c)}" for c in ledger if c not in staged}
    )
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE merge_check AS
            SELECT sp.rowid AS rid, {line_sql(con, "stage_samples", "sp")} AS line_no, sp.gpu_id, sp.ts, {values}
            FROM temp.stage_samples sp JOIN samples o ON o.gpu_id = sp.gpu_id AND o.ts = sp.ts
            WHERE o.ts BETWEEN (SELECT min(ts) FROM temp.stage_samples) AND (SELECT max(ts) FROM temp.stage_samples)
              AND ({fills})"""
    )
    hits = find_violations(
        con, "samples", source="temp.merge_check", staged=True, limit=None if skip_bad_rows else 1
    )
    # a hit's rid is merge_check's row: the staged row is its rid column
    rids = (
        {r: sr for r, sr in con.execute("SELECT rowid, rid FROM temp.merge_check").fetchall()} if hits else {}
    )
    con.execute("DROP TABLE temp.merge_check")
    with_ledger = "with the values the ledger has for that GPU and time"
    hits = [replace(v, rid=rids[v.rid], reason=f"{v.reason}, {with_ledger}") for v in hits]
    if hits and not skip_bad_rows:
        raise FormatError(path, hits[0].line, hits[0].reason)
    if hits:
        con.execute("CREATE OR REPLACE TEMP TABLE valid_bad (rid BIGINT)")
        con.executemany("INSERT INTO valid_bad VALUES (?)", [[v.rid] for v in hits])
        con.execute("DELETE FROM temp.stage_samples WHERE rowid IN (SELECT rid FROM valid_bad)")
        con.execute("DROP TABLE temp.valid_bad")
        _reseen_gpus(con)
    return hits


def _null_gpu_values(con: duckdb.DuckDBPyConnection, hits: list[Violation]) -> None:
    """A GPU's inventory row stays (samples need it); its implausible value becomes unknown."""
    for v in hits:
        col = v.column if v.column in ("memory_total_mib", "first_seen", "last_seen") else None
        if col is None:
            continue
        con.execute(f"UPDATE temp.stage_gpus SET {col} = NULL WHERE rowid = ?", [v.rid])


def _reseen_gpus(con: duckdb.DuckDBPyConnection) -> None:
    """After bad samples left the stage, a staged GPU's first/last seen and memory total come from the rest."""
    if not _exists(con, "stage_gpus", temp=True):
        return
    gcols = _cols(con, "stage_gpus", temp=True)
    sets = []
    if "first_seen" in gcols:
        sets.append("first_seen = m.lo")
    if "last_seen" in gcols:
        sets.append("last_seen = m.hi")
    scols = _cols(con, "stage_samples", temp=True)
    if "memory_total_mib" in gcols and "mem_total_mib" in scols:
        sets.append("memory_total_mib = least(stage_gpus.memory_total_mib, m.mt)")
    if not sets:
        return
    mt = "max(mem_total_mib)::DOUBLE" if "mem_total_mib" in scols else "NULL::DOUBLE"
    con.execute(
        f"""UPDATE temp.stage_gpus SET {", ".join(sets)}
            FROM (SELECT gpu_id, min(ts) AS lo, max(ts) AS hi, {mt} AS mt
                  FROM temp.stage_samples GROUP BY gpu_id) m
            WHERE m.gpu_id = stage_gpus.gpu_id"""
    )


def record_rejections(
    con: duckdb.DuckDBPyConnection, ingest_id: int, path: str, violations: list[Violation]
) -> None:
    """Keep what ``--skip-bad-rows`` left out, in ``rejected_rows``, so it can be reported and reviewed."""
    if not violations:
        return
    con.executemany(
        "INSERT INTO rejected_rows VALUES (?, ?, ?, ?, ?, ?, ?)",
        [[ingest_id, path, v.line, v.table, v.column, v.value, v.reason] for v in violations],
    )


def ledger_violations(
    con: duckdb.DuckDBPyConnection,
    *,
    max_job_days: float = MAX_JOB_DAYS,
    now: dt.datetime | None = None,
) -> list[Violation]:
    """Every ledger row (in the tables a source writes) that breaks a rule: what ``gpuledger check`` lists."""
    out: list[Violation] = []
    for table in TABLES:
        out.extend(
            find_violations(
                con, table, source=table, staged=False, max_job_days=max_job_days, now=now, limit=None
            )
        )
    con.execute("DROP TABLE IF EXISTS temp.valid_models")
    return out


def screen_live(con: duckdb.DuckDBPyConnection, ingest_id: int, source: str) -> dict[str, int]:
    """The live collectors' checks (NVML flush, Prometheus chunk, Slurm poll): the same rules as a file, but a
    collector must not stop on one bad reading, so the implausible rows are left out and kept in
    ``rejected_rows`` under ``source``; returns the note for the ingest's ``skipped`` counts."""
    bad = validate_stage(con, source, skip_bad_rows=True)
    if not bad:
        return {}
    record_rejections(con, ingest_id, source, bad)
    return {f"rows outside their physical range (rejected_rows of ingest #{ingest_id})": len(bad)}
