"""What per-process SM shares cost a query: ``job_costs`` on GPUs time-sliced by two jobs, without and with a
node-level ``nvidia-smi pmon`` log (collectors/nvidia_smi_pmon.py), in one run.

    .venv/bin/python bench/process_shares.py [--hours 1] [--gpus 8] [--every 1]

Each of ``--gpus`` GPUs of host h1 is held by jobs aN and bN for ``--hours``; the pmon log polls every
``--every`` seconds with aN's process at sm 60 and bN's at sm 20 (pids tied to jobs by an NVML-style map).
Prints the best of three ``job_costs`` calls each way and their ratio (the baseline is the same ledger before
the log lands), and checks the split: 3:1 on every GPU, the GPUs' cost unchanged.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from analytics.cost import job_costs
from collectors.base import IngestOptions, land, next_ingest_id, run_in_transaction
from collectors.ingest import ingest_file
from gpuledger.ledger.db import memory_ledger
from tests.analytics.build import T0, alloc, gpu, ingest, job, series, set_test_prices


def best_of(con, n: int = 3) -> tuple[float, dict[str, float]]:
    best, costs = float("inf"), {}
    for _ in range(n):
        t = time.perf_counter()
        frame = job_costs(con)
        best = min(best, time.perf_counter() - t)
        costs = dict(frame.select("job_id", "cost_usd").rows())
    return best, costs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=float, default=1.0)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--every", type=int, default=1, help="pmon -d (seconds between polls)")
    args = ap.parse_args()
    minutes = int(args.hours * 60)
    con = memory_ledger()
    set_test_prices(con)
    jobs, allocs, samples, gpus = [], [], [], []
    for g in range(args.gpus):
        for j in "ab":
            jobs.append(job(f"{j}{g}", 0, minutes))
            allocs.append(alloc(f"{j}{g}", f"h1:{g}", 0, minutes))
        samples += series(f"h1:{g}", 0, [50.0] * minutes)
        gpus.append({**gpu(f"h1:{g}"), "gpu_index": g})
    ingest(con, jobs=jobs, allocations=allocs, samples=samples, gpus=gpus)
    base_s, base = best_of(con)

    def pid_map() -> None:  # pid 1000+g is aN's, 2000+g bN's (what the NVML sampler records)
        con.execute(
            """CREATE TEMP TABLE stage_processes AS
               SELECT ?::TIMESTAMP AS ts, 'h1:' || g AS gpu_id, p.pid + g AS pid, 'python' AS process_name,
                      1000.0 AS used_mem_mib, p.j || g AS job_id
               FROM range(?) t(g), (VALUES (1000, 'a'), (2000, 'b')) p(pid, j)""",
            [T0, args.gpus],
        )
        land(con, next_ingest_id(con), IngestOptions())

    run_in_transaction(con, pid_map)
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "pmon.log"
        with log.open("w") as fh:
            fh.write(
                "#Date       Time        gpu         pid   type     sm    mem    enc    dec    command\n"
            )
            for k in range(0, int(args.hours * 3600), args.every):
                t = T0 + dt.timedelta(seconds=k)
                for g in range(args.gpus):
                    for pid, sm in ((1000 + g, 60), (2000 + g, 20)):
                        fh.write(
                            f" {t:%Y%m%d}   {t:%H:%M:%S}  {g:>5}  {pid:>10}     C  {sm:>5}      1      -      -    python\n"
                        )
        t = time.perf_counter()
        ingest_file(con, log, opts=IngestOptions(tz="UTC", host="h1"))
        ingest_s = time.perf_counter() - t
    rows = con.execute("SELECT count(*) FROM process_shares").fetchall()[0][0]
    with_s, shared = best_of(con)
    for g in range(args.gpus):
        assert abs(shared[f"a{g}"] - 3 * shared[f"b{g}"]) < 1e-6, (g, shared[f"a{g}"], shared[f"b{g}"])
    assert abs(sum(shared.values()) - sum(base.values())) < 1e-6
    print(f"{args.gpus} GPUs × {args.hours:g} h, pmon -d {args.every}: {rows:,} process_shares rows "
          f"(log ingested in {ingest_s:.1f} s)")  # fmt: skip
    print(f"job_costs without the log {base_s:.3f} s, with it {with_s:.3f} s: ratio {with_s / base_s:.1f}")


if __name__ == "__main__":
    main()
