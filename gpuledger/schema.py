"""The one canonical schema every source lands in, with its version and migrations.

Conventions (docs/schema.md describes every column):
- every time is a naive ``TIMESTAMP`` meaning UTC; collectors convert on the way in;
- names carry units (``_mib``, ``_w``, ``_j``, ``_pct``, ``_s``, ``_usd``);
- a value a source does not report is NULL, never 0;
- ``gpu_id`` is the GPU's UUID where the source has one, else ``host:index``;
- ``job_id`` is globally unique: sources whose ids could collide prefix them (``cluster/123``).

A migration is a list of SQL statements that moves the schema from version N-1 to N. ``migrate`` applies
the missing ones inside the caller's transaction, so a database is never left half-migrated.
"""

from __future__ import annotations

import duckdb

SCHEMA_V1: list[str] = [
    """
    CREATE TABLE IF NOT EXISTS schema_meta (
        key   VARCHAR PRIMARY KEY,
        value VARCHAR NOT NULL
    )
    """,
    """
    CREATE SEQUENCE IF NOT EXISTS ingest_seq START 1
    """,
    """
    CREATE TABLE IF NOT EXISTS ingests (
        ingest_id      BIGINT PRIMARY KEY,
        path           VARCHAR NOT NULL,   -- absolute path, or a collector URL such as nvml://host
        source_key     VARCHAR NOT NULL,   -- what --replace matches on (path by default)
        content_sha256 VARCHAR NOT NULL,
        format         VARCHAR NOT NULL,
        rows_json      VARCHAR NOT NULL,   -- {"samples": 123, "jobs": 4, ...}
        skipped_json   VARCHAR NOT NULL,   -- {"reason": count} for rows skipped on purpose
        ingested_at    TIMESTAMP NOT NULL
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS gpu_catalog (
        model            VARCHAR PRIMARY KEY,  -- canonical key, e.g. H100-SXM-80GB
        vendor           VARCHAR NOT NULL,
        memory_mib       INTEGER NOT NULL,
        bf16_tflops      DOUBLE,               -- dense, no sparsity; NULL where the card has no BF16
        fp16_tflops      DOUBLE NOT NULL,      -- dense tensor-core FP16
        fp32_tflops      DOUBLE NOT NULL,
        tdp_w            DOUBLE NOT NULL,
        mig_capable      BOOLEAN NOT NULL,
        source           VARCHAR NOT NULL
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS prices (
        gpu_model         VARCHAR NOT NULL,   -- gpu_catalog.model
        tier              VARCHAR NOT NULL,   -- on_demand | spot | reserved | on_prem
        cluster           VARCHAR,            -- NULL: any cluster; else a per-cluster override
        effective_from    DATE NOT NULL,      -- in force from this UTC date until the next row's
        usd_per_gpu_hour  DOUBLE NOT NULL,
        source            VARCHAR NOT NULL,   -- where the number comes from
        source_date       DATE NOT NULL,
        origin            VARCHAR NOT NULL,   -- sheet (data/prices.toml) | settings | ingest (a source declared it)
        ingest_id         BIGINT              -- the ingest that declared it (origin ingest); NULL otherwise
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS gpus (
        gpu_id           VARCHAR PRIMARY KEY,  -- UUID, else host:index
        uuid             VARCHAR,
        host             VARCHAR,
        gpu_index        INTEGER,
        model            VARCHAR,              -- gpu_catalog.model when recognised
        model_raw        VARCHAR,              -- the name as the source wrote it
        memory_total_mib DOUBLE,
        cluster          VARCHAR,
        mig_profile      VARCHAR,              -- e.g. 3g.40gb for a MIG instance; NULL for a full GPU
        parent_gpu_id    VARCHAR,              -- the physical GPU of a MIG instance
        first_seen       TIMESTAMP,
        last_seen        TIMESTAMP
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS samples (
        ts                TIMESTAMP NOT NULL,   -- UTC
        gpu_id            VARCHAR NOT NULL,
        interval_s        FLOAT NOT NULL,       -- the time this sample stands for (collector cadence, capped)
        util_pct          FLOAT,                -- nvidia-smi utilization.gpu / DCGM_FI_DEV_GPU_UTIL
        mem_util_pct      FLOAT,                -- utilization.memory (memory controller busy)
        mem_used_mib      FLOAT,
        mem_total_mib     FLOAT,
        power_w           FLOAT,
        energy_j          DOUBLE,               -- cumulative counter since driver load, when reported
        temp_c            FLOAT,
        sm_active_pct     FLOAT,                -- DCGM_FI_PROF_SM_ACTIVE × 100 / NVML GPM SM activity
        tensor_active_pct FLOAT,                -- DCGM_FI_PROF_PIPE_TENSOR_ACTIVE × 100
        sm_clock_mhz      FLOAT,
        throttle_reasons  UBIGINT,              -- NVML clocks_event_reasons bitmask
        job_id            VARCHAR,              -- attributed at ingest; NULL when no job held the GPU
        ingest_id         BIGINT NOT NULL
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS jobs (
        job_id          VARCHAR PRIMARY KEY,
        source          VARCHAR NOT NULL,      -- format that produced it: jobs_csv, sacct, ...
        cluster         VARCHAR,
        user_name       VARCHAR,
        team            VARCHAR,
        project         VARCHAR,
        name            VARCHAR,
        kind            VARCHAR NOT NULL,      -- training | fine-tune | inference | interactive | other
        gpu_model       VARCHAR,               -- gpu_catalog.model when recognised
        gpu_count       DOUBLE NOT NULL,       -- fractional for shared GPUs (Alibaba gpu_milli, MIG)
        pricing_tier    VARCHAR NOT NULL,      -- on_demand | spot | reserved | on_prem
        submit_ts       TIMESTAMP,
        start_ts        TIMESTAMP,
        end_ts          TIMESTAMP,             -- NULL while running
        state           VARCHAR NOT NULL,      -- COMPLETED | RUNNING | FAILED | CANCELLED | TIMEOUT | OOM | NODE_FAIL | PENDING | ...
        exit_reason     VARCHAR,
        last_checkpoint_ts TIMESTAMP,          -- for failed runs: time lost = end - last checkpoint
        ingest_id       BIGINT NOT NULL,
        partition       VARCHAR,               -- scheduler partition / queue (Slurm Partition)
        gpu_mem_peak_mib  DOUBLE,              -- per-task peak GPU memory the scheduler measured (sacct gres/gpumem)
        gpu_util_peak_pct DOUBLE               -- peak GPU utilisation the scheduler measured (sacct gres/gpuutil)
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS allocations (
        job_id      VARCHAR NOT NULL,
        host        VARCHAR,
        gpu_id      VARCHAR,                   -- NULL when the source names only the host
        gpu_count   DOUBLE NOT NULL,           -- GPUs held on this host by this row (1 when gpu_id is known)
        start_ts    TIMESTAMP NOT NULL,
        end_ts      TIMESTAMP,                 -- NULL while running
        ingest_id   BIGINT NOT NULL
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS training_runs (
        job_id             VARCHAR PRIMARY KEY,
        source             VARCHAR NOT NULL,
        model              VARCHAR,
        params             DOUBLE,              -- parameter count
        n_layers           INTEGER,
        hidden_size        INTEGER,
        precision          VARCHAR,             -- bf16 | fp16 | fp32 | tf32 | fp8 | int4 ...
        optimizer          VARCHAR,             -- adamw | adam | sgd | ...
        batch_size         INTEGER,             -- per-GPU micro-batch
        grad_accum         INTEGER,
        global_batch_size  INTEGER,
        seq_len            INTEGER,
        tokens             DOUBLE,
        samples            DOUBLE,
        epochs             DOUBLE,
        steps              BIGINT,
        runtime_s          DOUBLE,
        peak_mem_mib       DOUBLE,              -- per GPU
        samples_per_s      DOUBLE,              -- whole job
        tokens_per_s       DOUBLE,              -- whole job
        requests           DOUBLE,              -- inference: requests served
        generated_tokens   DOUBLE,              -- inference: tokens generated
        grad_noise_scale   DOUBLE,              -- B_noise estimate when the run logs one
        total_flos         DOUBLE,
        ingest_id          BIGINT NOT NULL
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS train_log (
        job_id      VARCHAR NOT NULL,
        step        BIGINT,
        epoch       DOUBLE,
        ts          TIMESTAMP,
        elapsed_s   DOUBLE,
        loss        DOUBLE,
        eval_loss   DOUBLE,
        learning_rate DOUBLE,
        tokens_seen DOUBLE,
        ingest_id   BIGINT NOT NULL
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS processes (
        ts          TIMESTAMP NOT NULL,
        gpu_id      VARCHAR NOT NULL,
        pid         BIGINT,
        process_name VARCHAR,
        used_mem_mib DOUBLE,
        job_id      VARCHAR,
        ingest_id   BIGINT NOT NULL
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS gpu_events (
        ts          TIMESTAMP NOT NULL,
        gpu_id      VARCHAR NOT NULL,
        kind        VARCHAR NOT NULL,          -- xid | ecc_sbe | ecc_dbe | throttle
        value       VARCHAR,
        ingest_id   BIGINT NOT NULL
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS collector_state (
        collector   VARCHAR PRIMARY KEY,       -- e.g. prometheus:http://host:9090, slurm:ci
        cursor_ts   TIMESTAMP,                 -- read up to here
        updated_at  TIMESTAMP NOT NULL,
        detail_json VARCHAR
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS capacity (
        cluster     VARCHAR NOT NULL,
        gpu_model   VARCHAR NOT NULL,
        gpu_count   DOUBLE NOT NULL,           -- GPUs the organisation pays for whether used or not
        start_ts    TIMESTAMP NOT NULL,
        end_ts      TIMESTAMP,
        ingest_id   BIGINT NOT NULL
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS samples_minute (
        minute       TIMESTAMP NOT NULL,       -- date_trunc('minute', ts)
        gpu_id       VARCHAR NOT NULL,
        job_id       VARCHAR,
        n            INTEGER NOT NULL,
        covered_s    DOUBLE NOT NULL,          -- sum(interval_s)
        util_s       DOUBLE,                   -- sum(util_pct/100 × interval_s) over samples with util
        util_cov_s   DOUBLE,                   -- sum(interval_s) over samples with util
        idle_s       DOUBLE,                   -- interval_s of samples at or under the idle threshold
        util_max     FLOAT,
        mem_used_max_mib FLOAT,
        mem_total_mib    FLOAT,
        power_j      DOUBLE,                   -- sum(power_w × interval_s)
        power_cov_s  DOUBLE,
        sm_active_s  DOUBLE,
        tensor_active_s DOUBLE,
        prof_cov_s   DOUBLE,
        -- the fast path's columns (gpuledger/rollup.py; docs/metrics.md "Fast path"): enough to give every
        -- raw-sample figure of analytics/ exactly. Thresholds they were built with: schema_meta
        -- 'rollup_thresholds'.
        first_ts     TIMESTAMP,                -- first sample in the minute
        last_ts      TIMESTAMP,                -- last sample in the minute
        max_end_ts   TIMESTAMP,                -- max(ts + interval_s)
        idle_run_s   DOUBLE,                   -- interval_s of samples inside idle stretches (runs >= idle_min_minutes)
        underused_s  DOUBLE,                   -- Σ interval_s × (target − util)/target, util < target, outside stretches
        sm_cov_s     DOUBLE,                   -- interval_s of samples with SM-active
        tensor_cov_s DOUBLE,                   -- interval_s of samples with tensor-active
        memk_frac_max DOUBLE,                  -- max(mem_used / mem_total) over samples that report mem_total
        memk_frac_s  DOUBLE,                   -- Σ mem_used / mem_total × interval_s (same samples)
        memk_cov_s   DOUBLE,                   -- Σ interval_s (same samples, mem_used known, mem_total > 0)
        memu_max_mib DOUBLE,                   -- max(mem_used) over samples without mem_total (card size
        memu_s       DOUBLE,                   --   from gpus/catalog is applied at query time)
        memu_cov_s   DOUBLE,
        n_no_total   INTEGER,                  -- samples without mem_total
        energy_j     DOUBLE,                   -- Σ per-sample energy (analytics.utilization.sample_energy_sql)
        energy_cov_s DOUBLE,
        util_n       INTEGER,                  -- samples with a utilization reading
        dip_n        INTEGER,                  -- ... below 10 % (job_signals.LOW_UTIL_PCT)
        burst_n      INTEGER,                  -- ... above 70 % (job_signals.HIGH_UTIL_PCT)
        throttle_n   INTEGER,                  -- samples with throttle_reasons
        throttled_n  INTEGER,                  -- ... with a power/thermal bit
        temp_n       INTEGER,
        hot_n        INTEGER,                  -- samples at >= 85 °C
        temp_max_c   DOUBLE,
        pairs_n      INTEGER,                  -- samples with a contiguous predecessor (same GPU and job), both with util
        swings_n     INTEGER,                  -- ... swinging between < 10 % and > 70 %
        first_pair   INTEGER,                  -- pairs_n / swings_n of the minute's first sample alone
        first_swing  INTEGER
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS samples_day AS
        SELECT minute::DATE AS day, * EXCLUDE (minute) FROM samples_minute WHERE false
    """,
    """
    CREATE TABLE IF NOT EXISTS idle_runs (
        gpu_id      VARCHAR NOT NULL,
        job_id      VARCHAR,                   -- the samples' job_id (NULL: no job)
        run_start   TIMESTAMP NOT NULL,        -- first sample of the run: with gpu_id and job_id the run's key
        run_s       DOUBLE NOT NULL,           -- Σ interval_s of the whole run
        run_reach_ts TIMESTAMP NOT NULL,       -- last sample ts + 1.5 × its interval_s: a later sample links only before
        day         DATE NOT NULL,             -- one row per UTC day the run touches (a view cuts runs at midnight)
        first_ts    TIMESTAMP NOT NULL,        -- first / last sample of the run on that day
        last_ts     TIMESTAMP NOT NULL,
        end_ts      TIMESTAMP NOT NULL,        -- max(ts + interval_s) on that day
        idle_s      DOUBLE NOT NULL            -- Σ interval_s on that day
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS samples_util_hist (
        day         DATE NOT NULL,             -- UTC day of the samples
        gpu_id      VARCHAR NOT NULL,
        job_id      VARCHAR,
        util_pct    FLOAT NOT NULL,            -- one row per distinct reading: exact time-weighted percentiles
        seconds     DOUBLE NOT NULL            -- Σ interval_s
    )
    """,
    "CREATE INDEX IF NOT EXISTS allocations_job ON allocations(job_id)",
]

MIGRATIONS: list[list[str]] = [SCHEMA_V1]
SCHEMA_VERSION = len(MIGRATIONS)

TABLES = (
    "ingests",
    "gpu_catalog",
    "prices",
    "gpus",
    "samples",
    "jobs",
    "allocations",
    "training_runs",
    "train_log",
    "processes",
    "gpu_events",
    "collector_state",
    "capacity",
    "samples_minute",
    "samples_day",
    "idle_runs",
    "samples_util_hist",
)

# Tables whose rows belong to one ingest (deleted with it on --replace).
INGESTED_TABLES = (
    "prices",
    "samples",
    "jobs",
    "allocations",
    "training_runs",
    "train_log",
    "processes",
    "gpu_events",
    "capacity",
)


def current_version(con: duckdb.DuckDBPyConnection) -> int:
    exists = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'schema_meta'"
    ).fetchall()[0][0]
    if not exists:
        return 0
    rows = con.execute("SELECT value FROM schema_meta WHERE key = 'schema_version'").fetchall()
    return int(rows[0][0]) if rows else 0


def migrate(con: duckdb.DuckDBPyConnection) -> int:
    """Bring the schema to SCHEMA_VERSION; the caller owns the transaction. Returns the old version."""
    old = current_version(con)
    if old > SCHEMA_VERSION:
        from gpuledger.errors import LedgerError

        raise LedgerError(
            f"database schema version {old} is newer than this gpuledger ({SCHEMA_VERSION}): upgrade gpuledger"
        )
    for statements in MIGRATIONS[old:]:
        for sql in statements:
            con.execute(sql)
    if old < SCHEMA_VERSION:
        con.execute("INSERT OR REPLACE INTO schema_meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)])
    return old
