"""Who holds which share of a shared card, kept in the ledger (table ``gpu_shares``), and how a shared
card's samples count for each of its holders.

On a card whose allocations (or host-level card ties) name several jobs at once, with declared fractions
summing to more than one card, every card-second is split among the jobs (:data:`SHARED_SEGMENTS_SQL`: the
processes' SM shares where nvidia-smi pmon measured them, else the declared fractions). That split is stored
once, in ``gpu_shares``, and everything reads it from there:

- cost (analytics/cost.py): each job is billed its share of every card-second;
- telemetry (:func:`fan_out_sql`): a sample inside a shared stretch counts for *each* holding job, its sums
  (seconds, busy seconds, idle seconds, energy, ...) weighted by the job's share, so a job's covered time
  never exceeds its share of the card and the jobs' sums add up to the card's own. Counts (samples, dips)
  and maxima are the card's, for every holder. Whether a sample is inside an idle stretch is decided on the
  card's own sequence of samples (the sample's stamped job, collectors/attribute.py) before it is weighted.

:func:`refresh_shares` recomputes the split after every change to allocations, host ties or process shares
(gpuledger/ledger/rollup.py ``refresh_windows`` calls it at every landing and ``--replace``) and leaves
the card-times whose split changed in TEMP ``share_windows`` (gpu_id, lo, hi), which the rollup re-rolls:
a job landing after the telemetry, or a pmon log landing later, re-weights the samples already rolled up.
"""

from __future__ import annotations

import duckdb

from gpuledger.ledger.mig import GPU_SLICES_SQL
from gpuledger.ledger.sample_time import sample_end_sql

# Shared GPUs: every stretch of a physical GPU during which the allocations (or the host-level card ties of
# collectors/attribute.py, each its allocation's fraction) of several jobs name it, and every stretch a job holds a MIG
# instance (one holder: its samples stand for the instance's share of the card, in card units like its cost,
# so its covered time never exceeds its held time). Where their declared fractions
# (allocations.gpu_count, in cards) fit in the GPU row (sum to at most its capacity ``cap``: one card, or a MIG
# instance's share of its card, gpuledger/ledger/mig.py), each job's share is its fraction and the rest is a
# row with no job (NULL job_id: unallocated). Where they sum to more, each GPU-second of the stretch is split
# among the jobs so that the shares sum to the capacity (two jobs on a 3g instance of an H100: 3/14 each):
#   1. by per-process utilization where it is known: each job's reading (Σ SM % of its processes, table
#      process_shares, from nvidia-smi pmon) holds over its own poll; where every job of the stretch has a
#      reading — or a node-level log's poll runs, whose absent jobs had no process (0) — and the readings sum
#      to more than 0, a job's share is the capacity × its reading over the sum;
#   2. else (a job without a reading, or no SM activity at all) by declared fraction: the capacity ×
#      fraction over the sum (whole cards: 1/k each).
# Rows are pieces of stretches (cut at every poll's bounds) with a constant share; the shares of a piece sum
# to the capacity; a share is never negative nor above what its job declared (a job whose processes used more of
# the SMs than it declared keeps what it declared, the rest going to the others); ``cut`` is what the job
# declared beyond its share, never negative (0 where the fractions fit). No parameters.
_POLL_END = sample_end_sql("p.ts", "p.interval_s")  # the end of a process poll p

# Every host-level card tie (collectors/attribute.py, table host_attribution) with the fraction of a card its
# allocation holds there, ``d`` (in cards): the host allocation's GPUs over the cards it is tied to, at most
# one card each. A pod's ``nvidia.com/mig-3g.40gb`` (3/7) tied to its instance holds 3/7; a Slurm job of 4
# GPUs tied to 4 cards holds one of each; 4 GPUs on a host reporting 2 cards hold those 2 whole (the rest has
# no telemetry: analytics/capacity.py counts it as unseen). Columns: job_id, gpu_id, d, a_from, a_to (the
# tie's span, a running job's open end far in the future). No parameters.
HOST_TIES_SQL = """
    SELECT h.job_id, h.gpu_id,
           least(1.0, coalesce(a.gpus / count(*) OVER (PARTITION BY h.job_id, h.host, h.start_ts), 1.0)) AS d,
           h.start_ts AS a_from, coalesce(h.end_ts, TIMESTAMP '9999-12-31') AS a_to
    FROM host_attribution h
    LEFT JOIN (SELECT job_id, lower(split_part(host, '.', 1)) AS hk, start_ts, sum(gpu_count) AS gpus
               FROM allocations WHERE gpu_id IS NULL AND host IS NOT NULL GROUP BY ALL) a
      ON a.job_id = h.job_id AND a.hk = h.host AND a.start_ts = h.start_ts
"""

# Every hold of a GPU row by a job, in cards: allocations that name the GPU (their gpu_count: 1, a declared
# fraction, a MIG instance's share) and host-level ties (:data:`HOST_TIES_SQL`). Columns: job_id, gpu_id, d,
# a_from, a_to. No parameters. The split below and the capacity's seen held time (analytics/capacity.py)
# read it, so both count a hold the same way.
HOLDS_SQL = f"""
    SELECT job_id, gpu_id, gpu_count AS d, start_ts AS a_from, coalesce(end_ts, TIMESTAMP '9999-12-31') AS a_to
    FROM allocations WHERE gpu_id IS NOT NULL AND gpu_count > 0
    UNION ALL
    SELECT job_id, gpu_id, d, a_from, a_to FROM ({HOST_TIES_SQL})
"""
SHARED_SEGMENTS_SQL = f"""
    WITH ga AS ({HOLDS_SQL}),  -- allocations naming the GPU, and host ties, each with its fraction
    -- GPUs where two jobs' extents (first to last of a job's rows on the GPU) overlap: every GPU that two
    -- jobs' allocations name at overlapping times, and a few more (a job's two rows around another job's),
    -- which the stretches below, of more than one job only, leave out again. One sort per GPU instead of
    -- joining each GPU's rows pairwise (50 M-sample ledger, 66 k rows: 0.05 -> 0.03 s).
    ext AS (SELECT gpu_id, job_id, min(a_from) AS a_from, max(a_to) AS a_to FROM ga GROUP BY gpu_id, job_id),
    multi AS (
        SELECT DISTINCT gpu_id FROM (
            SELECT gpu_id, a_from < max(a_to) OVER (PARTITION BY gpu_id ORDER BY a_from, a_to
                                                     ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS hit
            FROM ext)
        WHERE hit
        -- and every MIG instance a job holds: one holder's samples stand for the instance's share of the card
        UNION SELECT gpu_id FROM ({GPU_SLICES_SQL}) WHERE instance AND gpu_id IN (SELECT gpu_id FROM ga)
    ),
    pts AS (SELECT gpu_id, a_from AS t FROM ga WHERE gpu_id IN (SELECT gpu_id FROM multi)
            UNION SELECT gpu_id, a_to FROM ga WHERE gpu_id IN (SELECT gpu_id FROM multi)),
    seg AS (SELECT gpu_id, t AS s_from, lead(t) OVER (PARTITION BY gpu_id ORDER BY t) AS s_to FROM pts),
    inseg AS (
        SELECT seg.gpu_id, seg.s_from, seg.s_to, ga.job_id, max(ga.d) AS d  -- a job's own rows: once
        FROM seg JOIN ga ON ga.gpu_id = seg.gpu_id AND ga.a_from <= seg.s_from AND ga.a_to >= seg.s_to
        WHERE seg.s_to IS NOT NULL
        GROUP BY ALL
    ),
    -- what the GPU row is of its card: 1, or a MIG instance's slices over the card's (gpuledger/ledger/mig.py)
    cap AS (SELECT gpu_id, slice_units / slices AS cap FROM ({GPU_SLICES_SQL}) WHERE gpu_id IN (SELECT gpu_id FROM multi)),
    tot AS (
        SELECT inseg.*, coalesce(cap.cap, 1.0) AS cap, sum(d) OVER (PARTITION BY inseg.gpu_id, s_from) AS sum_d,
               count(*) OVER (PARTITION BY inseg.gpu_id, s_from) AS k
        FROM inseg LEFT JOIN cap USING (gpu_id)
    ),
    sh AS MATERIALIZED (SELECT gpu_id, s_from, s_to, job_id, d, sum_d, cap FROM tot WHERE k > 1 OR cap < 1),
    -- each job's SM % in each of its polls overlapping its stretch, the poll clipped to the stretch
    pj AS MATERIALIZED (
        SELECT sh.gpu_id, sh.s_from, sh.job_id, greatest(p.ts, sh.s_from) AS p_from,
               max(least({_POLL_END}, sh.s_to)) AS p_to,
               -- no SM sample for its processes: no activity; the same poll from two logs: counted once
               max(coalesce(p.sm_pct, 0)) AS sm
        FROM sh JOIN process_shares p ON p.gpu_id = sh.gpu_id AND p.job_id = sh.job_id
         AND p.ts < sh.s_to AND {_POLL_END} > sh.s_from
        GROUP BY ALL
    ),
    st AS MATERIALIZED (SELECT DISTINCT gpu_id, s_from, s_to FROM sh),
    -- the polls of node-level logs (every process on the GPU listed) overlapping a stretch, clipped
    np AS MATERIALIZED (
        SELECT st.gpu_id, st.s_from, greatest(p.ts, st.s_from) AS p_from,
               max(least({_POLL_END}, st.s_to)) AS p_to
        FROM st JOIN process_shares p ON p.gpu_id = st.gpu_id AND p.job_id IS NULL
         AND p.ts < st.s_to AND {_POLL_END} > st.s_from
        GROUP BY ALL
    ),
    -- the stretch cut at its bounds and at every poll's; a job's reading holds over its own poll
    cuts AS (
        SELECT DISTINCT gpu_id, s_from, t FROM (
            SELECT gpu_id, s_from, s_from AS t FROM st UNION ALL SELECT gpu_id, s_from, s_to FROM st
            UNION ALL SELECT gpu_id, s_from, p_from FROM pj UNION ALL SELECT gpu_id, s_from, p_to FROM pj
            UNION ALL SELECT gpu_id, s_from, p_from FROM np UNION ALL SELECT gpu_id, s_from, p_to FROM np)
    ),
    pieces AS MATERIALIZED (
        SELECT * FROM (SELECT gpu_id, s_from, t AS q_from,
                              lead(t) OVER (PARTITION BY gpu_id, s_from ORDER BY t) AS q_to FROM cuts)
        WHERE q_to > q_from
    ),
    -- at each piece: is a node-level poll running (then a job with no reading had no process: 0)?
    nc AS (
        SELECT gpu_id, s_from, q_from, q_to, coalesce(last_value(r_to IGNORE NULLS) OVER w >= q_to, false) AS node
        FROM (SELECT gpu_id, s_from, q_from AS t, q_from, q_to, NULL::TIMESTAMP AS r_to, 1 AS piece FROM pieces
              UNION ALL SELECT gpu_id, s_from, p_from, NULL, NULL, p_to, 0 FROM np)
        WINDOW w AS (PARTITION BY gpu_id, s_from ORDER BY t, piece ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
        QUALIFY piece = 1
    ),
    -- at each piece, each job's reading: its latest poll started at or before it, if not ended
    jr AS (
        SELECT gpu_id, s_from, job_id, q_from, q_to,
               CASE WHEN last_value(r_to IGNORE NULLS) OVER w >= q_to THEN last_value(r_sm IGNORE NULLS) OVER w END
                   AS own
        FROM (SELECT pc.gpu_id, pc.s_from, sh.job_id, pc.q_from AS t, pc.q_from, pc.q_to, NULL::TIMESTAMP AS r_to,
                     NULL::DOUBLE AS r_sm, 1 AS piece
              FROM pieces pc JOIN sh ON sh.gpu_id = pc.gpu_id AND sh.s_from = pc.s_from
              UNION ALL SELECT gpu_id, s_from, job_id, p_from, NULL, NULL, p_to, sm, 0 FROM pj)
        WINDOW w AS (PARTITION BY gpu_id, s_from, job_id ORDER BY t, piece
                     ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
        QUALIFY piece = 1
    ),
    -- known when every job of the stretch has a reading there (or a node-level poll says it had no process)
    pk AS (
        SELECT jr.*, sh.d, sh.sum_d, sh.cap,
               bool_and(jr.own IS NOT NULL OR nc.node) OVER pw AS known,
               sum(coalesce(jr.own, 0)) OVER pw AS sm_sum
        FROM jr JOIN sh ON sh.gpu_id = jr.gpu_id AND sh.s_from = jr.s_from AND sh.job_id = jr.job_id
        JOIN nc ON nc.gpu_id = jr.gpu_id AND nc.s_from = jr.s_from AND nc.q_from = jr.q_from
        WINDOW pw AS (PARTITION BY jr.gpu_id, jr.s_from, jr.q_from)
    ),
    -- a job's share is never above what it declared: by SM activity a job may come out above (its
    -- processes ran on more than it asked for); it keeps what it declared and what is left of the capacity
    -- goes to the jobs below what they declared, in proportion to what they miss (their misses sum to more
    -- than what is left, since the fractions sum to more than the capacity: none is lifted above its own)
    s0 AS (
        SELECT pk.*,
               CASE WHEN sum_d <= cap THEN d  -- fractions that fit: each job's own, as declared
                    WHEN known AND sm_sum > 0 THEN least(d, cap * coalesce(own, 0) / sm_sum)
                    ELSE cap * d / sum_d END AS share0
        FROM pk
    ),
    s1 AS (
        SELECT s0.*, cap - sum(share0) OVER pw AS left_over, sum(d - share0) OVER pw AS missed
        FROM s0 WINDOW pw AS (PARTITION BY gpu_id, s_from, q_from)
    ),
    shares AS (
        SELECT job_id, gpu_id, q_from AS s_from, q_to AS s_to, d,
               CASE WHEN sum_d > cap AND left_over > 0 AND missed > 0
                    THEN share0 + left_over * (d - share0) / missed ELSE share0 END AS share,
               sum_d, cap
        FROM s1
    )
    SELECT job_id, gpu_id, s_from, s_to, share, d - share AS cut FROM shares
    UNION ALL  -- where the fractions fit, the rest of the GPU row is no job's
    SELECT DISTINCT NULL, gpu_id, s_from, s_to, cap - sum_d, 0.0 FROM shares WHERE sum_d < cap
"""


# The columns of ``gpu_shares`` (one row per job and piece of a shared stretch with a constant share).
SHARES_COLUMNS = "job_id, gpu_id, s_from, s_to, share, cut"


def attribution_update_sql(jobs: str) -> str:
    """The one definition of ``jobs.attribution``, as an UPDATE of the jobs whose ids the relation ``jobs``
    holds: ``none`` when no sample is the job's (stamped with it, or inside a stretch of a card it shares:
    such a sample is stamped with the stretch's first holder, :func:`_stamp_first_holder`, and counts for
    every holder by its share), else ``by_share`` when any of its host-level card ties was dealt by share
    (collectors/attribute.py rules 6 and 7), else ``exact``. Run by the landing for the jobs it touched and
    by :func:`refresh_shares` for the jobs whose split changed (the split is made after the landing's)."""
    return f"""UPDATE jobs SET attribution = CASE
               WHEN j.job_id NOT IN (SELECT DISTINCT job_id FROM samples WHERE job_id IN (SELECT job_id FROM {jobs}))
                    AND j.job_id NOT IN (SELECT s.job_id FROM gpu_shares s
                                         WHERE s.job_id IN (SELECT job_id FROM {jobs})
                                           AND EXISTS (SELECT 1 FROM samples x WHERE x.gpu_id = s.gpu_id
                                                       AND x.ts >= s.s_from AND x.ts < s.s_to)) THEN 'none'
               WHEN j.job_id IN (SELECT job_id FROM host_attribution WHERE method = 'by_share') THEN 'by_share'
               ELSE 'exact' END
           FROM (SELECT DISTINCT job_id FROM {jobs} WHERE job_id IS NOT NULL) j WHERE jobs.job_id = j.job_id"""


def refresh_shares(con: duckdb.DuckDBPyConnection) -> int:
    """Bring ``gpu_shares`` up to date with the allocations, host ties and process shares now in the ledger.

    The whole split is recomputed (it reads only the cards two jobs' holds overlap on: 0.03-0.09 s on the
    28-day demo, which has none) and compared with the stored one; only the rows that changed are replaced. TEMP
    ``share_windows`` (gpu_id, lo, hi) then holds, per card whose split changed, the span of sample times
    (inclusive) that changed, for the rollup to re-roll. Returns the number of changed rows."""
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE shares_new AS SELECT {SHARES_COLUMNS} FROM ({SHARED_SEGMENTS_SQL})"
    )
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE shares_changed AS
            (SELECT * FROM gpu_shares EXCEPT SELECT * FROM temp.shares_new)
            UNION ALL (SELECT * FROM temp.shares_new EXCEPT SELECT {SHARES_COLUMNS} FROM gpu_shares)"""
    )
    changed = int(con.execute("SELECT count(*) FROM temp.shares_changed").fetchall()[0][0])
    con.execute(
        """CREATE OR REPLACE TEMP TABLE share_windows AS
           SELECT c.gpu_id, greatest(c.lo, s.lo) AS lo, least(c.hi, s.hi) AS hi
           FROM (SELECT gpu_id, min(s_from) AS lo, max(s_to) AS hi FROM temp.shares_changed GROUP BY gpu_id) c
           JOIN (SELECT gpu_id, min(ts) AS lo, max(ts) AS hi FROM samples
                 WHERE gpu_id IN (SELECT gpu_id FROM temp.shares_changed) GROUP BY gpu_id) s USING (gpu_id)
           WHERE greatest(c.lo, s.lo) <= least(c.hi, s.hi)"""
    )
    if changed:
        con.execute("""DELETE FROM gpu_shares WHERE gpu_id IN (SELECT gpu_id FROM temp.shares_changed)""")
        con.execute(
            """INSERT INTO gpu_shares SELECT * FROM temp.shares_new
               WHERE gpu_id IN (SELECT gpu_id FROM temp.shares_changed) ORDER BY gpu_id, s_from, job_id"""
        )
        # jobs that gained or lost a share of a card: which samples are theirs changed with it
        con.execute(attribution_update_sql("temp.shares_changed"))
    con.execute("DROP TABLE temp.shares_new")
    con.execute("DROP TABLE temp.shares_changed")
    _stamp_first_holder(con)
    return changed


def _stamp_first_holder(con: duckdb.DuckDBPyConnection) -> None:
    """Stamp every sample inside a piece of a shared stretch, stamped with one of the piece's jobs, with the
    smallest job id of the piece (collectors/attribute.py's rule for host ties; allocations that name the
    card stamp any one of theirs). The stamped job is the card's own sequence there, on which idle stretches
    are found, so it must not alternate between the holders sample by sample. Re-stamped sample times are
    added to ``share_windows``."""
    if not has_shares(con):
        return
    con.execute(
        """CREATE OR REPLACE TEMP TABLE shares_restamp AS
           SELECT s.rowid AS rid, s.gpu_id, s.ts, p.first_job
           FROM samples s
           JOIN (SELECT gpu_id, s_from, s_to, min(job_id) AS first_job FROM gpu_shares GROUP BY ALL) p
             ON s.gpu_id = p.gpu_id AND s.ts >= p.s_from AND s.ts < p.s_to
           WHERE s.gpu_id IN (SELECT gpu_id FROM gpu_shares) AND s.job_id <> p.first_job
             AND EXISTS (SELECT 1 FROM gpu_shares o
                         WHERE o.gpu_id = p.gpu_id AND o.s_from = p.s_from AND o.job_id = s.job_id)"""
    )
    if con.execute("SELECT count(*) FROM temp.shares_restamp").fetchall()[0][0]:
        con.execute(
            "UPDATE samples SET job_id = r.first_job FROM temp.shares_restamp r WHERE samples.rowid = r.rid"
        )
        con.execute(
            """INSERT INTO share_windows
               SELECT gpu_id, min(ts), max(ts) FROM temp.shares_restamp GROUP BY gpu_id"""
        )
    con.execute("DROP TABLE temp.shares_restamp")


def has_shares(con: duckdb.DuckDBPyConnection, gpus_sql: str | None = None) -> bool:
    """Does ``gpu_shares`` hold a row (of a GPU ``gpus_sql`` selects, when given)? Where it holds none, the
    readers leave the fan-out out of their SQL altogether, so unshared ledgers run the statements they ran
    before."""
    where = f"WHERE gpu_id IN ({gpus_sql})" if gpus_sql else ""
    return bool(
        con.execute(f"SELECT count(*) FROM (SELECT 1 FROM gpu_shares {where} LIMIT 1)").fetchall()[0][0]
    )


def fan_out_sql(rows: str, weight: str = "share_w") -> str:
    """``rows`` (a relation with gpu_id, ts and job_id: one row per sample, ``job_id`` its stamped job) with
    each sample inside a shared stretch of its stamped job replaced by one row per job holding that piece of
    the stretch, ``job_id`` that job; column ``weight`` is the job's share there (1.0 for every other sample).

    A piece of a stretch is one ``gpu_shares`` (gpu_id, s_from, s_to): every job of the piece has a row with
    those bounds (and, where the jobs' fractions fit in the card, a row with no job for the rest: its sample
    row has a NULL job_id), and the shares of one piece sum to one, so the weighted rows of a sample add up
    to it."""
    return f"""
        SELECT x.* REPLACE (CASE WHEN m.gpu_id IS NULL THEN x.job_id ELSE o.job_id END AS job_id),
               coalesce(o.share, 1.0) AS {weight}
        FROM {rows} x
        LEFT JOIN gpu_shares m ON m.gpu_id = x.gpu_id AND m.job_id = x.job_id
         AND x.ts >= m.s_from AND x.ts < m.s_to
        LEFT JOIN gpu_shares o ON o.gpu_id = m.gpu_id AND o.s_from = m.s_from AND o.s_to = m.s_to
    """
