"""``ingest --job ID`` on a telemetry file: its samples are that job's, or the ingest is refused.

A telemetry file (nvidia-smi, dcgm, Prometheus, NVML replay) carries no job. ``--job`` says whose GPU it
watched: the staged samples inside the job's span (start .. end, open while it runs) are labelled with the
job, as a source's own label would be (dcgm ``hpc_job``): the job's utilization and waste are read from them,
the card is claimed (no ``unattributed:<card>`` pseudo-job beside the job, so the card's hour is billed
once), and a host-level allocation of the job takes the card as ``sample_label`` evidence
(collectors/attribute.py). Samples outside the span stay unlabelled: that time of the card is capacity
nobody held. Samples a source already labelled keep their label.

It is never a silent no-op: a job the ledger does not hold, or a span none of the file's samples falls in,
refuses the file (``error: FILE: reason``, nothing written) naming the job ids that do exist. Sources that
read ``--job`` themselves (training logs, W&B runs, per-job pmon logs) are not touched here.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from gpuledger.ledger.errors import FormatError

# parsers that give --job a meaning of their own (collectors/wandb.py, nvidia_smi_pmon.py, training_logs.py)
OWN_JOB_OPTION = frozenset(
    {
        "wandb_events",
        "wandb_metadata",
        "nvidia_smi_pmon",
        "hf_trainer_state",
        "llamafactory_log",
        "lightning_csv",
    }
)
NAMED_AT_MOST = 10  # job ids an error names


def _staged_samples(con: duckdb.DuckDBPyConnection) -> bool:
    return bool(
        con.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE temporary AND table_name = 'stage_samples'"
        ).fetchall()[0][0]
    )


def _known_jobs(con: duckdb.DuckDBPyConnection) -> str:
    """Up to NAMED_AT_MOST job ids of the ledger, those running during the file's samples first."""
    rows = con.execute(
        f"""WITH f AS (SELECT min(ts) AS lo, max(ts) AS hi FROM stage_samples)
            SELECT j.job_id, count(*) OVER () AS n FROM jobs j, f
            ORDER BY (j.start_ts <= f.hi AND coalesce(j.end_ts, TIMESTAMP '9999-12-31') > f.lo) DESC NULLS LAST,
                     j.start_ts DESC NULLS LAST, j.job_id
            LIMIT {NAMED_AT_MOST}"""
    ).fetchall()
    if not rows:
        return "the ledger holds no job yet (ingest the job records first)"
    more = rows[0][1] - len(rows)
    return (
        "job ids in the ledger: "
        + ", ".join(r[0] for r in rows)
        + (f" (and {more} more)" if more > 0 else "")
    )


def tie_to_job(con: duckdb.DuckDBPyConnection, path: Path, parser: str, job_id: str | None) -> None:
    """Label the staged samples inside ``job_id``'s span with it (module docstring); raise FormatError when
    the job is unknown or none of the samples falls inside its span."""
    if job_id is None or parser in OWN_JOB_OPTION or not _staged_samples(con):
        return
    span = con.execute("SELECT start_ts, end_ts FROM jobs WHERE job_id = ?", [job_id]).fetchall()
    if not span:
        raise FormatError(path, None, f"--job {job_id}: no such job in the ledger; {_known_jobs(con)}")
    cols = {r[0] for r in con.execute("DESCRIBE stage_samples").fetchall()}
    if "job_id" not in cols:
        con.execute("ALTER TABLE stage_samples ADD COLUMN job_id VARCHAR")
    inside = """ts >= coalesce(?::TIMESTAMP, TIMESTAMP '0001-01-01')
                AND ts < coalesce(?::TIMESTAMP, TIMESTAMP '9999-12-31')"""
    (n,) = con.execute(f"SELECT count(*) FROM stage_samples WHERE {inside}", list(span[0])).fetchall()[0]
    if n == 0:
        lo, hi = con.execute("SELECT min(ts), max(ts) FROM stage_samples").fetchall()[0]
        start, end = span[0]
        raise FormatError(
            path,
            None,
            f"--job {job_id}: the job ran {start} to {end or 'now'} (UTC), and none of the file's samples "
            f"({lo} to {hi}) falls inside it; {_known_jobs(con)}",
        )
    con.execute(f"UPDATE stage_samples SET job_id = ? WHERE job_id IS NULL AND {inside}", [job_id, *span[0]])
