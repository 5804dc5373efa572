"""Slurm ``sacct --json`` (data_parser v0.0.37–v0.0.41) → the same VARCHAR fields ``sacct -P`` prints, one
row per job and one per step, then the text reader's pipeline (collectors/sacct.py ``stage_from_raw``), so
validation and conversion are written once. The meaning of every field is in collectors/sacct.py.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from collectors.base import IngestOptions, Sniff
from collectors.sacct import stage_from_raw
from collectors.sql_text import json_object_limit, sql_path
from gpuledger.ledger.errors import FormatError


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
