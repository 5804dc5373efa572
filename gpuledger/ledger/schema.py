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

from gpuledger.ledger.rollup import HOUR_AGGREGATES
from gpuledger.ledger.shares import SHARED_SEGMENTS_SQL, SHARES_COLUMNS

SCHEMA_V1: list[str] = [
    """
    CREATE TABLE IF NOT EXISTS schema_meta (
        key   VARCHAR PRIMARY KEY,             -- schema_version | settings_fingerprint | rollup_thresholds
        value VARCHAR NOT NULL                 -- the value, as text (JSON for structured values)
    )
    """,
    """
    CREATE SEQUENCE IF NOT EXISTS ingest_seq START 1
    """,
    """
    CREATE TABLE IF NOT EXISTS ingests (
        ingest_id      BIGINT PRIMARY KEY,     -- from ingest_seq; 0 is reserved for rows that come from settings
        path           VARCHAR NOT NULL,   -- absolute path, or a collector URL such as nvml://host
        source_key     VARCHAR NOT NULL,   -- what --replace matches on (path by default)
        content_sha256 VARCHAR NOT NULL,       -- SHA-256 of the file's bytes (or of a collector's flush): same content → no-op
        format         VARCHAR NOT NULL,       -- the parser's --format name (nvidia_smi_csv, sacct, demo, nvml, prometheus, ...)
        rows_json      VARCHAR NOT NULL,   -- {"samples": 123, "jobs": 4, ...}
        skipped_json   VARCHAR NOT NULL,   -- {"reason": count} for rows skipped on purpose
        ingested_at    TIMESTAMP NOT NULL      -- UTC wall time of the commit
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS gpu_catalog (
        model            VARCHAR PRIMARY KEY,  -- canonical key, e.g. H100-SXM-80GB
        vendor           VARCHAR NOT NULL,     -- NVIDIA | AMD
        memory_mib       INTEGER NOT NULL,     -- marketed memory capacity (MiB)
        bf16_tflops      DOUBLE,               -- dense, no sparsity; NULL where the card has no BF16
        fp16_tflops      DOUBLE NOT NULL,      -- dense tensor-core FP16
        fp32_tflops      DOUBLE NOT NULL,      -- dense FP32 (non-tensor) peak, TFLOP/s
        tdp_w            DOUBLE NOT NULL,      -- board power limit (W)
        mig_capable      BOOLEAN NOT NULL,     -- supports Multi-Instance GPU slices
        source           VARCHAR NOT NULL      -- datasheet the figures come from
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS prices (
        gpu_model         VARCHAR NOT NULL,   -- gpu_catalog.model
        tier              VARCHAR NOT NULL,   -- on_demand | spot | reserved | on_prem
        cluster           VARCHAR,            -- NULL: any cluster; else a per-cluster override
        effective_from    DATE NOT NULL,      -- in force from this UTC date until the next row's
        usd_per_gpu_hour  DOUBLE NOT NULL,     -- US$ per GPU-hour
        source            VARCHAR NOT NULL,   -- where the number comes from
        source_date       DATE NOT NULL,       -- when the price was read from its source
        origin            VARCHAR NOT NULL,   -- sheet (data/prices.toml) | settings | ingest (a source declared it)
        ingest_id         BIGINT              -- the ingest that declared it (origin ingest); NULL otherwise
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS gpus (
        gpu_id           VARCHAR PRIMARY KEY,  -- UUID, else host:index
        uuid             VARCHAR,              -- NVML/DCGM UUID (GPU-...), when the source reports it
        host             VARCHAR,              -- host name the GPU sits in
        gpu_index        INTEGER,              -- NVML index on its host (nvidia-smi index, DCGM gpu label)
        model            VARCHAR,              -- gpu_catalog.model when recognised
        model_raw        VARCHAR,              -- the name as the source wrote it
        memory_total_mib DOUBLE,               -- card memory as the source reported it (MiB)
        cluster          VARCHAR,              -- cluster named at ingest (--cluster) or by the source
        mig_profile      VARCHAR,              -- e.g. 3g.40gb for a MIG instance; NULL for a full GPU
        parent_gpu_id    VARCHAR,              -- the physical GPU of a MIG instance
        first_seen       TIMESTAMP,            -- first sample or inventory time (UTC)
        last_seen        TIMESTAMP             -- last sample or inventory time (UTC)
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS samples (
        ts                TIMESTAMP NOT NULL,   -- UTC
        gpu_id            VARCHAR NOT NULL,    -- gpus.gpu_id
        interval_s        FLOAT NOT NULL,       -- the time this sample stands for (collector cadence, capped)
        util_pct          FLOAT,                -- nvidia-smi utilization.gpu / DCGM_FI_DEV_GPU_UTIL
        mem_util_pct      FLOAT,                -- utilization.memory (memory controller busy)
        mem_used_mib      FLOAT,               -- framebuffer memory used (MiB)
        mem_total_mib     FLOAT,               -- framebuffer memory total (MiB)
        power_w           FLOAT,               -- board power draw (W)
        energy_j          DOUBLE,               -- cumulative counter since driver load, when reported
        temp_c            FLOAT,               -- GPU temperature (°C)
        sm_active_pct     FLOAT,                -- DCGM_FI_PROF_SM_ACTIVE × 100 / NVML GPM SM activity
        tensor_active_pct FLOAT,                -- DCGM_FI_PROF_PIPE_TENSOR_ACTIVE × 100
        sm_clock_mhz      FLOAT,               -- SM clock (MHz)
        throttle_reasons  UBIGINT,              -- NVML clocks_event_reasons bitmask
        job_id            VARCHAR,              -- attributed at ingest; NULL when no job held the GPU
        ingest_id         BIGINT NOT NULL      -- ingests.ingest_id
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS jobs (
        job_id          VARCHAR PRIMARY KEY,   -- unique across sources: <cluster>/<scheduler id>, or a source prefix (hf:, unattributed:)
        source          VARCHAR NOT NULL,      -- format that produced it: jobs_csv, sacct, ...
        cluster         VARCHAR,               -- cluster the job ran on
        user_name       VARCHAR,               -- who ran it
        team            VARCHAR,               -- team / account that pays (Slurm Account)
        project         VARCHAR,               -- project, when the source says
        name            VARCHAR,               -- job name
        kind            VARCHAR NOT NULL,      -- training | fine-tune | inference | interactive | other
        gpu_model       VARCHAR,               -- gpu_catalog.model when recognised
        gpu_count       DOUBLE NOT NULL,       -- fractional for shared GPUs (Alibaba gpu_milli, MIG)
        pricing_tier    VARCHAR NOT NULL,      -- on_demand | spot | reserved | on_prem
        submit_ts       TIMESTAMP,             -- submitted (UTC)
        start_ts        TIMESTAMP,             -- started holding GPUs (UTC)
        end_ts          TIMESTAMP,             -- NULL while running
        state           VARCHAR NOT NULL,      -- COMPLETED | RUNNING | FAILED | CANCELLED | TIMEOUT | OOM | NODE_FAIL | PENDING | ...
        exit_reason     VARCHAR,               -- scheduler's reason or exit code (e.g. 'by 1234', 'ExitCode 1:0')
        last_checkpoint_ts TIMESTAMP,          -- for failed runs: time lost = end - last checkpoint
        ingest_id       BIGINT NOT NULL,       -- ingests.ingest_id of the latest record of this job
        partition       VARCHAR,               -- scheduler partition / queue (Slurm Partition)
        gpu_mem_peak_mib  DOUBLE,              -- per-task peak GPU memory the scheduler measured (sacct gres/gpumem)
        gpu_util_peak_pct DOUBLE               -- peak GPU utilisation the scheduler measured (sacct gres/gpuutil)
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS allocations (
        job_id      VARCHAR NOT NULL,          -- jobs.job_id
        host        VARCHAR,                   -- host the GPUs were on
        gpu_id      VARCHAR,                   -- NULL when the source names only the host
        gpu_count   DOUBLE NOT NULL,           -- GPUs held on this host by this row (1 when gpu_id is known)
        start_ts    TIMESTAMP NOT NULL,        -- held from (UTC)
        end_ts      TIMESTAMP,                 -- NULL while running
        ingest_id   BIGINT NOT NULL            -- ingests.ingest_id
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS training_runs (
        job_id             VARCHAR PRIMARY KEY, -- jobs.job_id the run belongs to
        source             VARCHAR NOT NULL,   -- format that produced it (hf_trainer_state, jobs_csv, demo, ...)
        model              VARCHAR,            -- model name
        params             DOUBLE,              -- parameter count
        n_layers           INTEGER,            -- transformer layers (for the attention term of MFU)
        hidden_size        INTEGER,            -- model width d_model
        precision          VARCHAR,             -- bf16 | fp16 | fp32 | tf32 | fp8 | int4 ...
        optimizer          VARCHAR,             -- adamw | adam | sgd | ...
        batch_size         INTEGER,             -- per-GPU micro-batch
        grad_accum         INTEGER,            -- gradient accumulation steps
        global_batch_size  INTEGER,            -- samples per optimizer step over all GPUs
        seq_len            INTEGER,            -- tokens per sample
        tokens             DOUBLE,             -- tokens processed by the whole run
        samples            DOUBLE,             -- samples processed by the whole run
        epochs             DOUBLE,             -- epochs completed
        steps              BIGINT,             -- optimizer steps
        runtime_s          DOUBLE,             -- training wall time (s)
        peak_mem_mib       DOUBLE,              -- per GPU
        samples_per_s      DOUBLE,              -- whole job
        tokens_per_s       DOUBLE,              -- whole job
        requests           DOUBLE,              -- inference: requests served
        generated_tokens   DOUBLE,              -- inference: tokens generated
        grad_noise_scale   DOUBLE,              -- B_noise estimate when the run logs one
        total_flos         DOUBLE,             -- FLOPs the framework counted (HF total_flos)
        ingest_id          BIGINT NOT NULL     -- ingests.ingest_id
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS train_log (
        job_id      VARCHAR NOT NULL,          -- jobs.job_id
        step        BIGINT,                    -- optimizer step of the entry
        epoch       DOUBLE,                    -- fractional epoch
        ts          TIMESTAMP,                 -- wall time of the entry (UTC), when logged
        elapsed_s   DOUBLE,                    -- seconds since the run started
        loss        DOUBLE,                    -- training loss
        eval_loss   DOUBLE,                    -- evaluation loss
        learning_rate DOUBLE,                  -- learning rate
        tokens_seen DOUBLE,                    -- tokens seen so far (num_input_tokens_seen)
        ingest_id   BIGINT NOT NULL            -- ingests.ingest_id
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS processes (
        ts          TIMESTAMP NOT NULL,        -- snapshot time (UTC)
        gpu_id      VARCHAR NOT NULL,          -- gpus.gpu_id
        pid         BIGINT,                    -- process id on its host
        process_name VARCHAR,                  -- executable name
        used_mem_mib DOUBLE,                   -- GPU memory the process holds (MiB)
        job_id      VARCHAR,                   -- job the process belongs to (Slurm env, cgroup, pod), when known
        ingest_id   BIGINT NOT NULL            -- ingests.ingest_id
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS gpu_events (
        ts          TIMESTAMP NOT NULL,        -- when it happened (UTC)
        gpu_id      VARCHAR NOT NULL,          -- gpus.gpu_id
        kind        VARCHAR NOT NULL,          -- xid | ecc_sbe | ecc_dbe | throttle
        value       VARCHAR,                   -- the XID code, error count or reason bits
        ingest_id   BIGINT NOT NULL            -- ingests.ingest_id
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS collector_state (
        collector   VARCHAR PRIMARY KEY,       -- e.g. prometheus:http://host:9090, slurm:ci
        cursor_ts   TIMESTAMP,                 -- read up to here
        updated_at  TIMESTAMP NOT NULL,        -- UTC time of the last successful poll
        detail_json VARCHAR                    -- collector-specific state (JSON)
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS capacity (
        cluster     VARCHAR NOT NULL,          -- cluster that owns the GPUs
        gpu_model   VARCHAR NOT NULL,          -- gpu_catalog.model
        gpu_count   DOUBLE NOT NULL,           -- GPUs the organisation pays for whether used or not
        start_ts    TIMESTAMP NOT NULL,        -- owned from (UTC)
        end_ts      TIMESTAMP,                 -- owned until (UTC); NULL: still owned
        ingest_id   BIGINT NOT NULL            -- 0 for settings' [clusters.X] capacity, else the trace ingest that declared it
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS samples_minute (
        minute       TIMESTAMP NOT NULL,       -- date_trunc('minute', ts)
        gpu_id       VARCHAR NOT NULL,         -- gpus.gpu_id
        job_id       VARCHAR,                  -- samples.job_id (NULL: no job held the GPU)
        n            INTEGER NOT NULL,         -- samples in the minute
        covered_s    DOUBLE NOT NULL,          -- sum(interval_s)
        util_s       DOUBLE,                   -- sum(util_pct/100 × interval_s) over samples with util
        util_cov_s   DOUBLE,                   -- sum(interval_s) over samples with util
        idle_s       DOUBLE,                   -- interval_s of samples at or under the idle threshold
        util_max     FLOAT,                    -- max util_pct (%)
        mem_used_max_mib FLOAT,                -- max mem_used_mib (MiB)
        mem_total_mib    FLOAT,                -- max mem_total_mib (MiB)
        power_j      DOUBLE,                   -- sum(power_w × interval_s)
        power_cov_s  DOUBLE,                   -- Σ interval_s of samples with power
        sm_active_s  DOUBLE,                   -- Σ sm_active_pct/100 × interval_s
        tensor_active_s DOUBLE,                -- Σ tensor_active_pct/100 × interval_s
        prof_cov_s   DOUBLE,                   -- Σ interval_s of samples with SM- or tensor-active
        -- the fast path's columns (gpuledger/ledger/rollup.py; docs/metrics.md "Fast path"): enough to give every
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
        memu_cov_s   DOUBLE,                   -- Σ interval_s of those samples
        n_no_total   INTEGER,                  -- samples without mem_total
        energy_j     DOUBLE,                   -- Σ per-sample energy (rollup_columns.py e_j)
        energy_cov_s DOUBLE,                   -- Σ interval_s of samples with an energy figure
        util_n       INTEGER,                  -- samples with a utilization reading
        dip_n        INTEGER,                  -- ... below 10 % (thresholds.dip_util_pct)
        burst_n      INTEGER,                  -- ... above 70 % (thresholds.burst_util_pct)
        throttle_n   INTEGER,                  -- samples with throttle_reasons
        throttled_n  INTEGER,                  -- ... with a power/thermal bit
        temp_n       INTEGER,                  -- samples with a temperature
        hot_n        INTEGER,                  -- samples at >= 85 °C
        temp_max_c   DOUBLE,                   -- max temperature (°C)
        pairs_n      INTEGER,                  -- samples with a contiguous predecessor (same GPU and job), both with util
        swings_n     INTEGER,                  -- ... swinging between < 10 % and > 70 %
        first_pair   INTEGER,                  -- pairs_n / swings_n of the minute's first sample alone
        first_swing  INTEGER                   -- (see first_pair)
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS samples_day AS
        SELECT minute::DATE AS day, * EXCLUDE (minute) FROM samples_minute WHERE false
    """,
    """
    CREATE TABLE IF NOT EXISTS idle_runs (
        gpu_id      VARCHAR NOT NULL,          -- gpus.gpu_id
        job_id      VARCHAR,                   -- the samples' job_id (NULL: no job)
        run_start   TIMESTAMP NOT NULL,        -- first sample of the run: with gpu_id and job_id the run's key
        run_s       DOUBLE NOT NULL,           -- Σ interval_s of the whole run
        run_reach_ts TIMESTAMP NOT NULL,       -- last sample ts + 1.5 × its interval_s: a later sample links only before
        day         DATE NOT NULL,             -- one row per UTC day the run touches (a view cuts runs at midnight)
        first_ts    TIMESTAMP NOT NULL,        -- first / last sample of the run on that day
        last_ts     TIMESTAMP NOT NULL,        -- (see first_ts)
        end_ts      TIMESTAMP NOT NULL,        -- max(ts + interval_s) on that day
        idle_s      DOUBLE NOT NULL            -- Σ interval_s on that day
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS samples_util_hist (
        day         DATE NOT NULL,             -- UTC day of the samples
        gpu_id      VARCHAR NOT NULL,          -- gpus.gpu_id
        job_id      VARCHAR,                   -- samples.job_id
        util_pct    FLOAT NOT NULL,            -- one row per distinct reading: exact time-weighted percentiles
        seconds     DOUBLE NOT NULL            -- Σ interval_s
    )
    """,
    "CREATE INDEX IF NOT EXISTS allocations_job ON allocations(job_id)",
]

# Version 2: what the real-cluster, hardening and reporting work adds. Each block is one concern; a
# statement here must also work on a fresh database (it runs right after SCHEMA_V1 there). Column comments
# follow the same "-- meaning" style so docs/schema.md picks them up.
SCHEMA_V2: list[str] = [
    # -- attribution (host-level and shared GPUs) --
    """
    ALTER TABLE allocations ADD COLUMN IF NOT EXISTS gpu_index INTEGER -- GPU index on the host the scheduler named (sacct --json gres_detail IDX); gpu_id stays NULL
    """,
    """
    ALTER TABLE jobs ADD COLUMN IF NOT EXISTS attribution VARCHAR -- how samples were tied to the job: exact | by_share | none (gpuledger/ledger/shares.py attribution_update_sql: a sample in a stretch of a card the job shares is its too)
    """,
    """
    CREATE TABLE IF NOT EXISTS host_attribution (
        host        VARCHAR NOT NULL,          -- short lower-case host name the allocation named
        job_id      VARCHAR NOT NULL,          -- jobs.job_id
        gpu_id      VARCHAR NOT NULL,          -- gpus.gpu_id of the card tied to the job (one job per GPU-second)
        start_ts    TIMESTAMP NOT NULL,        -- tied from (UTC)
        end_ts      TIMESTAMP,                 -- tied until (UTC); NULL while the job runs
        method      VARCHAR NOT NULL,          -- exact | by_share
        evidence    VARCHAR NOT NULL           -- gres_idx | gpu_id | process | sample_label | whole_host | remainder | dealt | shared
    )
    """,
    # -- rejected rows (--skip-bad-rows) --
    """
    CREATE TABLE IF NOT EXISTS rejected_rows (
        ingest_id   BIGINT NOT NULL,           -- ingests.ingest_id of the file the row came from
        path        VARCHAR NOT NULL,          -- absolute path of that file
        line        BIGINT,                    -- 1-based line of the row in the file; NULL when the format has none
        table_name  VARCHAR NOT NULL,          -- ledger table the row was for (samples, jobs, ...)
        column_name VARCHAR NOT NULL,          -- the column as the source names it (power.draw, end, ...)
        value       VARCHAR,                   -- the value, as text
        reason      VARCHAR NOT NULL           -- the physical range it broke (collectors/validate.py)
    )
    """,
    # -- notices (cooldown) --
    """
    CREATE TABLE IF NOT EXISTS notices (
        user_name   VARCHAR NOT NULL,          -- jobs.user_name the notice went to
        kind        VARCHAR NOT NULL,          -- idle_gpus | failed_no_checkpoint | oversized_gpu | small_batch (gpuledger/reports/notices.py)
        target      VARCHAR NOT NULL,          -- what it is about: a jobs.job_id, or the user for a per-user pattern
        usd         DOUBLE,                    -- the $ the notice named (USD, in its period)
        period      VARCHAR NOT NULL,          -- the period it covered: ISO week (2026-W47) or since..until
        address     VARCHAR NOT NULL,          -- the mail address it was sent to
        sent_ts     TIMESTAMP NOT NULL         -- when the mail was accepted by the SMTP server (UTC); the cooldown counts from here
    )
    """,
    # -- observed spans --
    # When each GPU reported telemetry, a few rows per GPU-day (gpuledger/ledger/observed.py): the capacity
    # analytics' observed GPUs read these instead of one row per GPU-minute. Kept with the rollups.
    """
    CREATE TABLE IF NOT EXISTS observed_runs (
        gpu_id       VARCHAR NOT NULL,         -- gpus.gpu_id
        day          DATE NOT NULL,            -- UTC day of the run (runs are cut at midnight)
        first_minute TIMESTAMP NOT NULL,       -- first minute of the run (samples_minute.minute)
        first_ts     TIMESTAMP,                -- first sample in that minute (UTC)
        end_ts       TIMESTAMP                 -- latest ts + interval_s of the run's samples (UTC)
    )
    """,
    # -- job summaries (Prometheus pushdown) --
    # One row per job, GPU and query window, computed by Prometheus over the job's own samples
    # (collectors/prometheus_jobs.py, `collect prometheus --jobs`); no raw samples travel. Where a job has no
    # rows in `samples`, these are its telemetry figures (analytics/job_summaries.py).
    """
    CREATE TABLE IF NOT EXISTS job_summaries (
        job_id            VARCHAR NOT NULL,    -- jobs.job_id (hpc_job label, prefixed <cluster>/ like the Slurm collector's)
        gpu_id            VARCHAR NOT NULL,    -- gpus.gpu_id, mapped from the labels as for samples (UUID, UUID/GPU_I_ID, host:gpu)
        host              VARCHAR,             -- Hostname label
        window_start      TIMESTAMP NOT NULL,  -- query window (UTC), whole hours: the job's samples on this GPU lie inside
        window_end        TIMESTAMP NOT NULL,  -- (see window_start); with job_id and gpu_id the row's key
        scrape_s          DOUBLE NOT NULL,     -- scrape interval the sample count is converted with (s)
        samples           BIGINT NOT NULL,     -- utilization samples in the window (count_over_time)
        gpu_hours         DOUBLE NOT NULL,     -- samples x scrape_s / 3600 (GPU-hours with telemetry)
        util_mean_pct     DOUBLE,              -- sum_over_time / count_over_time of DCGM_FI_DEV_GPU_UTIL (%)
        util_max_pct      DOUBLE,              -- max_over_time (%)
        util_p50_pct      DOUBLE,              -- quantile_over_time(0.5) (%)
        util_p90_pct      DOUBLE,              -- quantile_over_time(0.9) (%)
        mem_used_mean_mib DOUBLE,              -- avg_over_time(DCGM_FI_DEV_FB_USED) (MiB)
        mem_used_max_mib  DOUBLE,              -- max_over_time(DCGM_FI_DEV_FB_USED) (MiB)
        mem_total_mib     DOUBLE,              -- avg FB_USED + avg FB_FREE (MiB); NULL without FB_FREE
        power_mean_w      DOUBLE,              -- avg_over_time(DCGM_FI_DEV_POWER_USAGE) (W)
        power_max_w       DOUBLE,              -- max_over_time(DCGM_FI_DEV_POWER_USAGE) (W)
        sm_active_pct     DOUBLE,              -- 100 x avg_over_time(DCGM_FI_PROF_SM_ACTIVE) (%)
        tensor_active_pct DOUBLE,              -- 100 x avg_over_time(DCGM_FI_PROF_PIPE_TENSOR_ACTIVE) (%)
        idle_s            DOUBLE NOT NULL,     -- seconds inside idle stretches, found in PromQL (docs/scale.md)
        idle_stretches    INTEGER NOT NULL,    -- idle stretches counted in idle_s
        idle_util_pct     DOUBLE NOT NULL,     -- thresholds.idle_util_pct the stretches were found with (%)
        idle_min_minutes  DOUBLE NOT NULL,     -- thresholds.idle_min_minutes they were found with (min)
        ingest_id         BIGINT NOT NULL,     -- ingests.ingest_id (format prometheus_jobs)
        PRIMARY KEY (job_id, gpu_id, window_end)
    )
    """,
]

# Version 3: what came after the first ledgers at version 2 were written (a v2 ledger gets it on its next open).
SCHEMA_V3: list[str] = [
    # -- per-process utilization (shared GPUs) --
    # nvidia-smi pmon (collectors/nvidia_smi_pmon.py) adds each process's utilization to its processes row;
    # process_shares sums it per GPU, poll and job (collectors/attribute.py), and the shared-GPU rule of
    # analytics/cost.py splits a GPU-second several jobs hold by those SM shares.
    """
    ALTER TABLE processes ADD COLUMN IF NOT EXISTS sm_pct FLOAT -- SM utilization of the process over the poll (%; nvidia-smi pmon sm, NVML process utilization)
    """,
    """
    ALTER TABLE processes ADD COLUMN IF NOT EXISTS mem_util_pct FLOAT -- memory-controller utilization of the process over the poll (%; pmon mem)
    """,
    """
    ALTER TABLE processes ADD COLUMN IF NOT EXISTS enc_pct FLOAT -- video encoder utilization of the process (%; pmon enc)
    """,
    """
    ALTER TABLE processes ADD COLUMN IF NOT EXISTS dec_pct FLOAT -- video decoder utilization of the process (%; pmon dec)
    """,
    """
    ALTER TABLE processes ADD COLUMN IF NOT EXISTS interval_s FLOAT -- time the poll stands for (s; utilization sources only, NULL for snapshots)
    """,
    """
    CREATE TABLE IF NOT EXISTS process_shares (
        gpu_id      VARCHAR NOT NULL,          -- gpus.gpu_id of the physical GPU
        ts          TIMESTAMP NOT NULL,        -- poll time (UTC): the SM figure holds over [ts, ts + interval_s)
        interval_s  FLOAT NOT NULL,            -- time the poll stands for (s)
        job_id      VARCHAR,                   -- jobs.job_id the processes belong to; NULL: the poll itself, from a node-level log that lists every process on the GPU (a job absent from it had none)
        sm_pct      FLOAT,                     -- Σ sm_pct of the job's processes on the GPU in the poll (%); NULL: none had an SM sample, or a poll row
        ingest_id   BIGINT NOT NULL            -- ingests.ingest_id of the processes rows it sums
    )
    """,
]

# Version 4: the per-GPU-hour rollup the fleet heatmaps read (gpuledger/ledger/rollup.py). A ledger at an earlier
# version gets it filled from its minute rows on its next open, so it holds what an ingest would have written.
SCHEMA_V4: list[str] = [
    """
    CREATE TABLE IF NOT EXISTS samples_hour AS
        SELECT minute AS hour, * EXCLUDE (minute) FROM samples_minute WHERE false
    """,
    f"""
    INSERT INTO samples_hour BY NAME
    SELECT date_trunc('hour', m.minute) AS hour, m.gpu_id, m.job_id, {HOUR_AGGREGATES}
    FROM samples_minute m GROUP BY ALL ORDER BY hour, m.gpu_id
    """,
]

# Version 5: who else holds a row, so that removing an ingest (--replace) never removes what another ingest
# still holds (collectors/provenance.py delete_ingests). A row's own ingest_id names one ingest; these name the
# others. A ledger at an earlier version starts with them empty: which ingests held its older rows was never
# recorded, so for those rows --replace removes what the replaced ingest owns, as before.
SCHEMA_V5: list[str] = [
    """
    CREATE TABLE IF NOT EXISTS held_rows (
        table_name  VARCHAR NOT NULL,          -- ledger table of the row: samples | jobs
        row_key     VARCHAR NOT NULL,          -- the row's key there: jobs.job_id, or samples.gpu_id (with ts)
        ts          TIMESTAMP,                 -- samples: the sample's time (UTC), with row_key its (gpu_id, ts); NULL for jobs
        ingest_id   BIGINT NOT NULL            -- an ingest that also brought the row (a sample already in the ledger, a job's record sent again or kept out as older): removing the row's own ingest hands the row to the latest such one instead of deleting it
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS ingest_sources (
        ingest_id   BIGINT NOT NULL,           -- ingests.ingest_id whose bytes another source has too
        path        VARCHAR NOT NULL,          -- absolute path of that other file (reported as already ingested)
        source_key  VARCHAR NOT NULL,          -- its --replace key: --replace of the ingest's own key leaves the ingest to this source, and --replace of this key only drops this row
        seen_at     TIMESTAMP NOT NULL         -- UTC wall time it was found already ingested
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS checkpoint_placements (
        job_id        VARCHAR NOT NULL,        -- jobs.job_id whose last_checkpoint_ts a training log set (ingest --job; collectors/checkpoints.py)
        ingest_id     BIGINT NOT NULL,         -- ingests.ingest_id of that log
        checkpoint_ts TIMESTAMP NOT NULL,      -- the checkpoint time it placed (UTC)
        base_ts       TIMESTAMP                -- the job's last_checkpoint_ts before any log placed one (UTC; NULL: none): what removing the last placement restores
    )
    """,
]

# Version 6: dense TF32 and FP8 tensor peaks in the catalog, so that a tf32 or fp8 run gets an MFU
# (analytics/unit_costs.py). Rebuilt from data/gpu_catalog.toml with the rest of the catalog.
SCHEMA_V6: list[str] = [
    """
    ALTER TABLE gpu_catalog ADD COLUMN IF NOT EXISTS tf32_tflops DOUBLE -- dense TF32 tensor peak, TFLOP/s; NULL where the card has none
    """,
    """
    ALTER TABLE gpu_catalog ADD COLUMN IF NOT EXISTS fp8_tflops DOUBLE -- dense FP8 tensor peak, TFLOP/s; NULL where the card has none
    """,
]

# Version 7: each attempt of a requeued job is kept (collectors/sacct.py with ``sacct --duplicates``): an
# earlier attempt is its own row, ``<job_id>#<n>``, billed to the job it is an attempt of. A ledger at an
# earlier version kept only each job's last record: its rows get NULL (not requeued, as far as it knows).
SCHEMA_V7: list[str] = [
    """
    ALTER TABLE jobs ADD COLUMN IF NOT EXISTS attempt INTEGER -- 1, 2, ... for the attempts of a requeued job by start (one sacct -D dump, or separate dumps: collectors/attempts.py); NULL: one attempt
    """,
    """
    ALTER TABLE jobs ADD COLUMN IF NOT EXISTS attempt_of VARCHAR -- the scheduler job every attempt row is billed to (its last attempt's job_id); NULL: not requeued
    """,
]

# Version 8: Slurm's own per-job GPU accounting (sacct TRESUsageInAve, collectors/sacct.py) and the array task
# name of a job known by its raw id (one job whether named 301 or 300_1).
SCHEMA_V8: list[str] = [
    """
    ALTER TABLE jobs ADD COLUMN IF NOT EXISTS gpu_util_mean_pct DOUBLE -- mean GPU utilisation the scheduler measured: its steps' TRESUsageInAve gres/gpuutil weighted by step time (%; docs/metrics.md)
    """,
    """
    ALTER TABLE jobs ADD COLUMN IF NOT EXISTS gpu_mem_mean_mib DOUBLE -- mean GPU memory the scheduler measured: TRESUsageInAve gres/gpumem weighted by step time (MiB per task)
    """,
    """
    ALTER TABLE jobs ADD COLUMN IF NOT EXISTS array_task VARCHAR -- the array task's other name (<cluster>/300_1) of a job stored by its raw id (301); NULL otherwise
    """,
]

# Version 9: the split of every shared card, stored (gpuledger/ledger/shares.py): cost reads it, and the
# rollups count a shared card's samples for each holding job weighted by its share. A ledger at an earlier
# version gets it filled on its next open; where it holds a shared card its rollups were built with each
# sample counted for one job only, so they are marked stale: the next settings sync (sync_reference) or ingest
# rebuilds them, as after a change of thresholds.
SCHEMA_V9: list[str] = [
    """
    CREATE TABLE IF NOT EXISTS gpu_shares (
        job_id      VARCHAR,                   -- jobs.job_id holding a share of the card; NULL: the rest of the card where the jobs' declared fractions fit in it (unallocated)
        gpu_id      VARCHAR NOT NULL,          -- gpus.gpu_id of the shared card (as the allocations name it)
        s_from      TIMESTAMP NOT NULL,        -- the piece of the shared stretch starts (UTC)
        s_to        TIMESTAMP NOT NULL,        -- and ends (UTC, exclusive); 9999-12-31 while the jobs run
        share       DOUBLE NOT NULL,           -- the job's share of each card-second of the piece: its declared fraction where the fractions fit, else split by SM use or declared fraction (the shares of a piece sum to 1)
        cut         DOUBLE NOT NULL            -- what the job declared beyond its share (GPUs; 0 where the fractions fit; negative where its processes used more of the SMs than it declared)
    )
    """,
    f"INSERT INTO gpu_shares SELECT {SHARES_COLUMNS} FROM ({SHARED_SEGMENTS_SQL})",
    """
    DELETE FROM schema_meta WHERE key = 'rollup_thresholds' AND (SELECT count(*) FROM gpu_shares) > 0
    """,
]

# Version 10: recommendations as items with an owner and a status across weeks (gpuledger/items/). An item's
# identity is its key (kind:target_type:target, gpuledger/items/key.py); its status is the latest of its changes,
# which are only ever appended (who, what, when it took effect), so the history is the record.
SCHEMA_V10: list[str] = [
    """
    CREATE TABLE IF NOT EXISTS action_items (
        item_id      VARCHAR PRIMARY KEY,      -- short hash of item_key (gpuledger/items/key.py item_id): the id `gpuledger actions set` takes
        item_key     VARCHAR NOT NULL,         -- kind:target_type:target, the problem's identity across weeks (docs/recommendations.md, "Items across weeks")
        kind         VARCHAR NOT NULL,         -- the recommendation kind (analytics.recommend.KINDS)
        target_type  VARCHAR NOT NULL,         -- family | user | cluster | team (a job's item is its run family's)
        target       VARCHAR NOT NULL,         -- user/family stem, user, cluster/GPU model
        team         VARCHAR,                  -- the team whose lead may change it; NULL: an operators' item (admins only)
        first_seen   DATE NOT NULL,            -- Monday (UTC) of the first ISO week the problem was listed
        recorded_at  TIMESTAMP NOT NULL        -- UTC wall time the item was first recorded
    )
    """,
    """
    CREATE SEQUENCE IF NOT EXISTS action_change_seq START 1
    """,
    """
    CREATE TABLE IF NOT EXISTS action_history (
        change_id    BIGINT PRIMARY KEY,       -- from action_change_seq: the order changes were recorded in
        item_id      VARCHAR NOT NULL,         -- action_items.item_id
        effective_at TIMESTAMP NOT NULL,       -- when the change took effect (UTC; `actions set --at`, default the time it was recorded)
        status       VARCHAR NOT NULL,         -- open | acknowledged | done | dismissed | snoozed
        until_day    DATE,                     -- snoozed: the last UTC day of the snooze; NULL otherwise
        owner        VARCHAR,                  -- who owns the item from this change on; NULL: unchanged
        note         VARCHAR,                  -- why (a dismissal's reason, what was done); the ledger's own reopen says what came back
        changed_by   VARCHAR NOT NULL,         -- who: the signed-in email, the CLI's OS user, or gpuledger for a reopen
        recorded_at  TIMESTAMP NOT NULL        -- UTC wall time it was written
    )
    """,
]

# Version 11: the alerts gpuledger sent (gpuledger/alerts/): each crossing once, and a cooldown per rule and scope.
SCHEMA_V11: list[str] = [
    """
    CREATE TABLE IF NOT EXISTS alerts_sent (
        alert_key   VARCHAR PRIMARY KEY,       -- rule|scope|period|detail: one crossing (gpuledger/alerts/rules.py documents each rule's key)
        rule        VARCHAR NOT NULL,          -- budget | budget_forecast | spend_change | waste_share | unheld_capacity
        scope       VARCHAR NOT NULL,          -- team:NAME, cluster:NAME, cluster:NAME/MODEL or fleet
        judged_day  DATE NOT NULL,             -- the as-of day the ledger was judged at
        sent_at     TIMESTAMP NOT NULL,        -- UTC wall time it was sent
        channels    VARCHAR NOT NULL,          -- where it went: mail, webhook (comma-separated)
        message     VARCHAR NOT NULL           -- the text sent
    )
    """,
]

# Version 12: what the guard did (gpuledger/guard/live.py, `gpuledger guard run --enforce`), one row per step it
# took on a job, never updated or deleted: warnings mailed, checkpoint signals, cancels, and the scheduler's answer.
SCHEMA_V12_GUARD: list[str] = [
    """
    CREATE SEQUENCE IF NOT EXISTS guard_action_seq START 1
    """,
    """
    CREATE TABLE IF NOT EXISTS guard_actions (
        action_id      BIGINT PRIMARY KEY,     -- from guard_action_seq, in the order the actions were taken
        job_id         VARCHAR NOT NULL,       -- jobs.job_id the step was taken on
        policy         VARCHAR NOT NULL,       -- [[guard.policy]] name
        step           VARCHAR NOT NULL,       -- warn | warn_again | signal | cancel
        run_start      TIMESTAMP NOT NULL,     -- start of the idle run the step belongs to (UTC); with job_id, policy and step the step's key
        due_ts         TIMESTAMP NOT NULL,     -- when the policy made the step due (UTC)
        acted_ts       TIMESTAMP NOT NULL,     -- when the guard took it (UTC)
        gpu_count      DOUBLE NOT NULL,        -- jobs.gpu_count at the time
        idle_gpu_hours DOUBLE NOT NULL,        -- gpu_count × the idle run's length at due_ts (GPU-hours)
        idle_usd       DOUBLE,                 -- those GPU-hours at the prices in force, each UTC day at its own (USD; NULL: no price for the model)
        mail_id        VARCHAR,                -- Message-ID of the owner's warning (NULL: not mailed: cooldown, quiet, no address, or not a warning)
        answer         VARCHAR,                -- the scheduler's answer to a signal or cancel (scancel's exit and output, the API's status); NULL for a warning
        accepted       BOOLEAN,                -- the scheduler accepted the signal or cancel; NULL for a warning
        planned_end_ts TIMESTAMP               -- a cancelled job's end as its scheduler planned it (Slurm: start + time limit, squeue %e; UTC); NULL: none known (a pod, no limit)
    )
    """,
]

MIGRATIONS: list[list[str]] = [
    SCHEMA_V1,
    SCHEMA_V2,
    SCHEMA_V3,
    SCHEMA_V4,
    SCHEMA_V5,
    SCHEMA_V6,
    SCHEMA_V7,
    SCHEMA_V8,
    SCHEMA_V9,
    SCHEMA_V10,
    SCHEMA_V11,
    SCHEMA_V12_GUARD,
]
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
    "samples_hour",
    "idle_runs",
    "samples_util_hist",
    "job_summaries",
    "rejected_rows",
    "host_attribution",
    "process_shares",
    "held_rows",
    "ingest_sources",
    "checkpoint_placements",
    "gpu_shares",
    "alerts_sent",
    "guard_actions",
)

# Tables whose rows belong to one ingest (deleted with it on --replace; collectors/provenance.py delete_ingests first
# hands a row another ingest also holds to that one), and the version-5 records of what else an ingest holds.
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
    "rejected_rows",
    "process_shares",
    "held_rows",
    "ingest_sources",
    "checkpoint_placements",
)


def current_version(con: duckdb.DuckDBPyConnection) -> int:
    """The ledger's schema version; 0 for a database without gpuledger's tables.

    Every connection asks, so it is asked cheaply: looking the table up as a relation costs 0.2 ms, the
    ``information_schema.tables`` view 7 ms. A relation that is not there raises before anything runs, so a
    caller's open transaction stays usable (a failed SELECT would abort it)."""
    try:
        con.table("schema_meta")
    except duckdb.CatalogException:
        return 0
    rows = con.execute("SELECT value FROM schema_meta WHERE key = 'schema_version'").fetchall()
    return int(rows[0][0]) if rows else 0


def migrate(con: duckdb.DuckDBPyConnection) -> int:
    """Bring the schema to SCHEMA_VERSION; the caller owns the transaction. Returns the old version."""
    old = current_version(con)
    if old > SCHEMA_VERSION:
        from gpuledger.ledger.errors import LedgerError

        raise LedgerError(
            f"database schema version {old} is newer than this gpuledger ({SCHEMA_VERSION}): upgrade gpuledger"
        )
    for statements in MIGRATIONS[old:]:
        for sql in statements:
            con.execute(sql)
    if old < SCHEMA_VERSION:
        con.execute("INSERT OR REPLACE INTO schema_meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)])
    return old
