"""Two series of one GPU that overlap in time count its time once.

Each sample stands for the time to its own series' next sample (collectors/landing.py ``_land_samples``). Two
loggers of the same GPU (dcgm-exporter scraping at :00 and an nvidia-smi loop at :15, or one log cut into its
odd and even lines and ingested as two files) would then each cover the GPU's whole time: twice its GPU-hours,
energy and dollars. Samples at the very same time were already merged into one row; this is the rest.

The rule: the time the ledger already covers stays where it is, and a newly landed sample stands for the first
stretch of its own span ``[ts, ts + interval_s)`` that no earlier ingest's sample of its GPU covers: it starts
where the covered time it falls in ends (its ``ts`` moves there) and ends where the next covered time begins or
its own span does. A sample left with nothing is removed (counted in the report: its time was counted
already). So a GPU's samples never overlap and its seconds are the union of its series' spans, whichever
order the files come in (up to the rare uncovered pieces beyond a covered stretch inside one long new
sample, which are not counted): the second series adds the first one's silences, and a new day whose first
poll comes a few milliseconds before the last day's last sample ended loses those milliseconds, not the sample.
Each sample keeps covering ``[ts, ts + interval_s)``, so a third file is measured against what is really there.

How: the old samples near the batch form islands of covered time per GPU (a sample that starts after the
covered time before it ends starts a new one); two ASOF joins find, for each new sample, the island its time
falls in and the next island after. Only run when an earlier ingest has samples within a day before the
batch or inside it (never for a first ingest). Known limit: ``--replace`` of the earlier file does not give
back what the later one was cut to.
"""

from __future__ import annotations

import duckdb

from gpuledger.ledger.sample_time import MAX_REACH, cadence_sql, interval_sql, sample_end_sql

_END = sample_end_sql()
# a sample left with less than this (the rounding of FLOAT intervals) stands for nothing
_NOTHING_S = 1e-3


def _islands(spans: str) -> str:
    """SQL: the covered time of each GPU as islands ``(gpu_id, lo, hi)``, from ``spans`` (a query of
    ``gpu_id, s, e``): a span that starts after the ones before it end starts a new island."""
    return f"""
        WITH o AS ({spans}),
        m AS (SELECT *, max(e) OVER (PARTITION BY gpu_id ORDER BY s, e
                                     ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_e FROM o),
        g AS (SELECT *, sum(CASE WHEN prev_e IS NULL OR s > prev_e THEN 1 ELSE 0 END)
                            OVER (PARTITION BY gpu_id ORDER BY s, e ROWS UNBOUNDED PRECEDING) AS island FROM m)
        SELECT gpu_id, min(s) AS lo, max(e) AS hi FROM g GROUP BY gpu_id, island"""


def _first_uncovered(rows: str, islands: str, end: str) -> str:
    """SQL: the rows of ``rows`` (``gpu_id, ts`` and their span's end ``end``) with ``start`` and ``stop``, the
    first stretch of ``[ts, end)`` outside the TEMP table ``islands``: from the end of the island ``ts`` falls
    in (else ``ts``) to the next island's start or ``end``."""
    return f"""
        WITH started AS (
            SELECT r.*, CASE WHEN i.hi > r.ts THEN i.hi ELSE r.ts END AS start
            FROM ({rows}) r ASOF LEFT JOIN {islands} i ON i.gpu_id = r.gpu_id AND i.lo <= r.ts
        )
        SELECT s.*, least(s.{end}, coalesce(j.lo, s.{end})) AS stop
        FROM started s ASOF LEFT JOIN {islands} j ON j.gpu_id = s.gpu_id AND s.start < j.lo"""


def extend_merged(con: duckdb.DuckDBPyConnection, ingest_id: int) -> int:
    """A staged sample at the very time of a ledger sample merged into that row, which keeps its own
    interval; where the staged sample's own span ``[ts, ts + its interval)`` reaches past the time the ledger
    covers there, the first uncovered stretch of it counts: where it starts at that row's end (the row was its
    file's last poll: a log ingested again as it grows) the row's interval grows to it; else it lands as a
    sample of this ingest, at the stretch's start, with the staged sample's values, when at least as long as
    the row it merged into (a shorter sliver is clock rounding between two series, left as it was). The staged
    sample's own interval is the samples' rule (gpuledger/ledger/sample_time.py ``interval_sql``). Returns how many samples that added. Runs only when this ingest merged samples (``held_rows``)."""
    merged = con.execute(
        "SELECT count(*) FROM held_rows WHERE table_name = 'samples' AND ingest_id = ?", [ingest_id]
    ).fetchall()[0][0]
    if not merged or "stage_samples" not in {
        r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE temporary").fetchall()
    }:
        return 0
    staged = {r[0] for r in con.execute("DESCRIBE temp.stage_samples").fetchall()}
    ledger = [r[0] for r in con.execute("DESCRIBE samples").fetchall()]
    values = [
        c for c in ledger if c in staged and c not in ("ts", "gpu_id", "interval_s", "ingest_id", "job_id")
    ]
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE merged_spans AS
            WITH mg AS (SELECT DISTINCT row_key AS gpu_id, ts FROM held_rows
                        WHERE table_name = 'samples' AND ingest_id = $ingest),
            own AS (
                SELECT gpu_id, ts, epoch(lead(ts) OVER (PARTITION BY gpu_id ORDER BY ts) - ts) AS gap_s
                FROM (SELECT DISTINCT gpu_id, ts FROM temp.stage_samples
                      WHERE gpu_id IN (SELECT gpu_id FROM mg))
            ),
            cad AS (SELECT gpu_id, {cadence_sql()} AS cad_s FROM own GROUP BY gpu_id)
            SELECT own.gpu_id, own.ts,
                   {sample_end_sql("own.ts", interval_sql("own.gap_s", "cad.cad_s"))}
                       AS own_end
            FROM own JOIN cad USING (gpu_id) JOIN mg USING (gpu_id, ts)""",
        {"ingest": ingest_id},
    )
    lo, hi = con.execute("SELECT min(ts), max(own_end) FROM merged_spans").fetchall()[0]
    # every sample of those GPUs around them, of any ingest, as islands of covered time
    spans = f"""SELECT gpu_id, ts AS s, {_END} AS e FROM samples
                WHERE gpu_id IN (SELECT gpu_id FROM merged_spans)
                  AND ts >= CAST($lo AS TIMESTAMP) - {MAX_REACH} AND ts < $hi"""
    con.execute(f"CREATE OR REPLACE TEMP TABLE merged_islands AS {_islands(spans)}", {"lo": lo, "hi": hi})
    rest = _first_uncovered("SELECT gpu_id, ts, own_end FROM merged_spans", "merged_islands", "own_end")
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE merged_rest AS
            SELECT e.*, r.rowid AS row_rid, {sample_end_sql("r.ts", "r.interval_s")} = e.start AS at_row_end, r.interval_s::DOUBLE AS row_iv
            FROM ({rest}) e JOIN samples r ON r.gpu_id = e.gpu_id AND r.ts = e.ts
            WHERE epoch(e.stop - e.start) >= {_NOTHING_S}"""
    )
    # the rest starts where the row it merged into ends (the row was its file's last poll, given the
    # cadence, as a log ingested again as it grows): the row stands for it, as one ingest of the whole log
    # would have it; its GPU-time is rolled up again (merged_windows)
    con.execute(
        """UPDATE samples SET interval_s = samples.interval_s + epoch(r.stop - r.start) FROM merged_rest r
           WHERE samples.rowid = r.row_rid AND r.at_row_end"""
    )
    con.execute("CREATE TEMP TABLE IF NOT EXISTS merged_windows (gpu_id VARCHAR, lo TIMESTAMP, hi TIMESTAMP)")
    con.execute("INSERT INTO merged_windows SELECT gpu_id, ts, ts FROM merged_rest WHERE at_row_end")
    # else the rest is its own sample, at its start, with the new file's values: when at least as long as the
    # row it merged into (a shorter sliver is clock rounding between two series, left as it was)
    added = con.execute(
        f"""INSERT INTO samples (gpu_id, ts, interval_s, ingest_id{"".join(", " + c for c in values)})
            SELECT p.gpu_id, p.start, epoch(p.stop - p.start), $ingest{"".join(", any_value(st." + c + ")" for c in values)}
            FROM merged_rest p JOIN temp.stage_samples st ON st.gpu_id = p.gpu_id AND st.ts = p.ts
            WHERE NOT p.at_row_end AND epoch(p.stop - p.start) >= p.row_iv
            GROUP BY p.gpu_id, p.start, p.stop""",
        {"ingest": ingest_id},
    ).fetchall()[0][0]
    con.execute("DROP TABLE temp.merged_rest")
    con.execute("DROP TABLE temp.merged_spans")
    con.execute("DROP TABLE temp.merged_islands")
    return int(added)


def settle_interleaved(con: duckdb.DuckDBPyConnection, ingest_id: int) -> int:
    """Apply the rule to the samples ``ingest_id`` just landed; returns how many were removed."""
    lo, hi = con.execute(
        f"SELECT min(ts), max({_END}) FROM samples WHERE ingest_id = ?", [ingest_id]
    ).fetchall()[0]
    if lo is None:
        return 0
    bounds = {"lo": lo, "hi": hi, "ingest": ingest_id}
    near = con.execute(
        f"""SELECT count(*) FROM samples
            WHERE ts >= CAST($lo AS TIMESTAMP) - {MAX_REACH} AND ts < $hi AND ingest_id <> $ingest""",
        bounds,
    ).fetchall()[0][0]
    if not near:
        return 0
    # each GPU's old covered time near the new samples, as islands [lo, hi)
    spans = f"""SELECT o.gpu_id, o.ts AS s, {sample_end_sql("o.ts", "o.interval_s")} AS e
                FROM samples o JOIN (SELECT gpu_id, min(ts) AS lo, max({_END}) AS hi FROM samples
                                     WHERE ingest_id = $ingest AND ts >= $lo AND ts < $hi GROUP BY gpu_id) n
                  ON n.gpu_id = o.gpu_id
                WHERE o.ingest_id <> $ingest AND o.ts >= CAST($lo AS TIMESTAMP) - {MAX_REACH} AND o.ts < $hi
                  AND o.ts < n.hi AND {sample_end_sql("o.ts", "o.interval_s")} > n.lo"""
    con.execute(f"CREATE OR REPLACE TEMP TABLE old_islands AS {_islands(spans)}", bounds)
    # each new sample of those GPUs: where its uncovered stretch starts and ends
    new = f"""SELECT rowid AS rid, gpu_id, ts, {_END} AS te FROM samples
              WHERE ingest_id = $ingest AND ts >= $lo AND ts < $hi
                AND gpu_id IN (SELECT DISTINCT gpu_id FROM old_islands)"""
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE new_cover AS
            SELECT rid, start, epoch(stop - start) AS left_s FROM ({_first_uncovered(new, "old_islands", "te")})
            WHERE start <> ts OR stop <> te""",
        bounds,
    )
    removed = con.execute(
        f"DELETE FROM samples WHERE rowid IN (SELECT rid FROM new_cover WHERE left_s < {_NOTHING_S})"
    ).fetchall()[0][0]
    con.execute(
        f"""UPDATE samples SET ts = c.start, interval_s = c.left_s FROM new_cover c
            WHERE samples.rowid = c.rid AND c.left_s >= {_NOTHING_S}"""
    )
    con.execute("DROP TABLE temp.old_islands")
    con.execute("DROP TABLE temp.new_cover")
    return int(removed)
