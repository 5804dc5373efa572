"""Slurm ``sacct --json`` (data_parser v0.0.37–v0.0.42, Slurm 21.08–24.11, and the later v0.0.4x shapes) → the
same VARCHAR fields ``sacct -P`` prints, one row per job and one per step, then the text reader's pipeline
(collectors/sacct.py ``stage_from_raw``), so validation and conversion are written once. The meaning of every
field is in collectors/sacct.py.

"No value" and "unlimited", one rule for every number read here (:func:`slurm_number_sql`). Slurm writes them
as markers (``slurm/slurm.h``, SchedMD/slurm @ 284c3b95f08a2dc2478499837b03355e1b9c5c75, lines 103–111)::

    #define INFINITE   (0xffffffff)              4294967295
    #define INFINITE64 (0xffffffffffffffff)      18446744073709551615
    #define NO_VAL     (0xfffffffe)              4294967294
    #define NO_VAL64   (0xfffffffffffffffe)      18446744073709551614
    #define NO_CONSUME_VAL64 (0xfffffffffffffffd)

and, in the data parsers since v0.0.39, as an object (``src/plugins/data_parser/v0.0.44/parsers.c``, the
``*_NO_VAL_STRUCT`` parsers: ``set`` "True if number has been set; False if number is unset", ``infinite``
"True if number has been set to infinite; "set" and "number" will be ignored", ``number``). Slurm 24.11
(v0.0.42) still writes some fields bare, so a never-started job's ``time.start`` is ``4294967294`` — NO_VAL
written as a number — beside a real ``time.end`` (when it was cancelled) and ``elapsed`` 0. A number is "no
value" (NULL) when it is: an object with ``set`` false or ``infinite`` true; one of the 32-bit markers
(NO_VAL, INFINITE); ≥ 9.2e18 (the 64-bit markers, signed or not, which a DOUBLE cannot tell apart); or
negative (a 64-bit marker read as a signed number, e.g. ``-9223372036854771968``). The 16- and 8-bit markers
(NO_VAL16 = 65534 …) are not applied: 65534 s is a real elapsed time, and Slurm writes the fields that use
them (priorities, CPU counts per task) nowhere this reader looks. A TRES list item whose count is a marker is
left out of the list. Nothing read here needs "unlimited" apart from "no value" (time limits are not read).

A job that never started (``time.start`` no value) keeps no start: the pipeline stores it as pending, or as
cancelled before it started, and allocates it nothing (collectors/sacct_hosts.py needs a start).
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from collectors.base import IngestOptions, Sniff
from collectors.sacct import stage_from_raw
from collectors.sql_text import json_object_limit, sql_path
from gpuledger.ledger.errors import FormatError

# slurm/slurm.h (see the module docstring): the 32-bit markers a DOUBLE can still tell from real numbers.
NO_VAL = 0xFFFFFFFE
INFINITE = 0xFFFFFFFF
# the 64-bit ones (NO_VAL64, INFINITE64, NO_CONSUME_VAL64, and as signed numbers) are all ≥ this as a DOUBLE
MARKER64_FLOOR = 9.2e18


def marker_sql(v: str) -> str:
    """SQL: is DOUBLE ``v`` one of Slurm's "no value"/"unlimited" markers (or negative)?"""
    return f"({v} < 0 OR {v} IN ({NO_VAL}, {INFINITE}) OR {v} >= {MARKER64_FLOOR})"


def slurm_number_sql(j: str, p: str) -> str:
    """SQL: the number at JSON path ``p`` as DOUBLE — bare, or a ``{set, infinite, number}`` object — NULL when
    it is no value or unlimited by the module's one rule."""
    wrapped = (
        f"CASE WHEN (json_extract({j}, '{p}.set'))::BOOLEAN AND NOT coalesce((json_extract({j}, '{p}.infinite'))::BOOLEAN, false) "
        f"THEN TRY_CAST(json_extract_string({j}, '{p}.number') AS DOUBLE) END"
    )
    val = f"(CASE json_type({j}, '{p}') WHEN 'OBJECT' THEN {wrapped} ELSE TRY_CAST(json_extract_string({j}, '{p}') AS DOUBLE) END)"
    return f"(CASE WHEN {marker_sql(val)} THEN NULL ELSE {val} END)"


_num = slurm_number_sql


def _tres_list(j: str, p: str) -> str:
    """A JSON TRES list ``[{type, name, count}]`` → sacct's text form ``cpu=4,gres/gpu=2,gres/gpu:a100=2``; an
    item whose count is a marker (NO_VAL64 …) is left out, as sacct -P leaves it out."""
    raw = f'from_json(json_extract({j}, \'{p}\'), \'[{{"type":"VARCHAR","name":"VARCHAR","count":"VARCHAR"}}]\')'
    count = "TRY_CAST(x.count AS DOUBLE)"
    items = f"list_filter({raw}, lambda x: {count} IS NULL OR NOT {marker_sql(count)})"
    return (
        f"(CASE WHEN json_type({j}, '{p}') = 'ARRAY' THEN nullif(array_to_string(list_transform({items}, "
        f"lambda x: x.type || CASE WHEN coalesce(x.name, '') <> '' THEN '/' || x.name ELSE '' END || '=' || x.count), ','), '') "
        f"WHEN json_type({j}, '{p}') = 'VARCHAR' THEN nullif(json_extract_string({j}, '{p}'), '') END)"
    )


class SacctJson:
    name = "sacct_json"
    description = "Slurm sacct --json (data_parser v0.0.37–v0.0.42 and later: Slurm 21.08–24.11+)"

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
