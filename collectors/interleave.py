"""Two series of one GPU that overlap in time count its time once.

Each sample stands for the time to its own series' next sample (collectors/base.py ``_land_samples``). Two
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

# no sample stands for more than a day (collectors/validate.py), so none earlier can reach a new one
_REACH = "INTERVAL 1 DAY"
_END = "ts + to_microseconds(CAST(round(interval_s * 1e6) AS BIGINT))"
# a sample left with less than this (the rounding of FLOAT intervals) stands for nothing
_NOTHING_S = 1e-3


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
            WHERE ts >= CAST($lo AS TIMESTAMP) - {_REACH} AND ts < $hi AND ingest_id <> $ingest""",
        bounds,
    ).fetchall()[0][0]
    if not near:
        return 0
    # each GPU's old covered time near the new samples, as islands [lo, hi)
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE old_islands AS
            WITH span AS (
                SELECT gpu_id, min(ts) AS lo, max({_END}) AS hi FROM samples
                WHERE ingest_id = $ingest AND ts >= $lo AND ts < $hi GROUP BY gpu_id
            ),
            o AS (
                SELECT o.gpu_id, o.ts AS s, o.{_END} AS e FROM samples o JOIN span n ON n.gpu_id = o.gpu_id
                WHERE o.ingest_id <> $ingest AND o.ts >= CAST($lo AS TIMESTAMP) - {_REACH} AND o.ts < $hi
                  AND o.ts < n.hi AND o.{_END} > n.lo
            ),
            m AS (
                SELECT *, max(e) OVER (PARTITION BY gpu_id ORDER BY s, e
                                       ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_e
                FROM o
            ),
            g AS (
                SELECT *, sum(CASE WHEN prev_e IS NULL OR s > prev_e THEN 1 ELSE 0 END)
                              OVER (PARTITION BY gpu_id ORDER BY s, e ROWS UNBOUNDED PRECEDING) AS island
                FROM m
            )
            SELECT gpu_id, min(s) AS lo, max(e) AS hi FROM g GROUP BY gpu_id, island""",
        bounds,
    )
    # each new sample of those GPUs: where its uncovered stretch starts and ends
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE new_cover AS
            WITH n AS (
                SELECT rowid AS rid, gpu_id, ts, {_END} AS te FROM samples
                WHERE ingest_id = $ingest AND ts >= $lo AND ts < $hi
                  AND gpu_id IN (SELECT DISTINCT gpu_id FROM old_islands)
            ),
            started AS (
                SELECT n.*, CASE WHEN i.hi > n.ts THEN i.hi ELSE n.ts END AS start
                FROM n ASOF LEFT JOIN old_islands i ON i.gpu_id = n.gpu_id AND i.lo <= n.ts
            ),
            ended AS (
                SELECT s.*, least(s.te, coalesce(j.lo, s.te)) AS stop
                FROM started s ASOF LEFT JOIN old_islands j ON j.gpu_id = s.gpu_id AND s.start < j.lo
            )
            SELECT rid, start, epoch(stop - start) AS left_s FROM ended
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
