"""A sample alone in its file takes its interval from the ledger's series, whichever file lands first.

A sample's interval is derived from its file's series (collectors/landing.py ``_land_samples``): the time to the
GPU's next sample, capped by the file's cadence. A file holding a single sample of a GPU has no cadence and no
next sample: the sample stands for 1 s (``NO_CADENCE_S``). When the rest of the GPU's series lands from another
file, before or after, that 1 s would stay, while one file holding all the samples, or landing the same samples
again (collectors/interleave.py ``extend_merged``), gives it the series' cadence: the figures would depend on how
the samples were cut into files and in which order they came (issue 35: $7.67 against $8.00 for the same card).

The rule, one for every order: a sample that is the only one of its GPU in its ingest and stands for
``NO_CADENCE_S`` (its interval came from no cadence) is derived again from the ledger's samples of its GPU, as
one file holding them all would derive it: the gap to the GPU's next ledger sample, capped by the cadence of
the GPU's ledger samples within a day of it (sample_time.py ``interval_sql`` and ``cadence_sql``). It runs at
every landing, for the samples within a day of the ingest's own, so the neighbours arriving later revise it as
much as the neighbours already there. A sample with no neighbour keeps 1 s. Known limit: withdrawing the
neighbours (``--replace``, ``gpuledger remove``) does not give the 1 s back.
"""

from __future__ import annotations

import duckdb

from gpuledger.ledger.sample_time import MAX_REACH, NO_CADENCE_S, cadence_sql, interval_sql


def settle_lone_samples(con: duckdb.DuckDBPyConnection, ingest_id: int) -> int:
    """Derive again the interval of each lone, cadence-less sample near ``ingest_id``'s samples (module
    docstring); its GPU-time is re-rolled through TEMP ``merged_windows`` (land() ``_refresh_merged``).
    Returns how many samples changed."""
    # lone among the cadence-less samples near the ingest first (one hash aggregate, no sort: 2 M samples of a
    # 1 s series, every one a candidate, in 0.2 s), then in the whole ledger (its ingest's other samples of
    # the GPU may stand for other intervals)
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE lone_near AS
            WITH span AS (SELECT gpu_id, min(ts) AS lo, max(ts) AS hi FROM samples
                          WHERE ingest_id = $ingest GROUP BY gpu_id)
            SELECT s.gpu_id, s.ingest_id, min(s.ts) AS ts
            FROM samples s JOIN span n ON n.gpu_id = s.gpu_id
            WHERE s.interval_s = {NO_CADENCE_S}
              AND s.ts >= n.lo - {MAX_REACH} AND s.ts <= n.hi + {MAX_REACH}
            GROUP BY s.gpu_id, s.ingest_id HAVING count(*) = 1""",
        {"ingest": ingest_id},
    )
    if con.execute("SELECT count(*) FROM lone_near").fetchall()[0][0]:
        con.execute(
            """DELETE FROM lone_near WHERE (gpu_id, ingest_id) IN (
                   SELECT (gpu_id, ingest_id) FROM samples
                   WHERE gpu_id IN (SELECT gpu_id FROM lone_near) AND ingest_id IN (SELECT ingest_id FROM lone_near)
                   GROUP BY gpu_id, ingest_id HAVING count(*) > 1)"""
        )
    changed = 0
    if con.execute("SELECT count(*) FROM lone_near").fetchall()[0][0]:
        changed = con.execute(
            f"""UPDATE samples SET interval_s = d.iv FROM (
                    WITH series AS (
                        SELECT l.gpu_id, l.ts AS lone, s.ts,
                               epoch(lead(s.ts) OVER (PARTITION BY l.gpu_id, l.ts ORDER BY s.ts) - s.ts) AS gap_s
                        FROM lone_near l JOIN samples s
                          ON s.gpu_id = l.gpu_id AND s.ts >= l.ts - {MAX_REACH} AND s.ts <= l.ts + {MAX_REACH}
                    ),
                    cad AS (SELECT gpu_id, lone, {cadence_sql()} AS cad_s FROM series GROUP BY gpu_id, lone)
                    SELECT l.gpu_id, l.ts, {interval_sql("g.gap_s", "c.cad_s")} AS iv
                    FROM lone_near l JOIN cad c ON c.gpu_id = l.gpu_id AND c.lone = l.ts
                    JOIN series g ON g.gpu_id = l.gpu_id AND g.lone = l.ts AND g.ts = l.ts
                ) d
                WHERE samples.gpu_id = d.gpu_id AND samples.ts = d.ts AND samples.interval_s <> d.iv"""
        ).fetchall()[0][0]
    if changed:
        con.execute(
            "CREATE TEMP TABLE IF NOT EXISTS merged_windows (gpu_id VARCHAR, lo TIMESTAMP, hi TIMESTAMP)"
        )
        con.execute("INSERT INTO merged_windows SELECT gpu_id, ts, ts FROM lone_near")
    con.execute("DROP TABLE temp.lone_near")
    return int(changed)
