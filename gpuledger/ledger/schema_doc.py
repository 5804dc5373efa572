"""Write docs/schema.md from gpuledger/ledger/schema.py, so the column docs live next to the DDL and cannot drift.

``python -m gpuledger.ledger.schema_doc > docs/schema.md``; tests/test_docs.py fails when the file is stale.
"""

from __future__ import annotations

import re

from gpuledger.ledger.schema import MIGRATIONS, SCHEMA_VERSION

INTRO = f"""# The ledger's schema (version {SCHEMA_VERSION})

One DuckDB file holds everything; `gpuledger/ledger/schema.py` defines it (this page is generated from it:
`python -m gpuledger.ledger.schema_doc > docs/schema.md`). Conventions:

- every time is a naive `TIMESTAMP` meaning **UTC**; collectors convert on the way in;
- names carry their unit: `_mib` (mebibytes), `_w` (watts), `_j` (joules), `_pct` (percent, 0–100),
  `_s` (seconds), `_usd` (US dollars), `_tflops` (10¹² floating-point operations per second);
- a value a source does not report is NULL, never 0;
- `gpu_id` is the GPU's UUID where the source has one (a MIG instance: `<uuid>/<GPU_I_ID>`), else
  `host:index`; `job_id` is unique across sources (`<cluster>/<id>` where ids could collide);
- `ingest_id` ties a row to the ingest (file, flush or demo build) that brought it: `--replace` and the
  demo's rebuild remove a source's rows by it; `schema_meta.schema_version` is the schema version, and
  migrations in `gpuledger/ledger/schema.py` move an older file forward inside one transaction.
"""

_TABLE = re.compile(r"CREATE TABLE IF NOT EXISTS (\w+) \((.*)\)\s*$", re.S)
_COLUMN = re.compile(
    r"^(\w+)\s+([A-Z]+(?:\(\d+\))?)((?:\s+PRIMARY KEY)?(?:\s+NOT NULL)?)[^-]*(?:--\s*(.*))?$"
)


def _rows(body: str) -> list[str]:
    rows = []
    for raw in body.splitlines():
        line = raw.strip()
        if not line or line.startswith("--"):
            continue
        col = _COLUMN.match(line.rstrip(",")) or _COLUMN.match(line)
        if col:
            name, typ, flags, comment = col.groups()
            flags = " ".join(flags.split()).lower()
            rows.append(
                f"| `{name}` | {typ}{' ' + flags if flags else ''} | {(comment or '').replace('|', '/')} |"
            )
    return rows


_ADD_COLUMN = re.compile(r"ALTER TABLE (\w+) ADD COLUMN IF NOT EXISTS (.*)", re.S)

_DERIVED = re.compile(
    r"CREATE TABLE IF NOT EXISTS (\w+) AS\s+SELECT (\w+)(?:::DATE)? AS (day|hour), \* EXCLUDE \(\2\) FROM (\w+)",
    re.S,
)


def markdown() -> str:
    parts = [INTRO]
    tables: dict[str, list[str]] = {}
    added: dict[str, list[str]] = {}
    for sql in (s for migration in MIGRATIONS for s in migration):
        text = sql.strip()
        alter = _ADD_COLUMN.match(text)
        if alter:  # a later version's column: listed with its table
            added.setdefault(alter.group(1), []).extend(_rows(alter.group(2)))
            continue
        derived = _DERIVED.search(text)
        match = _TABLE.search(text)
        if derived:
            table, key, per, base = derived.groups()
            first = (
                "| `day` | DATE | UTC day |" if per == "day" else "| `hour` | TIMESTAMP | UTC hour (start) |"
            )
            rows = [first, *[r for r in tables[base] if not r.startswith(f"| `{key}` |")]]
            parts.append(
                f"\n## `{table}`\n\nThe columns of `{base}`, summed per UTC {per} instead of per {key}.\n"
            )
        elif match:
            table, body = match.groups()
            rows = _rows(body)
            parts.append(f"\n## `{table}`\n")
        else:
            continue
        tables[table] = rows
        parts.append("| column | type | meaning (unit) |\n|---|---|---|")
        parts.append(f"<!-- rows:{table} -->")
    text = "\n".join(parts) + "\n"
    for table, rows in tables.items():
        text = text.replace(f"<!-- rows:{table} -->", "\n".join(rows + added.get(table, [])))
    return text


if __name__ == "__main__":
    print(markdown(), end="")
