"""The generic jobs table (CSV or JSON Lines) for people who export from their own scheduler.

Required columns: ``job_id, user, team, cluster, gpu_model, gpu_count, start, end, state`` (``end`` empty
while a job runs; a ``PENDING`` job lands with no start or end, whatever the row says: it holds no GPU, and
the start a scheduler shows for it is when it expects to start; a finished state with an empty ``end`` is an
error, a row left out under ``--skip-bad-rows``). Optional: ``project, name, kind, submit, tier, exit_reason,
last_checkpoint`` and the run columns that feed cost-per-work and batch-size analyses: ``model, params,
precision, optimizer, batch_size, seq_len, peak_mem_mib, samples_per_s, tokens_per_s, tokens, samples, epochs,
steps, grad_accum, n_layers, hidden_size, grad_noise_scale, requests, generated_tokens``. Column order is
free; unknown columns are an error (a typo would otherwise silently lose data). Times are ISO-8601; naive
times are read in ``--tz`` (default UTC).
"""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import duckdb

from collectors.base import IngestOptions, Sniff, read_head
from collectors.lines import file_lines, reader_error_line
from collectors.reader_errors import describe_failure
from collectors.row_checks import Check, screen_rows
from collectors.sql_text import nullif_tokens, sql_path, ts_utc
from collectors.time_zones import session_zone
from collectors.validate import name_columns
from gpuledger.ledger.errors import FormatError
from gpuledger.ledger.job_states import (
    PENDING,
    TABLE_FINISHED_STATES,
    TABLE_STATES,
    state_word_sql,
    stored_state_sql,
)
from gpuledger.ledger.reference import model_sql_case
from gpuledger.ledger.sql import sql_list

REQUIRED = ("job_id", "user", "team", "cluster", "gpu_model", "gpu_count", "start", "end", "state")
OPTIONAL = ("project", "name", "kind", "submit", "tier", "exit_reason", "last_checkpoint")
RUN_NUMERIC = {
    "params": "DOUBLE",
    "batch_size": "INTEGER",
    "seq_len": "INTEGER",
    "peak_mem_mib": "DOUBLE",
    "samples_per_s": "DOUBLE",
    "tokens_per_s": "DOUBLE",
    "tokens": "DOUBLE",
    "samples": "DOUBLE",
    "epochs": "DOUBLE",
    "steps": "BIGINT",
    "grad_accum": "INTEGER",
    "n_layers": "INTEGER",
    "hidden_size": "INTEGER",
    "grad_noise_scale": "DOUBLE",
    "requests": "DOUBLE",
    "generated_tokens": "DOUBLE",
}
RUN_TEXT = ("model", "precision", "optimizer")
KINDS = {
    "training": "training",
    "train": "training",
    "pretraining": "training",
    "fine-tune": "fine-tune",
    "finetune": "fine-tune",
    "fine_tune": "fine-tune",
    "sft": "fine-tune",
    "inference": "inference",
    "serving": "inference",
    "eval": "other",
    "evaluation": "other",
    "interactive": "interactive",
    "notebook": "interactive",
    "other": "other",
}
TIERS = ("on_demand", "spot", "reserved", "on_prem")


def _kind_case(col: str) -> str:
    arms = " ".join(f"WHEN '{k}' THEN '{v}'" for k, v in KINDS.items())
    return f"(CASE lower({col}) {arms} ELSE NULL END)"


class JobsTable:
    name = "jobs_csv"
    description = "generic jobs table, CSV with a header (job_id,user,team,cluster,gpu_model,gpu_count,start,end,state,...)"
    json_lines = False

    def sniff(self, path: Path, head: str) -> Sniff:
        first = head.lstrip("\ufeff").splitlines()[0] if head.strip() else ""
        if self.json_lines:
            try:
                obj = json.loads(first)
            except ValueError:
                return Sniff(0, "")
            if isinstance(obj, dict) and {"job_id", "gpu_count"} <= obj.keys():
                return Sniff(0.9)
            return (
                Sniff(0, "a JSON Lines jobs table needs job_id and gpu_count keys")
                if isinstance(obj, dict)
                else Sniff(0)
            )
        cols = [c.strip().lower() for c in re.split(r"[,\t;]", first)]
        have = set(cols) & set(REQUIRED)
        if {"job_id", "gpu_count"} <= have and len(have) >= 5:
            return Sniff(0.9)
        if "job_id" in cols:
            missing = sorted(set(REQUIRED) - set(cols))
            return Sniff(0, f"jobs_csv: header lacks {', '.join(missing)}")
        return Sniff(0)

    def _read(self, con: duckdb.DuckDBPyConnection, path: Path) -> None:
        src = sql_path(path)[1:-1]
        try:
            if self.json_lines:
                con.execute(
                    f"""CREATE TEMP TABLE raw_jobs AS
                        SELECT row_number() OVER () AS line_no, *
                        FROM read_json('{src}', format='newline_delimited', records=true, sample_size=-1)"""
                )
                # everything as text, like the CSV path, so validation is the same
                cols = [r[0] for r in con.execute("DESCRIBE raw_jobs").fetchall() if r[0] != "line_no"]
                casts = ", ".join(f'CAST("{c}" AS VARCHAR) AS "{c.lower()}"' for c in cols)
                con.execute(f"CREATE OR REPLACE TEMP TABLE raw_jobs AS SELECT line_no, {casts} FROM raw_jobs")
            else:
                # The header is read here, not guessed: auto-detection mistakes a truncated file's layout.
                header = next(csv.reader(io.StringIO(read_head(path).lstrip("\ufeff"))), [])
                seen: set[str] = set()
                for name in header:
                    key = name.strip().lower()
                    if key in seen:
                        raise FormatError(path, 1, f"column {name.strip()!r} appears twice in the header")
                    seen.add(key)
                spec = ", ".join(f"'{c.replace(chr(39), chr(39) * 2)}': 'VARCHAR'" for c in header)
                con.execute(
                    f"""CREATE TEMP TABLE raw_jobs AS
                        SELECT row_number() OVER () + 1 AS line_no, *
                        FROM read_csv('{src}', header=true, auto_detect=false, delim=',', quote='"',
                                      escape='"', columns={{{spec}}}, strict_mode=true, null_padding=false)"""
                )
                cols = [r[0] for r in con.execute("DESCRIBE raw_jobs").fetchall() if r[0] != "line_no"]
                renames = ", ".join(f'"{c}" AS "{c.strip().lower()}"' for c in cols)
                con.execute(
                    f"CREATE OR REPLACE TEMP TABLE raw_jobs AS SELECT line_no, {renames} FROM raw_jobs"
                )
        except duckdb.Error as exc:
            line = reader_error_line(path, str(exc), csv=not self.json_lines)
            raise FormatError(path, line, _first_sentence(str(exc))) from None
        file_lines(path, csv=not self.json_lines).renumber(con, "raw_jobs")

    def stage(self, con: duckdb.DuckDBPyConnection, path: Path, opts: IngestOptions) -> dict[str, int]:
        self._read(con, path)
        cols = [r[0] for r in con.execute("DESCRIBE raw_jobs").fetchall() if r[0] != "line_no"]
        header_line = 1 if not self.json_lines else None
        missing = [c for c in REQUIRED if c not in cols]
        if opts.cluster and "cluster" in missing:
            missing.remove("cluster")
        if missing:
            raise FormatError(path, header_line, f"missing column(s): {', '.join(missing)}")
        known = set(REQUIRED) | set(OPTIONAL) | set(RUN_NUMERIC) | set(RUN_TEXT)
        unknown = [c for c in cols if c not in known]
        if unknown:
            raise FormatError(
                path, header_line, f"unknown column {unknown[0]!r} (see README: generic jobs table)"
            )

        def col(name: str) -> str:
            return nullif_tokens(f'"{name}"') if name in cols else "NULL"

        state = stored_state_sql(state_word_sql(col("state")))
        # A pending job holds no GPU: the start a scheduler shows for it is when it expects to start.
        pending = f"coalesce({state} = '{PENDING}', false)"
        no_end = f"{state} IN ({sql_list(TABLE_FINISHED_STATES)}) AND {col('end')} IS NULL"
        notes: dict[str, int] = {}
        checks = [
            Check(f"{col('job_id')} IS NULL", "job_id is empty"),
            Check(
                f"TRY_CAST({col('gpu_count')} AS DOUBLE) IS NULL OR TRY_CAST({col('gpu_count')} AS DOUBLE) < 0",
                'column "gpu_count" is not a GPU count: "{value}"',
                '"gpu_count"',
            ),
            Check(
                f"{ts_utc(chr(34) + 'start' + chr(34))} IS NULL AND ({col('start')} IS NOT NULL OR NOT {pending})",
                'column "start" is not a time: "{value}"',
                '"start"',
            ),
            Check(
                f"{col('end')} IS NOT NULL AND {ts_utc(chr(34) + 'end' + chr(34))} IS NULL",
                'column "end" is not a time: "{value}"',
                '"end"',
            ),
            Check(
                f"{ts_utc(chr(34) + 'end' + chr(34))} < {ts_utc(chr(34) + 'start' + chr(34))} AND NOT {pending}",
                'job ends before it starts (end "{value}")',
                '"end"',
            ),
            Check(
                f"{state} NOT IN ({sql_list(TABLE_STATES)}) OR {col('state')} IS NULL",
                'column "state" is not a job state: "{value}"',
                '"state"',
            ),
            Check(
                no_end,
                'column "end" is empty for a {value} job: a finished job needs the time it ended '
                "(leave it empty only while the job is pending or running)",
                state,
            ),
        ]
        if "kind" in cols:
            checks.append(
                Check(
                    f"{col('kind')} IS NOT NULL AND {_kind_case(col('kind'))} IS NULL",
                    'column "kind" must be one of training, fine-tune, inference, interactive, other: "{value}"',
                    '"kind"',
                )
            )
        if "tier" in cols:
            checks.append(
                Check(
                    f"{col('tier')} IS NOT NULL AND lower({col('tier')}) NOT IN ({', '.join(repr(t) for t in TIERS)})",
                    'column "tier" must be one of on_demand, spot, reserved, on_prem: "{value}"',
                    '"tier"',
                )
            )
        for name in ("submit", "last_checkpoint"):
            if name in cols:
                checks.append(
                    Check(
                        f"{col(name)} IS NOT NULL AND {ts_utc(chr(34) + name + chr(34))} IS NULL",
                        f'column "{name}" is not a time: "{{value}}"',
                        f'"{name}"',
                    )
                )
        for name, _typ in RUN_NUMERIC.items():
            if name in cols:
                checks.append(
                    Check(
                        f"{col(name)} IS NOT NULL AND (TRY_CAST({col(name)} AS DOUBLE) IS NULL OR TRY_CAST({col(name)} AS DOUBLE) < 0)",
                        f'column "{name}" is not a non-negative number: "{{value}}"',
                        f'"{name}"',
                    )
                )
        with session_zone(con, opts.tz or "UTC"):
            screen_rows(con, path, "raw_jobs", checks, skip_bad_rows=opts.skip_bad_rows)
            dup = con.execute(
                f"SELECT {col('job_id')}, list(line_no ORDER BY line_no) FROM raw_jobs GROUP BY 1 HAVING count(*) > 1 LIMIT 1"
            ).fetchall()
            if dup:
                raise FormatError(
                    path,
                    int(dup[0][1][1]),
                    f"job_id {dup[0][0]!r} appears twice (first on line {dup[0][1][0]})",
                )
            cluster = col("cluster") if "cluster" in cols else "NULL"
            if opts.cluster:
                cluster = f"coalesce({cluster}, '{opts.cluster.replace(chr(39), chr(39) * 2)}')"
            kind = _kind_case(col("kind")) if "kind" in cols else "NULL"
            tier = f"lower({col('tier')})" if "tier" in cols else "NULL"
            con.execute(
                f"""
                CREATE TEMP TABLE stage_jobs AS SELECT
                    {col("job_id")} AS job_id,
                    '{self.name}' AS source,
                    {cluster} AS cluster,
                    {col("user")} AS user_name,
                    {col("team")} AS team,
                    {col("project")} AS project,
                    {col("name")} AS name,
                    coalesce({kind}, 'other') AS kind,
                    coalesce({model_sql_case(col("gpu_model"))}, {col("gpu_model")}) AS gpu_model,
                    CAST({col("gpu_count")} AS DOUBLE) AS gpu_count,
                    {tier} AS pricing_tier,
                    {ts_utc(col("submit")) if "submit" in cols else "NULL::TIMESTAMP"} AS submit_ts,
                    -- a pending job's times are blanked when it lands (collectors/landing.py _land_jobs), after
                    -- its start has told a requeue from an older record, as for every job source
                    {ts_utc(col("start"))} AS start_ts,
                    {ts_utc(col("end"))} AS end_ts,
                    {state} AS state,
                    {col("exit_reason")} AS exit_reason,
                    {ts_utc(col("last_checkpoint")) if "last_checkpoint" in cols else "NULL::TIMESTAMP"} AS last_checkpoint_ts,
                    line_no
                FROM raw_jobs ORDER BY line_no
                """
            )
        run_cols = [c for c in (*RUN_NUMERIC, *RUN_TEXT) if c in cols]
        if run_cols:
            fields = [f"CAST({col(c)} AS {RUN_NUMERIC[c]}) AS {c}" for c in RUN_NUMERIC if c in cols]
            fields += [
                f"lower({col(c)}) AS {c}" if c != "model" else f"{col(c)} AS {c}"
                for c in RUN_TEXT
                if c in cols
            ]
            any_run = " OR ".join(f"{col(c)} IS NOT NULL" for c in run_cols)
            con.execute(
                f"""CREATE TEMP TABLE stage_training_runs AS
                    SELECT {col("job_id")} AS job_id, '{self.name}' AS source, {", ".join(fields)}, line_no
                    FROM raw_jobs WHERE {any_run} ORDER BY line_no"""
            )
        name_columns(
            con,
            "jobs",
            {
                "start_ts": "start",
                "end_ts": "end",
                "submit_ts": "submit",
                "last_checkpoint_ts": "last_checkpoint",
            },
        )
        con.execute("DROP TABLE temp.raw_jobs")
        return notes


class JobsJsonl(JobsTable):
    name = "jobs_jsonl"
    description = "generic jobs table as JSON Lines, one object per job with the jobs_csv keys"
    json_lines = True


def _first_sentence(message: str) -> str:
    """DuckDB's reader error → what is wrong with the line (its first line only says "CSV Error on Line: 3")."""
    fields = re.search(r"Expected Number of Columns: (\d+) Found: (\d+)", message)
    if fields:
        want, got = int(fields.group(1)), int(fields.group(2))
        why = "a truncated line?" if got < want else "a comma inside an unquoted value?"
        return f"expected {want} fields, found {got} ({why})"
    if "unterminated quote" in message:
        return "a quoted value is never closed (unterminated quote)"
    known = describe_failure("", RuntimeError(message)).reason  # the sentence every parser uses
    if not known.startswith("could not be read"):
        return known
    text = message.split("\n")[0]
    text = re.sub(r"^[A-Za-z ]*Error: ", "", text)
    return text[:300]
