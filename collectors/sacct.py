"""Slurm accounting records (``sacct``) → ``jobs`` and one ``allocations`` row per host a job held.

Two readers share one pipeline:

- :class:`SacctParsable` reads ``sacct -P`` / ``--parsable2`` and ``-p`` (every line ends in ``|``) output, with a
  header in any column order, or header-less (``--noheader``) when ``--columns`` names the fields;
- :class:`SacctJson` reads ``sacct --json`` (Slurm 21–24 data_parser shapes) and turns each job into the same
  VARCHAR fields the text reader produces, so validation and conversion are written once.

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

import itertools
import json
import math
import re
from pathlib import Path

import duckdb

from collectors.base import IngestOptions, Sniff, quote, read_head
from collectors.common import (
    Check,
    first_violation,
    json_object_limit,
    local_zone,
    session_zone,
    sql_path,
    ts_utc,
)
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
from gpuledger.ledger.reference import model_sql_case
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
MAX_HOSTS_PER_RANGE = 100_000


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


def expand_nodelist(text: str) -> list[str]:
    """Slurm's compressed host list → host names, like ``scontrol show hostnames``.

    ``gpu[01-04,07],cpu1`` → gpu01 gpu02 gpu03 gpu04 gpu07 cpu1 (zero padding kept; several bracket groups
    in one name expand as a product). ``None assigned`` (pending) and ``(null)`` give no hosts.
    """
    text = text.strip()
    if not text or text in ("None assigned", "(null)", "None"):
        return []
    parts: list[str] = []
    depth, cur = 0, ""
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    hosts: list[str] = []
    for part in filter(None, (p.strip() for p in parts)):
        choices: list[list[str]] = []
        for piece in re.split(r"(\[[^\[\]]*\])", part):
            if not piece.startswith("["):
                choices.append([piece])
                continue
            options: list[str] = []
            for rng in piece[1:-1].split(","):
                lo, sep, hi = rng.partition("-")
                if not sep:
                    options.append(lo)
                    continue
                if not (lo.isdigit() and hi.isdigit()) or int(hi) - int(lo) > MAX_HOSTS_PER_RANGE:
                    raise ValueError(f"bad host range [{rng}] in {text!r}")
                options.extend(str(i).zfill(len(lo)) for i in range(int(lo), int(hi) + 1))
            choices.append(options)
        if math.prod(len(c) for c in choices) + len(hosts) > MAX_HOSTS_PER_RANGE:
            raise ValueError(f"host list {text[:80]!r} names more than {MAX_HOSTS_PER_RANGE:,} hosts")
        hosts.extend("".join(c) for c in itertools.product(*choices))
    return hosts


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


def _mib(v: str) -> str:
    """A sacct size (``38888M``, ``17703340K``, ``2G``; bare = bytes) → MiB."""
    num = f"TRY_CAST(regexp_extract({v}, '^([0-9.]+)', 1) AS DOUBLE)"
    unit = f"upper(regexp_extract({v}, '^[0-9.]+([KMGTP]?)', 1))"
    return (
        f"({num} * CASE {unit} WHEN '' THEN 1.0 / 1048576 WHEN 'K' THEN 1.0 / 1024 WHEN 'M' THEN 1 "
        f"WHEN 'G' THEN 1024 WHEN 'T' THEN 1048576 WHEN 'P' THEN 1073741824 END)"
    )


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
            first_violation(con, path, "sacct_raw r", checks)
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
    _stage_allocations(con, path)
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


def _gres_as_tres(v: str) -> str:
    """Legacy AllocGRES ``gpu:2`` / ``gpu:tesla:2(IDX:0-1)`` → TRES form ``gres/gpu=2`` / ``gres/gpu:tesla=2``."""
    item = "regexp_replace(x, '\\(.*\\)$', '')"
    return (
        f"nullif(array_to_string(list_transform(list_filter(string_split({v}, ','), "
        f"lambda x: starts_with(x, 'gpu')), lambda x: CASE len(string_split({item}, ':')) "
        f"WHEN 2 THEN 'gres/gpu=' || string_split({item}, ':')[2] "
        f"WHEN 3 THEN 'gres/gpu:' || string_split({item}, ':')[2] || '=' || string_split({item}, ':')[3] END), ','), '')"
    )


def _model_sql(v: str) -> str:
    # An A100 MIG profile whose card memory (slice memory × 7 / g) is over 60 GB is an 80 GB A100.
    big_a100 = (
        f"regexp_matches(lower({v}), 'a100') AND "
        f"TRY_CAST(regexp_extract({v}, '(\\d+)g\\.(\\d+)gb', 2) AS DOUBLE) * 7 "
        f"/ TRY_CAST(regexp_extract({v}, '(\\d+)g\\.(\\d+)gb', 1) AS DOUBLE) > 60"
    )
    return f"(CASE WHEN {big_a100} THEN 'A100-80GB' ELSE ({model_sql_case(v)}) END)"


def _parse_tres(con: duckdb.DuckDBPyConnection) -> None:
    """One row per distinct TRES string: gpu_count (cards; MIG slices as fractions), gpu_type, peaks."""
    con.execute(
        """
        CREATE TEMP TABLE sacct_tres AS
        WITH s AS (
            SELECT DISTINCT tres FROM (SELECT tres FROM sacct_norm UNION ALL SELECT usage_max FROM sacct_norm
                                       UNION ALL SELECT usage_ave FROM sacct_norm)
            WHERE tres IS NOT NULL
        ), kv AS (
            SELECT tres, unnest(string_split(tres, ',')) AS item FROM s
        ), p AS (
            SELECT tres, lower(trim(split_part(item, '=', 1))) AS k, trim(split_part(item, '=', 2)) AS v
            FROM kv
        ), typed AS (
            SELECT *, substr(k, 10) AS typ,
                   TRY_CAST(regexp_extract(k, '(\\d+)g\\.\\d+gb', 1) AS DOUBLE) AS mig_g,
                   CASE WHEN regexp_matches(k, 'a30') THEN 4 ELSE 7 END AS slices
            FROM p
        )
        SELECT tres,
            CASE WHEN bool_or(mig_g IS NOT NULL AND starts_with(k, 'gres/gpu:'))
                 THEN sum(CASE WHEN starts_with(k, 'gres/gpu:')
                               THEN TRY_CAST(v AS DOUBLE) * coalesce(mig_g / slices, 1) END)
                 ELSE coalesce(max(CASE WHEN k = 'gres/gpu' THEN TRY_CAST(v AS DOUBLE) END),
                               sum(CASE WHEN starts_with(k, 'gres/gpu:') THEN TRY_CAST(v AS DOUBLE) END))
            END AS gpu_count,
            arg_max(typ, TRY_CAST(v AS DOUBLE)) FILTER (WHERE starts_with(k, 'gres/gpu:')) AS gpu_type,
            max(CASE WHEN k = 'gres/gpumem' THEN """
        + _mib("v")
        + """ END) AS gpu_mem_mib,
            max(CASE WHEN k = 'gres/gpuutil' THEN TRY_CAST(v AS DOUBLE) END) AS gpu_util_pct
        FROM typed GROUP BY tres
        """
    )


def _step_means_sql() -> str:
    """Per job: Slurm's mean GPU utilisation and memory, from its steps' ``TRESUsageInAve`` (docs/metrics.md).

    A step counts when its processes held GPU memory (``gres/gpumem`` > 0): a batch script's shell that only
    starts ``srun`` steps, and the ``extern`` step (processes adopted by pam_slurm_adopt, the whole
    allocation long), read 0 and would pull a busy job's mean toward 0 (a real dump: batch 100 %, extern 0 %).
    Where no step held GPU memory (an idle job, or gpumem not tracked) every step but ``extern`` counts. Each
    counted step weighs its own elapsed time (the job's when the step has none): Σ value × t / Σ t.
    """
    return """
            SELECT n.base_id,
                   sum(u.gpu_util_pct * coalesce(n.elapsed_s, j.job_s, 1.0)) FILTER (WHERE u.gpu_util_pct IS NOT NULL)
                       / nullif(sum(coalesce(n.elapsed_s, j.job_s, 1.0)) FILTER (WHERE u.gpu_util_pct IS NOT NULL), 0) AS gpu_util_mean_pct,
                   sum(u.gpu_mem_mib * coalesce(n.elapsed_s, j.job_s, 1.0)) FILTER (WHERE u.gpu_mem_mib IS NOT NULL)
                       / nullif(sum(coalesce(n.elapsed_s, j.job_s, 1.0)) FILTER (WHERE u.gpu_mem_mib IS NOT NULL), 0) AS gpu_mem_mean_mib
            FROM sacct_norm n
            JOIN sacct_tres u ON u.tres = n.usage_ave
            JOIN (SELECT base_id, max(elapsed_s) FILTER (WHERE NOT is_step) AS job_s,
                         bool_or(u2.gpu_mem_mib > 0) AS any_mem
                  FROM sacct_norm n2 LEFT JOIN sacct_tres u2 ON u2.tres = n2.usage_ave
                  GROUP BY base_id) j ON j.base_id = n.base_id
            WHERE n.is_step AND (u.gpu_util_pct IS NOT NULL OR u.gpu_mem_mib IS NOT NULL)
              AND CASE WHEN coalesce(j.any_mem, false) THEN coalesce(u.gpu_mem_mib, 0) > 0
                       ELSE lower(split_part(n.raw_id, '.', 2)) <> 'extern' END
            GROUP BY n.base_id"""


def gres_indices(detail: str) -> list[int] | None:
    """GPU indices of one node's ``gres_detail`` entry: ``gpu:a100:4(IDX:0-1,3)`` → [0, 1, 3].

    None when the entry names no index (``gpu:2``, ``IDX:N/A``): the host is then tied by attribution rules.
    """
    out: list[int] = []
    for spec in _idx_specs(detail):
        for part in spec.split(","):
            lo, sep, hi = part.strip().partition("-")
            if not lo.isdigit() or (sep and not hi.isdigit()) or (sep and int(hi) - int(lo) > 1024):
                return None  # a node has at most a few GPUs: a range of thousands is not an index list
            out.extend(range(int(lo), int(hi) + 1) if sep else [int(lo)])
    return sorted(set(out)) or None


def _idx_specs(detail: str) -> list[str]:
    r"""The ``IDX:`` lists of a gres_detail text, each after a ``gpu`` with no parenthesis between
    (``gpu[^()]*\(IDX:([^)]*)\)`` as a regex, which would take time growing with the square of a long
    ``gpugpu…`` text): str.find, each character looked at a bounded number of times."""
    out: list[str] = []
    at = 0
    while (i := detail.find("(IDX:", at)) >= 0:
        j = detail.find(")", i)
        if j < 0:
            break
        head = detail[max(detail.rfind("(", at, i), detail.rfind(")", at, i), at - 1) + 1 : i]
        if "gpu" in head:
            out.append(detail[i + 5 : j])
        at = j + 1
    return out


def _stage_allocations(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    """One row per host of each started GPU job (gpu_count on a host = the job's GPUs / its hosts), or,
    where ``gres_detail`` names a host's GPU indices, one row per index (gpu_count 1, ``gpu_index``).

    A running job's rows end at ``held_until_ts`` (Start + Elapsed); its job record keeps end_ts NULL.
    """
    pairs = con.execute(
        """SELECT DISTINCT nodelist, gres_detail FROM stage_jobs
           WHERE nodelist IS NOT NULL AND gpu_count > 0"""
    ).fetchall()
    lists, hosts_of, indices_of = [], [], []
    for text, detail in pairs:
        try:
            hosts = expand_nodelist(text)
        except ValueError as exc:
            raise FormatError(path, None, f'column "NodeList": {exc}') from None
        entries: list[str] = []
        if detail:
            parsed = json.loads(detail)
            entries = [str(e) for e in parsed] if isinstance(parsed, list) else []
        idx = [
            gres_indices(entries[i]) if i < len(entries) and len(entries) == len(hosts) else None
            for i in range(len(hosts))
        ]
        lists.append(text if detail is None else text + "\x00" + detail)
        hosts_of.append(hosts)
        indices_of.append([",".join(map(str, x)) if x else None for x in idx])
    con.execute(
        """CREATE TEMP TABLE sacct_hosts AS
           SELECT unnest(?::VARCHAR[]) AS key, unnest(?::VARCHAR[][]) AS hosts, unnest(?::VARCHAR[][]) AS idx""",
        [lists, hosts_of, indices_of],
    )
    con.execute(
        """
        CREATE TEMP TABLE stage_allocations AS
        WITH per_host AS (
            SELECT j.job_id, j.gpu_count / len(hl.hosts) AS per_host, j.start_ts,
                   coalesce(j.end_ts, j.held_until_ts) AS end_ts, j.line_no,
                   unnest(hl.hosts) AS host, unnest(hl.idx) AS idx
            FROM stage_jobs j
            JOIN sacct_hosts hl ON hl.key = CASE WHEN j.gres_detail IS NULL THEN j.nodelist
                                                 ELSE j.nodelist || chr(0) || j.gres_detail END
                               AND len(hl.hosts) > 0
            WHERE j.start_ts IS NOT NULL AND j.gpu_count > 0
        ), split AS (
            SELECT *, unnest(CASE WHEN idx IS NULL THEN [NULL::VARCHAR] ELSE string_split(idx, ',') END) AS one
            FROM per_host
        )
        SELECT job_id, host, NULL::VARCHAR AS gpu_id,
               CASE WHEN idx IS NULL THEN per_host ELSE 1 END AS gpu_count,
               start_ts, end_ts, CAST(one AS INTEGER) AS gpu_index,
               line_no  -- the job's line: a bad row names it (collectors/validate.py)
        FROM split
        """
    )
    con.execute("DROP TABLE temp.sacct_hosts")


def _num(j: str, p: str) -> str:
    """A number at JSON path ``p`` that may be a ``{set, infinite, number}`` wrapper; NULL when unset,
    infinite, or one of Slurm's sentinels (NO_VAL64 and friends, any negative number)."""
    wrapped = (
        f"CASE WHEN (json_extract({j}, '{p}.set'))::BOOLEAN AND NOT coalesce((json_extract({j}, '{p}.infinite'))::BOOLEAN, false) "
        f"THEN TRY_CAST(json_extract_string({j}, '{p}.number') AS DOUBLE) END"
    )
    val = f"(CASE json_type({j}, '{p}') WHEN 'OBJECT' THEN {wrapped} ELSE TRY_CAST(json_extract_string({j}, '{p}') AS DOUBLE) END)"
    return f"(CASE WHEN {val} < 0 OR {val} >= 9.2e18 THEN NULL ELSE {val} END)"


def _tres_list(j: str, p: str) -> str:
    """A JSON TRES list ``[{type, name, count}]`` → sacct's text form ``cpu=4,gres/gpu=2,gres/gpu:a100=2``."""
    items = f'from_json(json_extract({j}, \'{p}\'), \'[{{"type":"VARCHAR","name":"VARCHAR","count":"VARCHAR"}}]\')'
    return (
        f"(CASE WHEN json_type({j}, '{p}') = 'ARRAY' THEN nullif(array_to_string(list_transform({items}, "
        f"lambda x: x.type || CASE WHEN coalesce(x.name, '') <> '' THEN '/' || x.name ELSE '' END || '=' || x.count), ','), '') "
        f"WHEN json_type({j}, '{p}') = 'VARCHAR' THEN nullif(json_extract_string({j}, '{p}'), '') END)"
    )


class SacctJson:
    name = "sacct_json"
    description = "Slurm sacct --json (data_parser v0.0.37–v0.0.41: Slurm 21.08–24.11)"

    def sniff(self, path: Path, head: str) -> Sniff:
        text = head.lstrip("\ufeff").lstrip()
        if not text.startswith("{"):
            return Sniff(0)
        if (
            '"jobs"' in text
            and ('"job_id"' in text or '"meta"' in text)
            and ("slurm" in text.lower() or '"association"' in text or '"data_parser"' in text)
        ):
            return Sniff(0.95)
        return Sniff(0)

    def stage(self, con: duckdb.DuckDBPyConnection, path: Path, opts: IngestOptions) -> dict[str, int]:
        src = sql_path(path)[1:-1]
        try:
            con.execute(
                f"""CREATE TEMP TABLE sacct_json AS
                    SELECT row_number() OVER () AS line_no, j FROM (
                        SELECT unnest(json_extract(json, '$.jobs[*]')) AS j
                        FROM read_json_objects('{src}', format='unstructured', maximum_object_size={json_object_limit(path)}))"""
            )
        except duckdb.Error as exc:
            raise FormatError(
                path, None, "not valid sacct --json: " + str(exc).split("\n")[0][:250]
            ) from None
        has_jobs = con.execute(
            f"SELECT count(*) FROM read_json_objects('{src}', format='unstructured', maximum_object_size={json_object_limit(path)}) "
            "WHERE json_type(json, '$.jobs') = 'ARRAY'"
        ).fetchall()[0][0]
        if not has_jobs:
            raise FormatError(path, None, 'no "jobs" list: not sacct --json output')
        j = "j"
        state = (
            f"CASE json_type({j}, '$.state') WHEN 'VARCHAR' THEN json_extract_string({j}, '$.state') "
            f"ELSE CASE json_type({j}, '$.state.current') WHEN 'ARRAY' THEN json_extract_string({j}, '$.state.current[0]') "
            f"ELSE json_extract_string({j}, '$.state.current') END END"
        )

        def epoch(p: str) -> str:
            v = _num(j, p)
            return f"CAST(nullif({v}, 0) AS BIGINT)::VARCHAR"

        rc = _num(j, "$.exit_code.return_code")
        sig = _num(j, "$.exit_code.signal.id")
        names = [
            "jobidraw",
            "jobid",
            "cluster",
            "user",
            "account",
            "partition",
            "jobname",
            "state",
            "exitcode",
            "submit",
            "start",
            "end",
            "elapsedraw",
            "alloctres",
            "reqtres",
            "nodelist",
            "gresdetail",
            "tresusageinave",
            "tresusageinmax",
        ]
        con.execute(
            f"""
            CREATE TEMP TABLE sacct_raw AS SELECT line_no,
                CAST({_num(j, "$.job_id")} AS BIGINT)::VARCHAR AS jobidraw,
                CASE WHEN {_num(j, "$.array.job_id")} > 0 AND {_num(j, "$.array.task_id")} IS NOT NULL
                     THEN CAST({_num(j, "$.array.job_id")} AS BIGINT)::VARCHAR || '_'
                          || CAST({_num(j, "$.array.task_id")} AS BIGINT)::VARCHAR END AS jobid,
                nullif(json_extract_string({j}, '$.cluster'), '') AS cluster,
                nullif(json_extract_string({j}, '$.user'), '') AS "user",
                nullif(coalesce(json_extract_string({j}, '$.account'), json_extract_string({j}, '$.association.account')), '') AS account,
                nullif(json_extract_string({j}, '$.partition'), '') AS partition,
                nullif(json_extract_string({j}, '$.name'), '') AS jobname,
                {state} AS state,
                CASE WHEN {rc} IS NOT NULL THEN CAST({rc} AS BIGINT)::VARCHAR || ':' || coalesce(CAST({sig} AS BIGINT)::VARCHAR, '0') END AS exitcode,
                {epoch("$.time.submission")} AS submit,
                {epoch("$.time.start")} AS start,
                {epoch("$.time.end")} AS "end",
                CAST({_num(j, "$.time.elapsed")} AS BIGINT)::VARCHAR AS elapsedraw,
                {_tres_list(j, "$.tres.allocated")} AS alloctres,
                {_tres_list(j, "$.tres.requested")} AS reqtres,
                nullif(json_extract_string({j}, '$.nodes'), '') AS nodelist,
                CASE WHEN json_type({j}, '$.gres_detail') = 'ARRAY' AND json_array_length({j}, '$.gres_detail') > 0
                     THEN json_extract({j}, '$.gres_detail')::VARCHAR END AS gresdetail,
                NULL::VARCHAR AS tresusageinave, NULL::VARCHAR AS tresusageinmax
            FROM sacct_json
            """
        )
        # Each step (jobs[].steps[]) as the step line sacct -P writes: its id, elapsed time and the TRES
        # usage sacct prints as TRESUsageInAve / TRESUsageInMax (tres.requested.average / .max).
        sid = (
            "CASE json_type(s, '$.step.id') WHEN 'OBJECT' THEN json_extract_string(s, '$.step.id.step_id') "
            "ELSE json_extract_string(s, '$.step.id') END"
        )
        con.execute(
            f"""
            INSERT INTO sacct_raw BY NAME
            SELECT line_no,
                   CASE WHEN contains({sid}, '.') THEN {sid}
                        ELSE CAST({_num(j, "$.job_id")} AS BIGINT)::VARCHAR || '.' || {sid} END AS jobidraw,
                   CAST({_num("s", "$.time.elapsed")} AS BIGINT)::VARCHAR AS elapsedraw,
                   {_tres_list("s", "$.tres.requested.average")} AS tresusageinave,
                   {_tres_list("s", "$.tres.requested.max")} AS tresusageinmax
            FROM (SELECT line_no, j, unnest(json_extract(j, '$.steps[*]')) AS s FROM sacct_json
                  WHERE json_type(j, '$.steps') = 'ARRAY')
            WHERE {_num(j, "$.job_id")} IS NOT NULL AND {sid} IS NOT NULL
            """
        )
        con.execute("DROP TABLE temp.sacct_json")
        return stage_from_raw(con, path, opts, names, line_label="jobs[] entry")
