"""One-character mutations of the rollup's incremental refresh, each run against the rollup edge tests.

    python bench/rollup_mutants.py [NAME ...]      (from the repository root; all mutations without a NAME)

Copies the tracked files (with the working tree's content) to a temporary directory, applies each mutation
alone there (never in the checkout), runs tests/analytics/test_rollup_edges.py (``MUT_TESTS`` overrides, space
separated) and prints KILLED or SURVIVED per mutation. Exits 1 when one survives that is not listed in
EQUIVALENT (the edges that change no figure by construction: tests/analytics/test_rollup_edges.py docstring).

Measured 2026-12-06 (shared 2-core machine, other engineers' tests running): 33 mutations, about 15 s each;
22 killed, the 11 EQUIVALENT survive. Before the cut, merge and silence tests, 12 were killed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

R = "gpuledger/ledger/rollup.py"
Q = "gpuledger/ledger/rollup_sequence.py"
C = "gpuledger/ledger/rollup_columns.py"
S = "gpuledger/ledger/sample_time.py"
SEQ_LOOK = "s.ts >= w.look_lo AND s.ts < w.look_hi\n            WHERE s.ts >= ? AND s.ts < ?"
RUNS_DELETE = "idle_runs.run_start BETWEEN rw.lo AND rw.hi"
DAY_DELETE = "{table}.day BETWEEN w.d_lo AND w.d_hi"
HOUR_DELETE = "samples_hour.hour BETWEEN w.h_lo AND w.h_hi"
M_HI_END = "date_trunc('minute', greatest(rw.hi, rw.reach_hi)) + INTERVAL 1 MINUTE AS m_hi_end"
# (name, file, exact text occurring once, its replacement)
MUTATIONS = [
    ("tolerance 1.5->2.5", S, "GAP_TOLERANCE = 1.5", "GAP_TOLERANCE = 2.5"),
    ("contiguous <= -> <", S, '"{gap_s} <= {GAP_TOLERANCE}', '"{gap_s} < {GAP_TOLERANCE}'),
    (
        "widen reach s.ts <= rw.hi -> <",
        R,
        "s.ts <= rw.hi\n                  WHERE",
        "s.ts < rw.hi\n                  WHERE",
    ),
    ("widen run_start < rw.lo -> <=", R, "r.run_start < rw.lo", "r.run_start <= rw.lo"),
    ("widen run_reach_ts >= rw.lo -> >", R, "r.run_reach_ts >= rw.lo", "r.run_reach_ts > rw.lo"),
    ("widen run_start <= reach_hi -> <", R, "r.run_start <= rw.reach_hi", "r.run_start < rw.reach_hi"),
    ("widen last_ts > rw.hi -> >=", R, "r.last_ts > rw.hi", "r.last_ts >= rw.hi"),
    ("runs DELETE [lo,hi)", R, RUNS_DELETE, "idle_runs.run_start >= rw.lo AND idle_runs.run_start < rw.hi"),
    ("runs DELETE (lo,hi]", R, RUNS_DELETE, "idle_runs.run_start > rw.lo AND idle_runs.run_start <= rw.hi"),
    ("runs pj_ts >= rw.lo -> >", R, "q.pj_ts >= rw.lo", "q.pj_ts > rw.lo"),
    ("runs q.ts <= rw.hi -> <", R, "q.ts >= rw.lo AND q.ts <= rw.hi", "q.ts >= rw.lo AND q.ts < rw.hi"),
    ("runs q.ts >= rw.lo -> >", R, "q.ts >= rw.lo AND q.ts <= rw.hi", "q.ts > rw.lo AND q.ts <= rw.hi"),
    (
        "before s.ts < rw.lo -> <=",
        R,
        "s.ts < rw.lo AND s.ts >= rw.lo - mx.look",
        "s.ts <= rw.lo AND s.ts >= rw.lo - mx.look",
    ),
    (
        "before reach >= rw.lo -> >",
        R,
        ">= rw.lo AND s.energy_j IS NOT NULL",
        "> rw.lo AND s.energy_j IS NOT NULL",
    ),
    ("m_hi_end + 1 minute dropped", R, M_HI_END, M_HI_END.replace(" + INTERVAL 1 MINUTE", "")),
    (
        "minute DELETE < m_hi_end -> <=",
        R,
        "samples_minute.minute < w.m_hi_end",
        "samples_minute.minute <= w.m_hi_end",
    ),
    ("minute DELETE >= m_lo -> >", R, "samples_minute.minute >= w.m_lo", "samples_minute.minute > w.m_lo"),
    ("minute DELETE global < ? -> <=", R, "samples_minute.minute < ?", "samples_minute.minute <= ?"),
    ("day DELETE d_lo excluded", R, DAY_DELETE, "{table}.day > w.d_lo AND {table}.day <= w.d_hi"),
    ("day DELETE d_hi excluded", R, DAY_DELETE, "{table}.day >= w.d_lo AND {table}.day < w.d_hi"),
    (
        "day INSERT < d_hi + 1 day -> <=",
        R,
        "m.minute < w.d_hi + INTERVAL 1 DAY",
        "m.minute <= w.d_hi + INTERVAL 1 DAY",
    ),
    (
        "hist INSERT < d_hi + 1 day -> <=",
        R,
        "s.ts < w.d_hi + INTERVAL 1 DAY",
        "s.ts <= w.d_hi + INTERVAL 1 DAY",
    ),
    (
        "hour DELETE h_hi excluded",
        R,
        HOUR_DELETE,
        "samples_hour.hour >= w.h_lo AND samples_hour.hour < w.h_hi",
    ),
    (
        "hour DELETE h_lo excluded",
        R,
        HOUR_DELETE,
        "samples_hour.hour > w.h_lo AND samples_hour.hour <= w.h_hi",
    ),
    (
        "hour INSERT < h_hi + 1 hour -> <=",
        R,
        "m.minute < w.h_hi + INTERVAL 1 HOUR",
        "m.minute <= w.h_hi + INTERVAL 1 HOUR",
    ),
    (
        "rollup_d - 1 minute dropped",
        R,
        "(m_hi_end - INTERVAL 1 MINUTE)::DATE AS d_hi",
        "m_hi_end::DATE AS d_hi",
    ),
    (
        "rollup_h - 1 minute dropped",
        R,
        "date_trunc('hour', m_hi_end - INTERVAL 1 MINUTE)",
        "date_trunc('hour', m_hi_end)",
    ),
    ("seq look_hi < -> <=", Q, SEQ_LOOK, SEQ_LOOK.replace("s.ts < w.look_hi", "s.ts <= w.look_hi")),
    ("seq look_lo >= -> >", Q, SEQ_LOOK, SEQ_LOOK.replace("s.ts >= w.look_lo", "s.ts > w.look_lo")),
    (
        "columns q.ts < m_hi_end -> <=",
        C,
        "q.ts >= w.m_lo AND q.ts < w.m_hi_end",
        "q.ts >= w.m_lo AND q.ts <= w.m_hi_end",
    ),
    (
        "columns q.ts >= m_lo -> >",
        C,
        "q.ts >= w.m_lo AND q.ts < w.m_hi_end",
        "q.ts > w.m_lo AND q.ts < w.m_hi_end",
    ),
    ("columns k.ts <= last_ts -> <", C, "k.ts <= r.last_ts", "k.ts < r.last_ts"),
    ("columns k.ts >= first_ts -> >", C, "k.ts >= r.first_ts", "k.ts > r.first_ts"),
]
EQUIVALENT = {
    "widen run_start < rw.lo -> <=",
    "widen run_reach_ts >= rw.lo -> >",
    "widen run_start <= reach_hi -> <",
    "widen last_ts > rw.hi -> >=",
    "before s.ts < rw.lo -> <=",
    "before reach >= rw.lo -> >",
    "minute DELETE global < ? -> <=",
    "rollup_d - 1 minute dropped",
    "rollup_h - 1 minute dropped",
    "seq look_hi < -> <=",
    "seq look_lo >= -> >",
}


def main(names: list[str]) -> int:
    tests = os.environ.get("MUT_TESTS", "tests/analytics/test_rollup_edges.py").split()
    tracked = subprocess.run(["git", "ls-files"], capture_output=True, text=True, check=True).stdout.split()
    surprises = 0
    with tempfile.TemporaryDirectory(prefix="rollup-mutants-") as tmp:
        root = Path(tmp)
        for f in tracked:
            if Path(f).is_file():
                (root / f).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(f, root / f)
        for name, f, old, new in MUTATIONS:
            if names and name not in names:
                continue
            src = (root / f).read_text()
            if src.count(old) != 1:
                print(
                    f"NOT FOUND {name}: the text occurs {src.count(old)} times (the code moved?)", flush=True
                )
                surprises += 1
                continue
            (root / f).write_text(src.replace(old, new))
            try:
                run = subprocess.run(
                    [sys.executable, "-m", "pytest", *tests, "-x", "-q", "-p", "no:cacheprovider"],
                    cwd=root,
                    env={**os.environ, "PYTHONPATH": str(root)},
                    capture_output=True,
                    text=True,
                )
            finally:
                (root / f).write_text(src)
            failed = " ".join(
                line for line in run.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))
            )
            killed = run.returncode != 0
            surprises += not killed and name not in EQUIVALENT
            print(
                f"{'KILLED' if killed else 'SURVIVED'} {name}{' (equivalent)' * (name in EQUIVALENT)} {failed}"
            )
    return 1 if surprises else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
