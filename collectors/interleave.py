"""Two series of one GPU that overlap in time count its time once.

Each sample stands for the time to its own series' next sample (collectors/base.py ``_land_samples``). Two
loggers of the same GPU (dcgm-exporter scraping at :00 and an nvidia-smi loop at :15, or one log cut into its
odd and even lines and ingested as two files) would then each cover the GPU's whole time: twice its GPU-hours,
energy and dollars. Samples at the very same time were already merged into one row; this is the rest.

The rule: the time the ledger already covers stays where it is, and a newly landed sample stands only for the
part of its own span ``[ts, ts + interval_s)`` that no earlier ingest's sample of its GPU covers. A sample left
with nothing is removed (counted in the report: its time was counted already); the others keep their values,
with the interval shortened. So a GPU's seconds are the union of its series' spans, whichever order the files
come in: the second series adds the first one's silences, and a new day whose first poll comes a few
milliseconds before the last day's last sample ended loses those milliseconds, not the sample.

How: the old samples reaching into the new batch's span of each GPU, with the running sum of their intervals,
give the old coverage up to any time t, C(t) = (intervals before the latest old sample at or before t) + (the
part of that sample's span before t); a new sample's covered part is C(end) - C(ts), two ASOF joins. Only run
when an earlier ingest has samples within a day before the batch or inside it (never for a first ingest).
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
    # each GPU's old samples whose span reaches into the new samples' span of that GPU, in time order, with the
    # seconds the ones before them cover
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE old_cover AS
            WITH span AS (
                SELECT gpu_id, min(ts) AS lo, max({_END}) AS hi FROM samples
                WHERE ingest_id = $ingest AND ts >= $lo AND ts < $hi GROUP BY gpu_id
            )
            SELECT o.gpu_id, o.ts, o.interval_s::DOUBLE AS iv,
                   coalesce(sum(o.interval_s::DOUBLE) OVER (PARTITION BY o.gpu_id ORDER BY o.ts
                                                            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)
                       AS before_s
            FROM samples o JOIN span n ON n.gpu_id = o.gpu_id
            WHERE o.ingest_id <> $ingest AND o.ts >= CAST($lo AS TIMESTAMP) - {_REACH} AND o.ts < $hi
              AND o.ts < n.hi AND o.{_END} > n.lo""",
        bounds,
    )
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE new_cover AS
            WITH n AS (
                SELECT rowid AS rid, gpu_id, ts, {_END} AS te, interval_s::DOUBLE AS iv FROM samples
                WHERE ingest_id = $ingest AND ts >= $lo AND ts < $hi
                  AND gpu_id IN (SELECT DISTINCT gpu_id FROM old_cover)
            ),
            at_start AS (
                SELECT n.rid, coalesce(o.before_s + least(epoch(n.ts - o.ts), o.iv), 0) AS c
                FROM n ASOF LEFT JOIN old_cover o ON o.gpu_id = n.gpu_id AND o.ts <= n.ts
            ),
            at_end AS (
                SELECT n.rid, coalesce(o.before_s + least(epoch(n.te - o.ts), o.iv), 0) AS c
                FROM n ASOF LEFT JOIN old_cover o ON o.gpu_id = n.gpu_id AND o.ts <= n.te
            )
            SELECT n.rid, n.iv - (e.c - s.c) AS left_s
            FROM n JOIN at_start s USING (rid) JOIN at_end e USING (rid)
            WHERE e.c - s.c > 0""",
        bounds,
    )
    removed = con.execute(
        f"DELETE FROM samples WHERE rowid IN (SELECT rid FROM new_cover WHERE left_s < {_NOTHING_S})"
    ).fetchall()[0][0]
    con.execute(
        f"""UPDATE samples SET interval_s = c.left_s FROM new_cover c
            WHERE samples.rowid = c.rid AND c.left_s >= {_NOTHING_S}"""
    )
    con.execute("DROP TABLE temp.old_cover")
    con.execute("DROP TABLE temp.new_cover")
    return int(removed)
