"""Slurm accounting records (``sacct``) → ``jobs`` and one ``allocations`` row per host a job held.

Two readers share one pipeline (:func:`stage_from_raw`, here):

- :class:`SacctParsable` reads ``sacct -P`` / ``--parsable2`` and ``-p`` (every line ends in ``|``) output, with a
  header in any column order, or header-less (``--noheader``) when ``--columns`` names the fields;
- ``SacctJson`` (collectors/sacct_json.py) reads ``sacct --json`` (Slurm 21–24 data_parser shapes) and turns each
  job into the same VARCHAR fields the text reader produces, so validation and conversion are written once.

TRES strings (GPU count, model, step peaks and means) are read by collectors/sacct_tres.py, host lists and GPU
indices by collectors/sacct_hosts.py.

Meaning (docs/formats-jobs.md says the same for users):

- ``job_id`` is ``<cluster>/<id>`` when a cluster is known (a ``Cluster`` column, else ``--cluster``), else the
  bare id; the id is ``JobIDRaw`` when present (what ``SLURM_JOB_ID`` and dcgm's ``hpc_job`` label carry), else
  ``JobID`` (``123_4`` for an array task). Step rows (``123.batch``, ``123.extern``, ``123.0``) fold into their
  job: its record comes from the allocation row, the steps only add GPU memory/utilisation peaks; folded steps
  are counted in the report. A job listed more than once (each attempt of a requeued job, ``sacct -D``) keeps
  every attempt: the last is the job's row, each earlier one ``<job_id>#<n>`` with ``attempt`` n and
  ``attempt_of`` the job, with its own hosts and time, billed to the job (its badput counted per attempt,
  analytics/badput.py); the same record listed twice is kept once. Across dumps,
  a still-running record never replaces the ledger's finished one (collectors/landing.py, ``_land_jobs``).
- ``gpu_count`` comes from ``AllocTRES`` (what the job held; ``--exclusive`` jobs get more than they asked
  for), else ``ReqTRES`` (pending jobs), else legacy ``AllocGRES``/``ReqGRES``. ``gres/gpu=N`` is the count;
  typed ``gres/gpu:TYPE=N`` entries name the model. A MIG slice counts as its share of the card's compute
  slices: ``gres/gpu:a100_3g.20gb=1`` is 3/7 of an A100 (A30 cards have 4 slices).
- ``gpu_mem_peak_mib`` / ``gpu_util_peak_pct`` are ``gres/gpumem`` / ``gres/gpuutil`` from ``TRESUsageInMax``,
  the largest over the job's steps (bare numbers are bytes, as ``--noconvert`` prints them).
- times are read in ``--tz`` (default this machine's zone: sacct prints the local time of where it ran) and
  stored in UTC; ``Unknown``/``None`` are NULL; epoch seconds (``SLURM_TIME_FORMAT=%s``) are accepted. A
  finished job without ``End`` ends at ``Start + Elapsed``. ``Elapsed`` is Slurm's measure of held time: a
  ``REQUEUED`` record ends at ``Start + Elapsed`` (its ``End`` − ``Start`` includes time spent queued again),
  and a ``RUNNING`` job keeps ``end_ts`` NULL while its allocation rows end at ``Start + Elapsed`` (held at
  least until sacct ran), so it is costed up to the ledger's horizon and never shorter than that.
- a bad value names its line and sacct field; a running job's allocation end is ``Start + Elapsed``, and with
  ``skip_bad_rows`` an implausible one leaves the job out with it (one line, rejected whole).
- allocations: one row per host of ``NodeList``; with ``sacct --json`` ``gres_detail``
  (``gpu:a100:4(IDX:0-3)``, one entry per node) one row per named GPU index (``gpu_index``), which host-level
  attribution (collectors/attribute.py) ties to that card exactly.
- the text reader takes ``|`` (``-P``/``-p``) or a tab (a spreadsheet export of it) as the delimiter.
- states: ``CANCELLED by 1234`` → ``CANCELLED`` (the uid goes to ``exit_reason``), ``OUT_OF_MEMORY`` → ``OOM``.
- ``kind`` is ``interactive`` when ``JobName`` is ``bash``/``sh``/``zsh``/``interactive``/``jupyter*``/
  ``sys/dashboard*`` (Open OnDemand)/``spawner-jupyterhub``, else ``other``: sacct does not say more.
- ``team`` is the ``Account``; ``partition`` the ``Partition``; ``name`` the ``JobName``.
"""

from __future__ import annotations

import re
from pathlib import Path

import duckdb

from collectors.base import IngestOptions, Sniff, quote, read_head
from collectors.row_checks import Check, screen_rows
from collectors.sacct_hosts import _stage_allocations
from collectors.sacct_hosts import expand_nodelist as expand_nodelist
from collectors.sacct_hosts import gres_indices as gres_indices
from collectors.sacct_tres import _gres_as_tres, _model_sql, _parse_tres, _step_means_sql
from collectors.sql_text import sql_path, ts_utc
from collectors.time_zones import local_zone, session_zone
from collectors.validate import find_violations, name_columns
from gpuledger.ledger.errors import FormatError
from gpuledger.ledger.job_states import (
    HELD_STATES,
    OPEN_STATES,
    REQUEUE_STATES,
    SLURM_STATES,
    state_word_sql,
    stored_state_sql,
)
from gpuledger.ledger.sql import sql_list

# Field names sacct --helpformat lists (lower case); used to recognise a header line.
_FIELD_NAMES = """account admincomment alloccpus allocgres allocnodes alloctres associd avecpu avecpufreq avediskread
    avediskwrite avepages averss avevmsize blockid cluster comment constraints consumedenergy
    consumedenergyraw container cputime cputimeraw dbindex derivedexitcode elapsed elapsedraw eligible end
    exitcode extra failednode flags gid group jobid jobidraw jobname layout maxdiskread maxdiskreadnode
    maxdiskreadtask maxdiskwrite maxdiskwritenode maxdiskwritetask maxpages maxpagesnode maxpagestask maxrss
    maxrssnode maxrsstask maxvmsize maxvmsizenode maxvmsizetask mcslabel mincpu mincpunode mincputask ncpus
    nnodes nodelist ntasks partition planned plannedcpu plannedcpuraw priority qos qosraw reason reqcpufreq
    reqcpufreqgov reqcpufreqmax reqcpufreqmin reqcpus reqgres reqmem reqnodes reqtres reservation
    reservationid reserved resvcpu resvcpuraw start state submit submitline suspended systemcomment systemcpu
    timelimit timelimitraw totalcpu tresusageinave tresusageinmax tresusageinmaxnode tresusageinmaxtask
    tresusageinmin tresusageinminnode tresusageinmintask tresusageintot tresusageoutave tresusageoutmax
    tresusageoutmaxnode tresusageoutmaxtask tresusageoutmin tresusageoutminnode tresusageoutmintask
    tresusageouttot uid user usercpu wckey wckeyid workdir"""
KNOWN_FIELDS = frozenset(_FIELD_NAMES.split())
GPU_FIELDS = ("alloctres", "reqtres", "allocgres", "reqgres")
_IDX = re.compile(r"gpu[^()]*\(IDX:([^)]*)\)")
INTERACTIVE_NAME = r"^(bash|sh|zsh|interactive|jupyter.*|sys/dashboard.*|spawner-jupyterhub)$"
_JOBID_LINE = re.compile(r"^\d+(?:_[\d\[\]\-,%]+)?(?:\+\d+)?(?:\.[\w+-]+)?\|")


def _delimiter(line: str) -> str:
    """``|`` (sacct -P/-p), or a tab when the line has tabs and no ``|`` (a spreadsheet's export)."""
    return "\t" if "\t" in line and "|" not in line else "|"


def _header_names(line: str) -> list[str]:
    names = [c.strip().lower() for c in line.rstrip("\r\n").split(_delimiter(line))]
    if len(names) > 1 and names[-1] == "":
        names = names[:-1]  # -p writes a trailing '|'
    return names


def _is_header(names: list[str]) -> bool:
    known = sum(n in KNOWN_FIELDS for n in names)
    return known >= 2 and known >= len(names) / 2


def _first_lines(head: str, n: int = 2) -> list[str]:
    return [ln for ln in head.lstrip("\ufeff").splitlines() if ln.strip()][:n]


def _is_fixed_width(lines: list[str]) -> bool:
    if len(lines) < 2 or "|" in lines[0]:
        return False
    names = lines[0].lower().split()
    return bool(names) and all(n in KNOWN_FIELDS for n in names) and set(lines[1].strip()) <= {"-", " "}


def _duration_s(v: str) -> str:
    """``[D-][HH:]MM:SS[.fff]`` → seconds (DOUBLE), NULL when it does not read."""
    pat = r"'^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+(?:\.\d+)?)$'"

    def grp(i: int) -> str:
        return f"coalesce(TRY_CAST(nullif(regexp_extract({v}, {pat}, {i}), '') AS DOUBLE), 0)"

    return (
        f"(CASE WHEN regexp_matches({v}, {pat}) "
        f"THEN {grp(1)} * 86400 + {grp(2)} * 3600 + {grp(3)} * 60 + {grp(4)} END)"
    )


def _time(v: str) -> str:
    return ts_utc(f"nullif({v}, 'Unknown')")


class SacctParsable:
    name = "sacct"
    description = "Slurm sacct -P/--parsable2 or -p output (header in any order, or --columns for --noheader)"

    def sniff(self, path: Path, head: str) -> Sniff:
        lines = _first_lines(head)
        if not lines:
            return Sniff(0)
        if _is_fixed_width(lines):
            return Sniff(0.6)  # ours, to say "re-run with -P" rather than "unknown format"
        if "|" in lines[0] or "\t" in lines[0]:
            names = _header_names(lines[0])
            if _is_header(names):
                return Sniff(0.95 if {"jobid", "jobidraw"} & set(names) else 0.6)
            if "|" not in lines[0]:
                known = [n for n in names if n in KNOWN_FIELDS]
                return Sniff(
                    0,
                    f"sacct (tab-separated): the header names {len(known)} sacct field(s) of {len(names)}"
                    + (f" ({', '.join(known[:5])})" if known else "")
                    + "; a sacct export needs a header of sacct --format fields (JobID, State, AllocTRES, ...)",
                )
            if _JOBID_LINE.match(lines[0]) and lines[0].count("|") >= 2:
                return Sniff(0.5)
        return Sniff(0)

    def stage(self, con: duckdb.DuckDBPyConnection, path: Path, opts: IngestOptions) -> dict[str, int]:
        lines = _first_lines(read_head(path))
        if _is_fixed_width(lines):
            raise FormatError(
                path,
                1,
                "fixed-width sacct output truncates long values (ids like 16290213.ba+, CANCELLED+): "
                "re-run sacct with -P (--parsable2)",
            )
        head_names = _header_names(lines[0]) if lines else []
        if _is_header(head_names):
            names, header_line = head_names, _header_line_no(path)
        elif opts.columns:
            names, header_line = [c.strip().lower() for c in opts.columns], 0
        else:
            raise FormatError(
                path,
                1,
                "sacct output without a header: pass --columns with the fields given to sacct --format "
                "(e.g. --columns JobID,User,Account,State,Start,End,AllocTRES,NodeList)",
            )
        _require(path, names, header_line or None)
        dup = next((n for n in names if names.count(n) > 1), None)
        if dup:
            raise FormatError(path, header_line or None, f"column {dup!r} appears twice in the header")
        src = sql_path(path)[1:-1]
        n = len(names)
        delim = "chr(9)" if lines and _delimiter(lines[0]) == "\t" else "'|'"
        fields = ", ".join(f'f[{i + 1}] AS "{c}"' for i, c in enumerate(names))
        try:
            con.execute(
                f"""
                CREATE TEMP TABLE sacct_raw AS
                WITH lines AS (
                    SELECT row_number() OVER () AS line_no, l
                    FROM read_csv('{src}', columns={{'l': 'VARCHAR'}}, header=false, delim='\x1f', quote='',
                                  escape='', auto_detect=false, strict_mode=false)
                ), split AS (
                    SELECT line_no, string_split(rtrim(l, chr(13)), {delim}) AS f0 FROM lines
                    WHERE line_no > {header_line} AND l IS NOT NULL AND trim(l) <> ''
                )
                SELECT line_no, len(f0) AS n_fields,
                       CASE WHEN len(f0) = {n + 1} AND f0[{n + 1}] = '' THEN {n} ELSE len(f0) END AS n_used,
                       {fields}
                FROM (SELECT *, list_transform(f0, lambda x: nullif(trim(x), '')) AS f FROM split)
                """
            )
        except duckdb.Error as exc:
            raise FormatError(path, None, str(exc).split("\n")[0][:300]) from None
        bad = con.execute(
            f"SELECT line_no, n_fields FROM sacct_raw WHERE n_used <> {n} ORDER BY line_no LIMIT 1"
        ).fetchall()
        if bad:
            raise FormatError(
                path,
                int(bad[0][0]),
                f"expected {n} {'tab' if delim == 'chr(9)' else repr('|')}-separated fields, found {bad[0][1]} "
                "(a truncated line, or a '|' inside a value: sacct does not escape it)",
            )
        return stage_from_raw(con, path, opts, names)


def _header_line_no(path: Path) -> int:
    """1-based line number of the header (the first non-blank line)."""
    for i, line in enumerate(read_head(path).lstrip("\ufeff").splitlines(), start=1):
        if line.strip():
            return i
    return 1


def _require(path: Path, names: list[str], line: int | None) -> None:
    if not {"jobid", "jobidraw"} & set(names):
        raise FormatError(
            path,
            line,
            "JobID is required (this sacct output has no JobID or JobIDRaw column): re-run sacct with "
            "--format=JobIDRaw,JobName,User,Account,Partition,State,ExitCode,Submit,Start,End,AllocTRES,NodeList",
        )
    if not set(GPU_FIELDS) & set(names):
        raise FormatError(
            path,
            line,
            "no GPU column (AllocTRES, ReqTRES, AllocGRES or ReqGRES): without one a job's GPU count is "
            "unknown; add AllocTRES to sacct --format",
        )


def stage_from_raw(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    opts: IngestOptions,
    names: list[str],
    *,
    line_label: str | None = None,
) -> dict[str, int]:
    """Validate ``sacct_raw`` (VARCHAR fields named like sacct's, lower case, NULL for blanks) and stage.

    Creates ``stage_jobs`` (job_id, source, cluster, user_name, team, partition, name, kind, gpu_model,
    gpu_count, submit_ts, start_ts, end_ts, state, exit_reason, gpu_mem_peak_mib, gpu_util_peak_pct) and
    ``stage_allocations`` (job_id, host, gpu_count = GPUs per host, start_ts, end_ts). Returns skipped rows.
    """
    cols = set(names)

    def col(name: str) -> str:
        return f'r."{name}"' if name in cols else "NULL::VARCHAR"

    raw_id = f"coalesce({col('jobidraw')}, {col('jobid')})"
    state_word = state_word_sql(col("state"))
    checks = [
        Check(f"{raw_id} IS NULL", "JobID is empty"),
        Check(
            f"NOT regexp_matches({raw_id}, '^[0-9]+')",
            'JobID is not a Slurm job id: "{value}"',
            raw_id,
        ),
        Check(
            f"{col('state')} IS NOT NULL AND {state_word} NOT IN ({sql_list(SLURM_STATES)})",
            'column "State" is not a Slurm job state: "{value}"',
            col("state"),
        ),
    ]
    for field, label in (("start", "Start"), ("end", "End"), ("submit", "Submit")):
        if field in cols:
            checks.append(
                Check(
                    f"{col(field)} NOT IN ('Unknown', 'None') AND {_time(col(field))} IS NULL",
                    f'column "{label}" is not a time: "{{value}}"',
                    col(field),
                )
            )
    if "elapsed" in cols:
        checks.append(
            Check(
                f"{col('elapsed')} IS NOT NULL AND {_duration_s(col('elapsed'))} IS NULL",
                'column "Elapsed" is not a [D-]HH:MM:SS duration: "{value}"',
                col("elapsed"),
            )
        )
    if "elapsedraw" in cols:
        checks.append(
            Check(
                f"{col('elapsedraw')} IS NOT NULL AND TRY_CAST({col('elapsedraw')} AS DOUBLE) IS NULL",
                'column "ElapsedRaw" is not a number of seconds: "{value}"',
                col("elapsedraw"),
            )
        )
    for field, label in (("alloctres", "AllocTRES"), ("reqtres", "ReqTRES")):
        if field in cols:
            bad = (
                f"list_filter(string_split({col(field)}, ','), lambda x: regexp_matches(x, '^gres/gpu[:=]') "
                f"AND TRY_CAST(split_part(x, '=', 2) AS DOUBLE) IS NULL)"
            )
            checks.append(
                Check(
                    f"len({bad}) > 0",
                    f'column "{label}" has an unreadable GPU count: "{{value}}"',
                    f"{bad}[1]",
                )
            )
    if "start" in cols and "end" in cols:
        checks.append(
            Check(
                f"{_time(col('end'))} < {_time(col('start'))}",
                'job ends before it starts (End "{value}")',
                col("end"),
            )
        )
    zone = opts.tz or local_zone()
    skipped: dict[str, int] = {}
    with session_zone(con, zone):
        try:
            # a job's line and its steps' lines are one job: a bad one takes the job out whole
            screen_rows(
                con,
                path,
                "sacct_raw r",
                checks,
                skip_bad_rows=opts.skip_bad_rows,
                group_sql=f"split_part({raw_id}, '.', 1)",
                line_label=line_label,
            )
        except FormatError as exc:
            if line_label is None:
                raise
            raise FormatError(path, None, f"{line_label} {exc.line}: {exc.reason}") from None
        cluster = col("cluster")
        if opts.cluster:
            cluster = f"coalesce({cluster}, {quote(opts.cluster)})"
        gres = _gres_as_tres
        tres = f"coalesce({col('alloctres')}, {col('reqtres')}, {gres(col('allocgres'))}, {gres(col('reqgres'))})"
        elapsed = (
            f"coalesce(TRY_CAST({col('elapsedraw')} AS DOUBLE), {_duration_s(col('elapsed'))})"
            if {"elapsed", "elapsedraw"} & cols
            else "NULL::DOUBLE"
        )
        # An array task has two names: JobIDRaw 301 (SLURM_JOB_ID, dcgm's hpc_job) and JobID 300_1. With both
        # columns the job is stored as 301 and 300_1 is kept beside it (jobs.array_task), so a dump that has
        # only JobID names the same job (collectors/array_tasks.py).
        array_task = (
            f"CASE WHEN {col('jobidraw')} IS NOT NULL AND regexp_matches({col('jobid')}, '^[0-9]+_[0-9]+') "
            f"AND split_part({col('jobid')}, '.', 1) <> split_part({col('jobidraw')}, '.', 1) "
            f"THEN split_part({col('jobid')}, '.', 1) END"
        )
        con.execute(
            f"""
            CREATE TEMP TABLE sacct_norm AS
            SELECT r.line_no,
                   {raw_id} AS raw_id,
                   split_part({raw_id}, '.', 1) AS base_id,
                   contains({raw_id}, '.') AS is_step,
                   {cluster} AS cluster,
                   {col("user")} AS user_name,
                   {col("account")} AS team,
                   {col("partition")} AS partition,
                   {col("jobname")} AS name,
                   {col("state")} AS state_raw,
                   {state_word} AS state_word,
                   {col("exitcode")} AS exit_code,
                   {_time(col("submit"))} AS submit_ts,
                   {_time(col("start"))} AS start_ts,
                   {_time(col("end"))} AS end_ts,
                   {elapsed} AS elapsed_s,
                   {tres} AS tres,
                   {col("tresusageinmax")} AS usage_max,
                   {col("tresusageinave")} AS usage_ave,
                   {array_task} AS array_task,
                   {col("nodelist")} AS nodelist,
                   {col("gresdetail")} AS gres_detail
            FROM sacct_raw r
            """
        )
    _parse_tres(con)
    steps = con.execute(
        "SELECT count(*) FROM sacct_norm n WHERE is_step AND EXISTS "
        "(SELECT 1 FROM sacct_norm p WHERE NOT p.is_step AND p.base_id = n.base_id)"
    ).fetchall()[0][0]
    if steps:
        skipped["job steps folded into their job"] = int(steps)
    # A job listed more than once (sacct -D: each attempt of a requeued job) keeps every attempt, told apart by
    # its start; the same record listed twice (two dumps concatenated) is one attempt.
    dups = con.execute(
        """SELECT count(*) - count(DISTINCT (base_id, start_ts)) FROM sacct_norm WHERE NOT is_step"""
    ).fetchall()[0][0]
    if dups:
        skipped["records listed twice (kept the last)"] = int(dups)
    con.execute(
        f"""
        CREATE TEMP TABLE stage_jobs AS
        WITH peaks AS (
            SELECT n.base_id, max(u.gpu_mem_mib) AS gpu_mem_peak_mib, max(u.gpu_util_pct) AS gpu_util_peak_pct
            FROM sacct_norm n JOIN sacct_tres u ON u.tres = n.usage_max GROUP BY n.base_id
        ), means AS ({_step_means_sql()}
        ), one AS (
            -- the allocation row of each attempt (a job without one: its last step), the last line when the
            -- same attempt is listed twice
            SELECT * FROM sacct_norm n
            WHERE NOT is_step OR NOT EXISTS (SELECT 1 FROM sacct_norm p WHERE NOT p.is_step AND p.base_id = n.base_id)
            QUALIFY row_number() OVER (PARTITION BY base_id, CASE WHEN is_step THEN NULL ELSE start_ts END
                                       ORDER BY line_no DESC) = 1
        ), rec AS (
            -- attempts in start order (a pending one, with no start, last); every attempt is billed to the job:
            -- the last is the job's own row, each earlier one <job_id>#<n> (docs/metrics.md, "Badput")
            SELECT *, row_number() OVER (PARTITION BY base_id ORDER BY start_ts NULLS LAST, line_no) AS attempt_no,
                   count(*) OVER (PARTITION BY base_id) AS attempts
            FROM one
            QUALIFY NOT is_step OR row_number() OVER (PARTITION BY base_id ORDER BY line_no DESC) = 1
        ), ids AS (
            SELECT *, CASE WHEN cluster IS NOT NULL THEN cluster || '/' || base_id ELSE base_id END AS job_key
            FROM rec
        )
        SELECT
            CASE WHEN r.attempt_no < r.attempts THEN r.job_key || '#' || r.attempt_no ELSE r.job_key END AS job_id,
            CASE WHEN r.attempts > 1 THEN r.attempt_no END::INTEGER AS attempt,
            CASE WHEN r.attempts > 1 THEN r.job_key END AS attempt_of,
            'sacct' AS source,
            r.cluster, r.user_name, r.team, r.partition, r.name,
            CASE WHEN regexp_matches(lower(coalesce(r.name, '')), '{INTERACTIVE_NAME}')
                 THEN 'interactive' ELSE 'other' END AS kind,
            coalesce({_model_sql("t.gpu_type")}, t.gpu_type) AS gpu_model,
            coalesce(t.gpu_count, 0) AS gpu_count,
            r.submit_ts,
            r.start_ts,
            CASE WHEN r.state_word IN ({sql_list(REQUEUE_STATES)}) AND r.elapsed_s IS NOT NULL
                 THEN r.start_ts + to_seconds(r.elapsed_s)
                 ELSE coalesce(r.end_ts, CASE WHEN r.state_word NOT IN ({sql_list(OPEN_STATES)})
                                              THEN r.start_ts + to_seconds(r.elapsed_s) END) END AS end_ts,
            {stored_state_sql("coalesce(r.state_word, 'UNKNOWN')")} AS state,
            nullif(concat_ws('; ',
                nullif(trim(regexp_replace(r.state_raw, '^[A-Za-z_]+\\+?', '')), ''),
                CASE WHEN r.exit_code IS NOT NULL AND r.exit_code <> '0:0' THEN 'ExitCode ' || r.exit_code END
            ), '') AS exit_reason,
            p.gpu_mem_peak_mib, p.gpu_util_peak_pct,
            m.gpu_util_mean_pct, m.gpu_mem_mean_mib,
            CASE WHEN r.array_task IS NOT NULL AND r.cluster IS NOT NULL THEN r.cluster || '/' || r.array_task
                 ELSE r.array_task END AS array_task,
            r.nodelist, r.gres_detail,
            CASE WHEN r.end_ts IS NULL AND r.state_word IN ({sql_list(HELD_STATES)})
                 THEN r.start_ts + to_seconds(r.elapsed_s) END AS held_until_ts,
            r.line_no
        FROM ids r
        LEFT JOIN sacct_tres t ON t.tres = r.tres
        LEFT JOIN peaks p ON p.base_id = r.base_id
        LEFT JOIN means m ON m.base_id = r.base_id
        ORDER BY r.line_no
        """
    )
    _stage_allocations(con, path, line_label)
    if line_label:  # a JSON document's lines say nothing: a bad row names its entry (jobs[] entry 3)
        for t in ("stage_jobs", "stage_allocations"):
            con.execute(f"ALTER TABLE {t} ADD COLUMN row_label VARCHAR")
            con.execute(f"UPDATE {t} SET row_label = {quote(line_label)} || ' ' || line_no")
            con.execute(f"ALTER TABLE {t} DROP COLUMN line_no")
    for c in ("nodelist", "gres_detail", "held_until_ts"):
        con.execute(f"ALTER TABLE stage_jobs DROP COLUMN {c}")
    name_columns(
        con,
        "jobs",
        {"gpu_count": "AllocTRES gres/gpu", "start_ts": "Start", "end_ts": "End", "submit_ts": "Submit"},
    )
    # An allocation ends where its job does, except a running job's, which ends at Start + Elapsed: that is
    # the only end the jobs' own checks have not seen, so it is the one an allocation's message names.
    name_columns(
        con,
        "allocations",
        {"gpu_count": "AllocTRES gres/gpu", "start_ts": "Start", "end_ts": "Start + Elapsed"},
    )
    if opts.skip_bad_rows:
        _leave_out_jobs_of_bad_allocations(con, opts)
    for t in ("sacct_norm", "sacct_tres", "sacct_raw"):
        con.execute(f"DROP TABLE IF EXISTS temp.{t}")
    return skipped


def _leave_out_jobs_of_bad_allocations(con: duckdb.DuckDBPyConnection, opts: IngestOptions) -> None:
    """With ``skip_bad_rows``: a job whose allocation is implausible (a running job's Elapsed of 400 days)
    leaves the stage with it, since both come from one sacct line.

    The validation that runs next (collectors/validate.py) rejects only the allocation row and would land the
    job without it; here its job goes first, and validation records the line once, in ``rejected_rows``. A
    job that is implausible itself stays: validation rejects it for its own field (End, AllocTRES), and its
    allocations with it."""
    found = {
        table: [
            v.rid
            for v in find_violations(
                con,
                table,
                source=f"temp.stage_{table}",
                staged=True,
                max_job_days=opts.max_job_days,
                limit=None,
            )
        ]
        for table in ("jobs", "allocations")
    }
    if not found["allocations"]:
        return
    con.execute("CREATE OR REPLACE TEMP TABLE sacct_bad (tbl VARCHAR, rid BIGINT)")
    con.executemany(
        "INSERT INTO sacct_bad VALUES (?, ?)", [[t, r] for t, rids in found.items() for r in rids]
    )
    con.execute(
        """DELETE FROM stage_jobs WHERE rowid NOT IN (SELECT rid FROM sacct_bad WHERE tbl = 'jobs')
             AND job_id IN (SELECT job_id FROM stage_allocations
                            WHERE rowid IN (SELECT rid FROM sacct_bad WHERE tbl = 'allocations'))"""
    )
    con.execute("DROP TABLE temp.sacct_bad")
