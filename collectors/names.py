"""Names land neutral: no control character or bidi override of a file reaches the ledger's name columns.

A team, user or job name is someone else's text, shown later on a terminal, in a report, in a mail. The
landing (collectors/landing.py ``land``) passes every staged name column through
gpuledger.ledger.text.neutral_sql, the one rule (controls, CR/LF and tabs included, become a space; bidi
controls are dropped), so a name is stored as it will be shown. Identifiers (job_id, gpu_id) are left as
the source wrote them, since other tables and later files join on them; every output neutralizes them.
"""

from __future__ import annotations

import duckdb

from gpuledger.ledger.text import neutral_sql, unneutral_sql

# stage table → its name columns (free text a source chose; not identifiers)
NAME_COLUMNS: dict[str, tuple[str, ...]] = {
    "stage_jobs": (
        "cluster",
        "user_name",
        "team",
        "project",
        "name",
        "partition",
        "state",
        "exit_reason",
        "gpu_model",
        "pricing_tier",
        "kind",
    ),
    "stage_gpus": ("host", "model", "model_raw", "cluster", "mig_profile"),
    "stage_allocations": ("host",),
    "stage_processes": ("process_name",),
    "stage_training_runs": ("model", "precision", "optimizer"),
    "stage_capacity": ("cluster", "gpu_model"),
}


def neutralize_names(con: duckdb.DuckDBPyConnection, staged: set[str]) -> int:
    """Rewrite the staged name columns that hold a control or bidi character; returns the values changed.
    One scan per column (RE2, linear) and an UPDATE only where a value has one."""
    changed = 0
    for table, columns in NAME_COLUMNS.items():
        if table not in staged:
            continue
        present = set(con.table(f"temp.{table}").columns)
        for col in columns:
            if col not in present:
                continue
            changed += int(
                con.execute(
                    f"UPDATE temp.{table} SET {col} = {neutral_sql(col)} WHERE {unneutral_sql(col)}"
                ).fetchall()[0][0]
            )
    return changed
