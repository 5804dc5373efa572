"""The JSON the Prometheus HTTP API returns for ``query_range`` (matrix) or ``query`` (vector), saved to a file.

``curl -s 'http://prom:9090/api/v1/query_range?query={__name__=~"DCGM_FI_DEV_GPU_UTIL|DCGM_FI_DEV_FB_USED"}&start=…&end=…&step=30s' > util.json``

Shape: ``{"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {"__name__": …,
"UUID": …, …}, "values": [[1700000000.0, "12"], …]}]}}`` (a vector has ``"value": [t, "v"]``). DuckDB reads
and unnests it; the series go through the same label → GPU mapping and long → wide pivot as a dcgm-exporter
scrape (collectors/dcgm.py). A series without ``__name__`` (the result of an expression such as
``avg_over_time(...)``) cannot be told apart from others and is an error: keep the name with
``label_replace`` or query the raw metric.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from collectors.base import IngestOptions, Sniff
from collectors.dcgm import stage_long
from collectors.sql_text import json_object_limit, sql_path
from gpuledger.ledger.errors import FormatError


class PrometheusJson:
    name = "prometheus_json"
    description = "Prometheus API query_range / query JSON (DCGM metrics), saved to a file"

    def sniff(self, path: Path, head: str) -> Sniff:
        text = head.lstrip()
        if text.startswith("{") and '"resultType"' in head:
            return Sniff(0.9) if "dcgm" in head.lower() else Sniff(0.5)
        return Sniff(0)

    def stage(self, con: duckdb.DuckDBPyConnection, path: Path, opts: IngestOptions) -> dict[str, int]:
        try:
            con.execute(
                f"""CREATE TEMP TABLE prom_doc AS
                    SELECT coalesce(json_extract(j, '$.data'), j) AS data
                    FROM read_json_objects({sql_path(path)}, format='unstructured',
                                           maximum_object_size={json_object_limit(path)}) t(j)"""
            )
        except duckdb.Error as exc:
            raise FormatError(path, None, f"not valid JSON ({str(exc).splitlines()[0][:200]})") from None
        kinds = con.execute(
            "SELECT json_extract_string(data, '$.resultType'), json_extract_string(data, '$.status') FROM prom_doc"
        ).fetchall()
        status = con.execute(
            f"SELECT json_extract_string(j, '$.status') FROM read_json_objects({sql_path(path)}, "
            f"format='unstructured', maximum_object_size={json_object_limit(path)}) t(j)",
        ).fetchall()
        if status and status[0][0] not in (None, "success"):
            raise FormatError(path, None, f'the API answered status "{status[0][0]}", not "success"')
        if not kinds or kinds[0][0] not in ("matrix", "vector"):
            found = kinds[0][0] if kinds else None
            raise FormatError(path, None, f'resultType must be "matrix" or "vector", found {found!r}')
        con.execute(
            """CREATE TEMP TABLE prom_series AS
               SELECT generate_subscripts(series, 1) AS series_no, unnest(series) AS s
               FROM (SELECT json_extract(data, '$.result[*]') AS series FROM prom_doc)"""
        )
        nameless = con.execute(
            "SELECT min(series_no) FROM prom_series WHERE json_extract_string(s, '$.metric.__name__') IS NULL"
        ).fetchall()[0][0]
        if nameless is not None:
            raise FormatError(
                path,
                None,
                f"series {nameless} has no __name__ label (an expression result?): query the raw metric, "
                "or keep its name with label_replace",
            )
        con.execute(
            """CREATE TEMP TABLE prom_points AS
               SELECT series_no, json_extract_string(s, '$.metric.__name__') AS metric,
                      CAST(json_extract(s, '$.metric') AS MAP(VARCHAR, VARCHAR)) AS labels,
                      unnest(CASE WHEN json_extract(s, '$.values') IS NULL THEN [json_extract(s, '$.value')]
                                   ELSE json_extract(s, '$.values[*]') END) AS point
               FROM prom_series"""
        )
        bad = con.execute(
            """SELECT series_no, point::VARCHAR FROM prom_points
               WHERE TRY_CAST(point->>0 AS DOUBLE) IS NULL OR TRY_CAST(point->>1 AS DOUBLE) IS NULL
               ORDER BY series_no LIMIT 1"""
        ).fetchall()
        if bad:
            raise FormatError(path, None, f"series {bad[0][0]}: point {bad[0][1]} is not [time, value]")
        con.execute(
            """CREATE TEMP TABLE prom_long AS
               SELECT series_no AS line_no, metric, labels,
                      make_timestamp(CAST(round(CAST(point->>0 AS DOUBLE) * 1e6) AS BIGINT)) AS ts,
                      CAST(point->>1 AS DOUBLE) AS value
               FROM prom_points"""
        )
        for t in ("prom_doc", "prom_series", "prom_points"):
            con.execute(f"DROP TABLE temp.{t}")
        return stage_long(con, path, opts)
