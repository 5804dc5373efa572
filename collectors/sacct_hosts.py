"""Where a Slurm job ran: its ``NodeList`` expanded to host names, and ``gres_detail``'s GPU indices per host,
staged as one ``allocations`` row per host (or per named GPU index) of each started GPU job.

Used by both sacct readers (collectors/sacct.py, collectors/sacct_json.py) and the Slurm poller
(collectors/slurm_poll.py).
"""

from __future__ import annotations

import itertools
import json
import math
import re
from pathlib import Path

import duckdb

from gpuledger.ledger.errors import FormatError

MAX_HOSTS_PER_RANGE = 100_000


def expand_nodelist(text: str) -> list[str]:
    """Slurm's compressed host list → host names, as ``scontrol show hostnames`` gives them.

    ``gpu[01-04,07],cpu1`` → gpu01 gpu02 gpu03 gpu04 gpu07 cpu1 (a range is as wide as its first bound:
    ``n[009-011]``, ``n[9-11]``; several bracket groups in one name expand as a product). ``None assigned``
    (pending) and ``(null)`` give no hosts. What scontrol calls an invalid host list is a ValueError saying
    why: a reversed range (``n[5-3]``), an empty or non-numeric one, a bracket never closed (``gpu[01-04``,
    which scontrol turns into a host ``gpu]``), a ``]`` with no ``[``, a bracket inside a bracket, or a name
    going on after its last bracket group (``n[1-2].ib``). Checked against scontrol on generated lists
    (tests/collectors/test_sacct_hosts.py)."""
    text = text.strip()
    if not text or text in ("None assigned", "(null)", "None"):
        return []
    shown = repr(text[:80] + ("…" if len(text) > 80 else ""))
    parts: list[str] = []
    depth, cur = 0, ""
    for ch in text:
        if ch == "[":
            if depth:
                raise ValueError(f"host list {shown}: a bracket inside a bracket")
            depth += 1
        elif ch == "]":
            if not depth:
                raise ValueError(f"host list {shown}: a ']' with no '[' before it")
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if depth:
        raise ValueError(f"host list {shown}: a '[' that is never closed")
    parts.append(cur)
    hosts: list[str] = []
    for part in filter(None, (p.strip() for p in parts)):
        pieces = re.split(r"(\[[^\[\]]*\])", part)
        if len(pieces) > 1 and pieces[-1]:
            raise ValueError(
                f"host list {shown}: {pieces[-1][:40]!r} after the last bracket group (Slurm ends a name there)"
            )
        choices: list[list[str]] = []
        for piece in pieces:
            if not piece.startswith("["):
                choices.append([piece])
                continue
            options: list[str] = []
            for rng in piece[1:-1].split(","):
                lo, sep, hi = rng.partition("-")
                if not (lo.isdigit() and (hi.isdigit() or not sep)):
                    raise ValueError(f"host list {shown}: [{rng[:40]}] is not a number or a range of numbers")
                if not sep:
                    options.append(lo)
                    continue
                if int(hi) < int(lo):
                    raise ValueError(f"host list {shown}: a reversed range [{rng[:40]}]")
                if int(hi) - int(lo) > MAX_HOSTS_PER_RANGE:
                    raise ValueError(
                        f"host list {shown}: the range [{rng[:40]}] names more than {MAX_HOSTS_PER_RANGE:,} hosts"
                    )
                options.extend(str(i).zfill(len(lo)) for i in range(int(lo), int(hi) + 1))
            choices.append(options)
        if math.prod(len(c) for c in choices) + len(hosts) > MAX_HOSTS_PER_RANGE:
            raise ValueError(f"host list {shown}: more than {MAX_HOSTS_PER_RANGE:,} hosts")
        hosts.extend("".join(c) for c in itertools.product(*choices))
    return hosts


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


def _stage_allocations(con: duckdb.DuckDBPyConnection, path: Path, line_label: str | None = None) -> None:
    """One row per host of each started GPU job (gpu_count on a host = the job's GPUs / its hosts), or,
    where ``gres_detail`` names a host's GPU indices, one row per index (gpu_count 1, ``gpu_index``).

    A running job's rows end at ``held_until_ts`` (Start + Elapsed); its job record keeps end_ts NULL.
    """
    pairs = con.execute(
        """SELECT nodelist, gres_detail, min(line_no) FROM stage_jobs
           WHERE nodelist IS NOT NULL AND gpu_count > 0 GROUP BY ALL ORDER BY 3"""
    ).fetchall()
    lists, hosts_of, indices_of = [], [], []
    for text, detail, line in pairs:
        try:
            hosts = expand_nodelist(text)
        except ValueError as exc:
            if line_label:  # a JSON document: its entry, not a line
                raise FormatError(path, None, f'{line_label} {line}: "nodes": {exc}') from None
            raise FormatError(path, line, f'column "NodeList": {exc}') from None
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
