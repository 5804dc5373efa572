"""Ingest of an nvidia-smi CSV: gpuledger stage by stage, against DuckDB's VARCHAR load and a hand-written
typed INSERT plus rollups, from one run; then the cost of one more day into a 28-day ledger.

    .venv/bin/python bench/ingest.py                    # 2 M rows: 64 GPUs at 1 s, with units (~290 MB in /tmp)
    .venv/bin/python bench/ingest.py --rows 10000000    # 10 M rows (~1.4 GB); only on a quiet machine
    .venv/bin/python bench/ingest.py --repeat 5 --skip-incremental

Files are generated once by DuckDB (reused when present) in ``nvidia-smi --query-gpu=timestamp,index,uuid,
name,utilization.gpu,utilization.memory,memory.used,memory.total,power.draw,temperature.gpu,clocks.sm
--format=csv`` form. Every contender runs as its own process, so wall time includes start-up and peak RSS is
that process's alone (its own VmHWM, written as it exits); the contenders alternate within each repeat and
the medians are printed, with CPU seconds (less disturbed by a busy machine than wall time) and the load average beside them:

- gpuledger: ``gpuledger ingest --tz UTC --quiet`` into a fresh ledger file, at the writer's default memory
  limit; the child times each stage (sha256, parse, validate, land, attribute, rollup, commit) by wrapping
  the functions that do them and records the process's peak RSS after each (``VmHWM``);
- VARCHAR load: DuckDB ``read_csv(all_varchar=true)`` into a table in a fresh database file, no cleanup;
- typed + rollups: one transaction into a file: a typed ``CREATE TABLE AS`` (the reader types the timestamp,
  ``TRY_CAST(replace(col, ' %', ''))`` per column), a per-GPU-minute rollup, a per-day rollup from it and a
  5 %-bucket utilization histogram (docs/PERF-NOTES "Ingest with rollups");
- landing floor: the least any design must do to land the file in the ledger: gpuledger's own schema, the
  typed stage and one ``INSERT`` into ``samples`` that gives each sample its interval, in one transaction into
  a file, with no validation, GPU table, attribution or rollup. Its ratio to the VARCHAR load is a ceiling
  for gpuledger's (docs/scale.md, 2026-12-05).

Incremental: a 28-day ledger (64 GPUs at 60 s, one ingest; ``--history 7,28`` also a 7-day one) gets day 29;
the same day also goes into a fresh ledger. The ratio of the ingests' own seconds (``IngestReport.seconds``)
should be about 1, and the same for every length of history.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GPUS = 64
HEADER = (
    "timestamp, index, uuid, name, utilization.gpu [%], utilization.memory [%], memory.used [MiB], "
    "memory.total [MiB], power.draw [W], temperature.gpu, clocks.sm [MHz]"
)

VARCHAR_LOAD = """
import duckdb, sys
con = duckdb.connect(sys.argv[2])
con.execute(f"CREATE TABLE raw AS SELECT * FROM read_csv('{sys.argv[1]}', all_varchar=true, delim=', ', header=true)")
print(con.execute("SELECT count(*) FROM raw").fetchall()[0][0])
"""

# The typed read both hand-written contenders share: the reader types the timestamp and the index, and each
# number is ``TRY_CAST(replace(col, ' unit', ''))`` (docs/PERF-NOTES).
TYPED_READER = """
types = ["TIMESTAMP", "INTEGER"] + ["VARCHAR"] * 9
cols = ", ".join(f"'c{i}': '{t}'" for i, t in enumerate(types))
src = (f"read_csv('{sys.argv[1]}', delim=', ', header=true, auto_detect=false, columns={{{cols}}}, quote='', "
       "escape='', timestampformat='%Y/%m/%d %H:%M:%S.%g')")
num = lambda c, unit: f"TRY_CAST(replace({c}, ' {unit}', '') AS FLOAT)" if unit else f"TRY_CAST({c} AS FLOAT)"
"""

TYPED_ROLLUPS = (
    """
import duckdb, sys
con = duckdb.connect(sys.argv[2])
"""
    + TYPED_READER
    + """
con.execute("BEGIN")
con.execute(f'''CREATE TABLE samples AS SELECT c0 AS ts, c2 AS gpu_id, c1 AS gpu_index, {num("c4", "%")} AS util_pct,
    {num("c5", "%")} AS mem_util_pct, {num("c6", "MiB")} AS mem_used_mib, {num("c7", "MiB")} AS mem_total_mib,
    {num("c8", "W")} AS power_w, {num("c9", "")} AS temp_c, {num("c10", "MHz")} AS sm_clock_mhz FROM {src}''')
con.execute('''CREATE TABLE samples_minute AS SELECT date_trunc('minute', ts) AS minute, gpu_id, count(*) AS n,
    avg(util_pct) AS util, max(mem_used_mib) AS mem_max, avg(power_w) AS power_w,
    count(*) FILTER (util_pct <= 5) AS idle_n FROM samples GROUP BY ALL''')
con.execute('''CREATE TABLE samples_day AS SELECT minute::DATE AS day, gpu_id, sum(n) AS n,
    sum(util * n) / sum(n) AS util, max(mem_max) AS mem_max, sum(power_w * n) / sum(n) AS power_w,
    sum(idle_n) AS idle_n FROM samples_minute GROUP BY ALL''')
con.execute('''CREATE TABLE util_hist AS SELECT ts::DATE AS day, gpu_id, floor(util_pct / 5) * 5 AS bucket,
    count(*) AS n FROM samples GROUP BY ALL''')
con.execute("COMMIT")
print(con.execute("SELECT count(*) FROM samples").fetchall()[0][0])
"""
)

# The least any design must do to land the file in the ledger: the ledger's own schema (gpuledger's
# ensure_schema), the typed read of every column into a stage, and one INSERT into ``samples`` that gives each
# sample its interval (the gap to its GPU's next poll, by the window over whole polls), in one transaction into
# a file. No validation, GPU table, attribution or rollup: what it costs is what gpuledger cannot go below.
LANDING_FLOOR = (
    """
import duckdb, sys
sys.path.insert(0, sys.argv[3])
from gpuledger.ledger.db import ensure_schema
con = duckdb.connect(sys.argv[2])
con.execute("SET memory_limit = '300MB'")
ensure_schema(con)
"""
    + TYPED_READER
    + """
con.execute("BEGIN")
con.execute(f'''CREATE TEMP TABLE stage AS SELECT c0 AS ts, c2 AS gpu_id, c1 AS gpu_index, {num("c4", "%")} AS u,
    {num("c5", "%")} AS mu, {num("c6", "MiB")} AS mm, {num("c7", "MiB")} AS mt, {num("c8", "W")} AS p,
    {num("c9", "")} AS t, {num("c10", "MHz")} AS clk FROM {src}''')
n = con.execute("SELECT count(DISTINCT gpu_id) FROM stage").fetchall()[0][0]
con.execute(f'''INSERT INTO samples (ts, gpu_id, interval_s, util_pct, mem_util_pct, mem_used_mib, mem_total_mib,
    power_w, temp_c, sm_clock_mhz, ingest_id)
    SELECT ts, gpu_id, coalesce(epoch(lead(ts, {n}) OVER () - ts), 1.0), u, mu, mm, mt, p, t, clk, 1 FROM stage''')
con.execute("COMMIT")
print(con.execute("SELECT count(*) FROM samples").fetchall()[0][0])
"""
)

# The gpuledger child: the real CLI, with the functions that do each stage wrapped to time them. A function
# another module took over (attribute_samples → collectors/attribute.py) is wrapped where it is found.
PROFILED = """
import json, os, sys, time
sys.path.insert(0, os.environ["BENCH_ROOT"])
import importlib
spent, order = {}, []

def hwm():
    with open("/proc/self/status") as fh:
        return next(int(l.split()[1]) / 1024 for l in fh if l.startswith("VmHWM"))

def wrap(module, name, label=None):
    try:
        owner = importlib.import_module(module)
    except ImportError:
        return
    path = name.split(".")
    for part in path[:-1]:
        owner = getattr(owner, part, None)
    inner = getattr(owner, path[-1], None) if owner is not None else None
    if inner is None or getattr(inner, "bench_wrapped", False):
        return
    label = label or path[-1]
    def timed(*a, **k):
        if label not in spent:  # listed in the order the stages start
            order.append(label)
            spent[label] = [0.0, 0.0, 0.0]
        t, c = time.perf_counter(), os.times()
        try:
            return inner(*a, **k)
        finally:
            c2 = os.times()
            s = spent[label]
            s[0] += time.perf_counter() - t
            s[1] += c2.user + c2.system - c.user - c.system
            s[2] = hwm()
    timed.bench_wrapped = True
    setattr(owner, path[-1], timed)
    # modules that imported the function by name call their own reference: rebind it there too
    for other in list(sys.modules.values()):
        if other is not owner and getattr(other, path[-1], None) is inner and len(path) == 1:
            setattr(other, path[-1], timed)

for module, name in json.loads(os.environ["BENCH_STAGES"]):
    wrap(module, name)
from gpuledger.cli.main import main
t, c = time.perf_counter(), os.times()
rc = main(sys.argv[1:])
c2 = os.times()
spent["in process (all)"] = [time.perf_counter() - t, c2.user + c2.system - c.user - c.system, hwm()]
order.append("in process (all)")
with open(os.environ["BENCH_OUT"], "w") as fh:
    json.dump({"order": order, "spent": spent}, fh)
sys.exit(rc)
"""

# (module, function): the stages in the order they run; nested ones are indented in the table.
STAGES = [
    ("gpuledger.ledger.reference", "sync_reference_in"),
    ("gpuledger.ledger.db", "ensure_schema"),
    ("collectors.provenance", "sha256_file"),
    ("collectors.nvidia_smi_csv", "NvidiaSmiCsv.stage"),
    ("collectors.validate", "validate_stage"),
    ("collectors.landing", "land"),
    ("collectors.landing", "_land_samples"),
    ("collectors.landing", "_land_gpus"),
    ("collectors.attribute", "attribute_samples"),
    ("collectors.landing", "attribute_samples"),
    ("gpuledger.ledger.rollup", "refresh_rollup"),
    ("gpuledger.ledger.rollup", "merge_staged_rollup"),
    ("gpuledger.ledger.rollup", "_sequence"),
    ("gpuledger.ledger.rollup", "_sequence_polls"),
    ("gpuledger.ledger.rollup", "_refresh_runs"),
    ("gpuledger.ledger.rollup", "_refresh_minutes"),
    ("collectors.landing", "_refresh_merged"),
    ("collectors.landing", "run_in_transaction"),
]
NESTED = {
    "_land_samples",
    "_land_gpus",
    "attribute_samples",
    "refresh_rollup",
    "merge_staged_rollup",
    "_refresh_merged",
}
NESTED2 = {"_sequence", "_sequence_polls", "_refresh_runs", "_refresh_minutes"}


def generate(path: Path, rows: int, *, start: str = "2025-03-01 00:00:00", step_s: int = 1) -> None:
    """Write ``rows`` lines (64 GPUs, one poll every ``step_s`` s from ``start``) with DuckDB; no Python
    loop per row."""
    import duckdb

    polls = -(-rows // GPUS)
    tmp = path.with_suffix(".part")
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    con.execute(
        f"""
        COPY (
            SELECT line FROM (
                SELECT 0 AS k, '{HEADER}' AS line
                UNION ALL
                SELECT 1 + p * {GPUS} + g AS k,
                    strftime(TIMESTAMP '{start}' + INTERVAL (p * {step_s}) SECOND
                             + INTERVAL ((g * 7) % 1000) MILLISECOND, '%Y/%m/%d %H:%M:%S.%g')
                    || ', ' || g
                    || ', GPU-' || lpad(g::VARCHAR, 8, '0') || '-1111-2222-3333-444455556666'
                    || ', NVIDIA H100 80GB HBM3'
                    || ', ' || ((s * 7 + g * 13) % 101) || ' %'
                    || ', ' || ((s * 3 + g) % 60) || ' %'
                    || ', ' || (1000 + (s * 37 + g * 101) % 80000) || ' MiB'
                    || ', 81559 MiB'
                    || ', ' || round(70 + ((s * 11 + g * 17) % 63000) / 100.0, 2) || ' W'
                    || ', ' || (30 + (s + g) % 50)
                    || ', ' || (1000 + (s * 5 + g) % 980) || ' MHz' AS line
                FROM (SELECT p, p * {step_s} AS s FROM range({polls}) t(p)), range({GPUS}) u(g)
                WHERE p * {GPUS} + g < {rows}
            ) ORDER BY k
        ) TO '{tmp}' (FORMAT csv, HEADER false, QUOTE '', ESCAPE '', DELIMITER '\x01')
        """
    )
    con.close()
    tmp.rename(path)


def cached_file(rows: int, *, start: str = "2025-03-01 00:00:00", step_s: int = 1, tag: str = "") -> Path:
    path = Path(tempfile.gettempdir()) / f"gpuledger-bench-smi-{rows}{tag}.csv"
    if not path.exists():
        t = time.perf_counter()
        generate(path, rows, start=start, step_s=step_s)
        print(f"generated {path} in {time.perf_counter() - t:.1f} s", flush=True)
    return path


# Every ``python -c`` child writes its own VmHWM (peak RSS) to $BENCH_HWM as it exits. wait4's ru_maxrss is
# no measure of it: Linux carries the high-water mark of the memory a process had before exec into it, and
# subprocess starts children by vfork, so every child reported at least this (parent) process's own peak
# (measured: 893 MiB for all three contenders of one run, whose gpuledger child's VmHWM was 410 MiB).
HWM_PRELUDE = """import atexit as _atexit, os as _os
def _bench_hwm():
    with open("/proc/self/status") as fh, open(_os.environ["BENCH_HWM"], "w") as out:
        out.write(next(line.split()[1] for line in fh if line.startswith("VmHWM")))
_atexit.register(_bench_hwm)
"""


def timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, float, str]:
    """(wall s, CPU s, peak RSS MiB, stdout) of one ``python -c`` child process."""
    assert cmd[1] == "-c", cmd[:2]
    with tempfile.NamedTemporaryFile(prefix="gpuledger-bench-hwm-") as hwm_file:
        started = time.perf_counter()
        proc = subprocess.Popen(
            [cmd[0], "-c", HWM_PRELUDE + cmd[2], *cmd[3:]],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {}), "BENCH_HWM": hwm_file.name},
        )
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        out = proc.stdout.read() if proc.stdout else ""
        err = proc.stderr.read() if proc.stderr else ""
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"{' '.join(cmd[:5])} failed: {err.strip()[-2000:]}")
        peak_mib = int(Path(hwm_file.name).read_text()) / 1024
    return wall, usage.ru_utime + usage.ru_stime, peak_mib, out.strip()


def gpuledger_ingest(
    csv_path: Path, db: Path, scratch: Path
) -> tuple[tuple[float, float, float], dict, dict]:
    """One profiled ``gpuledger ingest``: (wall, cpu, rss), stages {label: [wall, cpu, hwm]}, the report."""
    out = scratch / "stages.json"
    env = {"BENCH_ROOT": str(ROOT), "BENCH_STAGES": json.dumps(STAGES), "BENCH_OUT": str(out)}
    cmd = [sys.executable, "-c", PROFILED, "ingest", "--db", str(db), "--tz", "UTC", "--quiet", "--json"]
    wall, cpu, rss, stdout = timed([*cmd, str(csv_path)], env)
    prof = json.loads(out.read_text())
    return (wall, cpu, rss), prof, json.loads(stdout)[0]


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.1f}/{five:.1f}"


def bench_one_file(rows: int, repeat: int) -> None:
    csv_path = cached_file(rows)
    print(
        f"file: {csv_path} ({rows:,} rows, {csv_path.stat().st_size / 2**20:,.0f} MiB); {os.cpu_count()} CPUs"
    )
    py = sys.executable
    # Read the file once first: a file generated long ago may have left the page cache, and the first
    # contender would pay the disk for every contender (10 M rows, one run: gpuledger's hash 12.4 s of
    # wall time against 1.2 s warm, and its stage slowed by the same reads).
    with csv_path.open("rb") as fh:
        while fh.read(1 << 24):
            pass
    runs: dict[str, list[tuple[float, float, float]]] = {
        "gpuledger ingest": [],
        "VARCHAR load": [],
        "typed + rollups": [],
        "landing floor": [],
    }
    stages: dict[str, list[list[float]]] = {}
    order: list[str] = []
    loads = []
    for i in range(repeat):
        with tempfile.TemporaryDirectory(prefix="gpuledger-bench-") as tmp:
            scratch = Path(tmp)
            loads.append(load())
            res, prof, report = gpuledger_ingest(csv_path, scratch / "ledger.duckdb", scratch)
            if report["rows"].get("samples") != rows:
                print(f"warning: gpuledger reported {report['rows']}")
            runs["gpuledger ingest"].append(res)
            for label in prof["order"]:
                if label not in order:
                    order.append(label)
                stages.setdefault(label, []).append(prof["spent"][label])
            runs["VARCHAR load"].append(
                timed([py, "-c", VARCHAR_LOAD, str(csv_path), str(scratch / "v.duckdb")])[:3]
            )
            runs["typed + rollups"].append(
                timed([py, "-c", TYPED_ROLLUPS, str(csv_path), str(scratch / "t.duckdb")])[:3]
            )
            runs["landing floor"].append(
                timed([py, "-c", LANDING_FLOOR, str(csv_path), str(scratch / "f.duckdb"), str(ROOT)])[:3]
            )
        print(f"  run {i + 1}/{repeat} done (load {loads[-1]})", flush=True)
    print(
        f"\ngpuledger ingest, stage by stage (median of {repeat}; peak RSS = the process's high-water mark after it)"
    )
    print(f"  {'stage':<26} {'wall s':>7} {'CPU s':>7} {'peak RSS MiB':>13}")
    for label in order:
        xs = stages[label]
        indent = "    " if label in NESTED2 else "  " if label in NESTED else ""
        name = indent + label
        print(
            f"  {name:<26} {median([x[0] for x in xs]):7.2f} {median([x[1] for x in xs]):7.2f} "
            f"{median([x[2] for x in xs]):13,.0f}"
        )
    print(
        f"\nwhole processes, median of {repeat} (load average 1/5 min at each run's start: {', '.join(loads)})"
    )
    print(
        f"  {'path':<20} {'wall s':>7} {'CPU s':>7} {'rows/s':>11} {'peak RSS MiB':>13} {'vs VARCHAR (wall)':>18} {'(CPU)':>7}"
    )
    med = {
        k: (median([r[0] for r in v]), median([r[1] for r in v]), median([r[2] for r in v]))
        for k, v in runs.items()
    }
    floor_wall, floor_cpu, _ = med["VARCHAR load"]
    for name, (wall, cpu, rss) in med.items():
        print(
            f"  {name:<20} {wall:7.2f} {cpu:7.2f} {rows / wall:11,.0f} {rss:13,.0f} "
            f"{floor_wall / wall:17.2f}x {floor_cpu / cpu:6.2f}x"
        )
    ratios = [v[0] / g[0] for v, g in zip(runs["VARCHAR load"], runs["gpuledger ingest"], strict=True)]
    print(
        f"  gpuledger vs VARCHAR load, paired per run: {', '.join(f'{r:.2f}x' for r in ratios)} "
        f"(target >= 1.0x, goal 1.4x; peak RSS target <= 500 MiB)"
    )
    extra = med["gpuledger ingest"][0] - med["landing floor"][0]
    print(
        f"  gpuledger above the landing floor: {extra:.2f} s (validation, GPU table, attribution, rollups, checks); "
        f"with all of it free, gpuledger would stand at the floor's {floor_wall / med['landing floor'][0]:.2f}x"
    )


def bench_incremental(repeat: int, history_days: list[int]) -> None:
    """Day 29 into ledgers of ``history_days`` days before it vs the same day into a fresh one: the ratio
    should be about 1 and not grow with the history."""
    per_day = GPUS * 1440
    day = cached_file(per_day, start="2025-03-29 00:00:00", step_s=60, tag="-day29-60s")
    print(
        f"\nincremental: day 29 ({per_day:,} samples, 64 GPUs at 60 s) onto {history_days} days of the same"
    )
    with tempfile.TemporaryDirectory(prefix="gpuledger-bench-") as tmp:
        scratch = Path(tmp)
        bases = {}
        for days in history_days:
            start = f"2025-03-{29 - days:02d} 00:00:00" if days < 29 else None
            if start is None:
                raise SystemExit("--history days must be under 29 (the history ends where day 29 starts)")
            month = cached_file(days * per_day, start=start, step_s=60, tag=f"-{days}d-60s")
            bases[days] = scratch / f"history-{days}.duckdb"
            (wall, _, rss), _, _ = gpuledger_ingest(month, bases[days], scratch)
            print(
                f"  building the {days}-day ledger ({days * per_day:,} samples): {wall:.1f} s, peak RSS {rss:,.0f} MiB"
            )
        alone: list[float] = []
        onto: dict[int, list[float]] = {d: [] for d in history_days}
        for _ in range(repeat):
            fresh = scratch / "fresh.duckdb"
            fresh.unlink(missing_ok=True)
            _, _, report = gpuledger_ingest(day, fresh, scratch)
            alone.append(report["seconds"])
            for days, base_db in bases.items():
                grown = scratch / "grown.duckdb"
                shutil.copy(base_db, grown)
                _, _, report = gpuledger_ingest(day, grown, scratch)
                onto[days].append(report["seconds"])
                grown.unlink()
    a = median(alone)
    print(f"  day 29 alone: {a:.2f} s (ingest's own seconds, median of {repeat}; load {load()})")
    for days, xs in onto.items():
        b = median(xs)
        print(
            f"  onto {days} days: {b:.2f} s = {b / a:.2f}x the day alone (target about 1, not growing with the days)"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-incremental", action="store_true")
    ap.add_argument("--only-incremental", action="store_true")
    ap.add_argument(
        "--history",
        default="28",
        help="days of history the day goes onto, comma-separated (default 28; e.g. 7,28)",
    )
    args = ap.parse_args()
    print(f"load average {load()} at start")
    if not args.only_incremental:
        bench_one_file(args.rows, args.repeat)
    if not args.skip_incremental:
        bench_incremental(args.repeat, [int(d) for d in args.history.split(",")])
    return 0


if __name__ == "__main__":
    sys.exit(main())
