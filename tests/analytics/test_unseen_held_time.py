"""Held time on GPUs that do not report takes nothing from the free time of cards that do (issue 41), through
the real CLI: ``gpuledger ingest`` of ``sacct -P`` text and dcgm-exporter text (tests/analytics/allocation_files.py),
then ``summary --json``, ``jobs --json`` and ``check --json``, with the H100's price set by a ``[[price]]`` row of
the settings file.

The rule (docs/metrics.md, "Unallocated capacity"): unseen held time is only what was unseen — a silent node, a
silent stretch of a held card, GPUs beyond what the host reports — and it is billed to its job (unmeasured),
never taken from reporting cards' free time; reporting cards that no job holds stay unallocated; each
card-second is billed once; no part is negative. Each scenario's figures are card-hours × the price, worked out
by hand in its row below. The first of each kind is the issue's own scenario (its figures on main at 0c9145f in
the comment); the others are held-out variants of the same kind: other counts, hours and prices, a silent
stretch at the start, the middle or the end, two silent nodes, two short hosts, a job short for part of the
time.

A card on a host no job names at all is telemetry-only (docs/metrics.md, "Cost": an ``unattributed:<card>``
pseudo-job), not unallocated capacity; the scenarios put a job on every host whose free cards they price as
unallocated, and the last one shows unseen GPUs take nothing from such cards either.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.analytics.allocation_files import dcgm_lines, sacct_file, sacct_row, write_lines
from tests.conftest import gpuledger

H100 = "NVIDIA H100 80GB HBM3"  # catalog H100-SXM-80GB


def cards(host: str, n: int, start: float, end: float, *, first: int = 0, busy: bool = True) -> list[str]:
    """dcgm-exporter lines of ``n`` cards of ``host`` (indices first..first+n-1) over [start, end) minutes."""
    return [
        x
        for i in range(first, first + n)
        for x in dcgm_lines(host, i, H100, start, end, value=90.0 if busy else 0.0)
    ]


@dataclass
class Scenario:
    price: float  # $ per H100-hour
    jobs: list[str]  # sacct rows
    telemetry: list[str]  # dcgm lines
    spend: float
    unallocated: float
    cost: dict[str, float]  # job id → cost_usd
    unmeasured: dict[str, float] = field(default_factory=dict)  # job id → unmeasured_usd
    unattributed: float = 0.0  # the pseudo-jobs of cards on hosts no job names


SCENARIOS = {
    # --- a silent node -------------------------------------------------------------------------------------
    # issue: job 9 holds 4 H100s on n1 and n2 (2 each) 00:00-02:00 at $4/h; n1 reports 4 cards, n2 nothing.
    # Job 4 × 2 h × $4 = $32 (n2's half unmeasured, $16); n1's 2 free cards 2 × 2 × $4 = $16; spend $48.
    # At 0c9145f: $32 / $0.
    "silent_node": Scenario(
        4.0,
        [sacct_row("9", "gres/gpu:h100=4,node=2", "n[1-2]", 0, 120)],
        cards("n1", 4, 0, 120),
        48.0, 16.0, {"c1/9": 32.0}, {"c1/9": 16.0},
    ),
    # one GPU on each of 3 nodes, n2 and n3 silent, n1 reports 2 cards; $2/h, 3 h: job 3 × 3 × $2 = $18 (two
    # thirds unmeasured, $12); n1's free card 1 × 3 × $2 = $6; spend $24
    "two_silent_nodes_one_gpu_each": Scenario(
        2.0,
        [sacct_row("9", "gres/gpu:h100=3,node=3", "n[1-3]", 0, 180)],
        cards("n1", 2, 0, 180),
        24.0, 6.0, {"c1/9": 18.0}, {"c1/9": 12.0},
    ),
    # 6 GPUs on 3 nodes (2 each), n2 and n3 silent, n1 reports 4; job B holds 1 of n4's 3 cards; $4/h, 1.5 h:
    # A 6 × 1.5 × $4 = $36 ($24 unmeasured), B 1 × 1.5 × $4 = $6; free: n1's 2 + n4's 2 = 4 × 1.5 × $4 = $24;
    # spend $66
    "two_silent_nodes_beside_another_host": Scenario(
        4.0,
        [
            sacct_row("20", "gres/gpu:h100=6,node=3", "n[1-3]", 0, 90),
            sacct_row("21", "gres/gpu:h100=1,node=1", "n4", 0, 90),
        ],
        cards("n1", 4, 0, 90) + cards("n4", 3, 0, 90, busy=False),
        66.0, 24.0, {"c1/20": 36.0, "c1/21": 6.0}, {"c1/20": 24.0},
    ),
    # 8 GPUs on 2 nodes (4 each), n1 reports 8 cards, n2 silent; $2.50/h, 4 h: job 8 × 4 × $2.5 = $80 ($40
    # unmeasured); n1's 4 free cards 4 × 4 × $2.5 = $40; spend $120
    "silent_node_of_a_big_job": Scenario(
        2.5,
        [sacct_row("22", "gres/gpu:h100=8,node=2", "n[1-2]", 0, 240)],
        cards("n1", 8, 0, 240),
        120.0, 40.0, {"c1/22": 80.0}, {"c1/22": 40.0},
    ),
    # --- a silent stretch ----------------------------------------------------------------------------------
    # issue: job 10 holds one of n1's H100s 00:00-02:00 at $4/h, its card silent 00:40-01:20; n1's other card
    # reports free all along. Job $8, free card 2 h × $4 = $8; spend $16. At 0c9145f: $13.33 / $5.33.
    "silent_stretch": Scenario(
        4.0,
        [sacct_row("10", "gres/gpu:h100=1,node=1", "n1", 0, 120)],
        cards("n1", 1, 0, 40) + cards("n1", 1, 80, 120) + cards("n1", 1, 0, 120, first=1, busy=False),
        16.0, 8.0, {"c1/10": 8.0},
    ),
    # silent at the start: the job's card reports only 01:00-02:00; the free card all along; $3/h: job
    # 2 × $3 = $6, free 2 × $3 = $6; spend $12
    "silent_stretch_at_the_start": Scenario(
        3.0,
        [sacct_row("10", "gres/gpu:h100=1,node=1", "n1", 0, 120)],
        cards("n1", 1, 60, 120) + cards("n1", 1, 0, 120, first=1, busy=False),
        12.0, 6.0, {"c1/10": 6.0},
    ),
    # silent at the end: the job's card reports 00:00-01:30 only; $4/h: $8 / $8, spend $16
    "silent_stretch_at_the_end": Scenario(
        4.0,
        [sacct_row("10", "gres/gpu:h100=1,node=1", "n1", 0, 120)],
        cards("n1", 1, 0, 90) + cards("n1", 1, 0, 120, first=1, busy=False),
        16.0, 8.0, {"c1/10": 8.0},
    ),
    # a 2-GPU job over 3 h on n1's cards 0 and 1, card 0 silent 01:00-01:40; card 2 free all along; $2/h:
    # job 2 × 3 × $2 = $12, free 3 × $2 = $6; spend $18
    "silent_stretch_of_one_of_two_cards": Scenario(
        2.0,
        [sacct_row("10", "gres/gpu:h100=2,node=1", "n1", 0, 180)],
        cards("n1", 1, 0, 60) + cards("n1", 1, 100, 180) + cards("n1", 1, 0, 180, first=1)
        + cards("n1", 1, 0, 180, first=2, busy=False),
        18.0, 6.0, {"c1/10": 12.0},
    ),
    # two 1-GPU jobs on n1, 00:00-02:00, card 0 silent 00:30-01:30, card 1 silent from 01:00 on, card 2 free
    # all along; $1/h: each job 2 × $1 = $2, free card $2; spend $6 (whichever card each job was dealt)
    "two_jobs_silent_at_different_times": Scenario(
        1.0,
        [
            sacct_row("30", "gres/gpu:h100=1,node=1", "n1", 0, 120),
            sacct_row("31", "gres/gpu:h100=1,node=1", "n1", 0, 120),
        ],
        cards("n1", 1, 0, 30) + cards("n1", 1, 90, 120) + cards("n1", 1, 0, 60, first=1)
        + cards("n1", 1, 0, 120, first=2, busy=False),
        6.0, 2.0, {"c1/30": 2.0, "c1/31": 2.0},
    ),
    # --- GPUs beyond what the host reports -----------------------------------------------------------------
    # issue: job 11 holds 4 H100s on n1, which reports 2 cards; beside it job 12 holds 2 of n2's 4 reporting
    # cards, the other 2 free; 00:00-03:00 at $2/h. Job 11 4 × 3 × $2 = $24 (its 2 unreported GPUs
    # unmeasured, $12), job 12 2 × 3 × $2 = $12, n2's 2 free cards 2 × 3 × $2 = $12; spend $48. At 0c9145f:
    # $36 / $0 (job 11's 2 unreported GPUs were taken from n2's 2 free cards).
    "more_gpus_than_the_host_reports": Scenario(
        2.0,
        [
            sacct_row("11", "gres/gpu:h100=4,node=1", "n1", 0, 180),
            sacct_row("12", "gres/gpu:h100=2,node=1", "n2", 0, 180),
        ],
        cards("n1", 2, 0, 180) + cards("n2", 4, 0, 180, busy=False),
        48.0, 12.0, {"c1/11": 24.0, "c1/12": 12.0}, {"c1/11": 12.0},
    ),
    # 3 GPUs on n1 reporting 2, job 12 on 1 of n2's 2; $4/h, 3 h: $36 ($12 unmeasured) + $12, n2's free
    # card $12; spend $60
    "one_gpu_beyond_the_host": Scenario(
        4.0,
        [
            sacct_row("11", "gres/gpu:h100=3,node=1", "n1", 0, 180),
            sacct_row("12", "gres/gpu:h100=1,node=1", "n2", 0, 180),
        ],
        cards("n1", 2, 0, 180) + cards("n2", 2, 0, 180, busy=False),
        60.0, 12.0, {"c1/11": 36.0, "c1/12": 12.0}, {"c1/11": 12.0},
    ),
    # 4 GPUs on n1 reporting 1, job 12 on 1 of n2's 4; $1.50/h, 4 h: 4 × 4 × $1.5 = $24 ($18 unmeasured),
    # $6, n2's 3 free cards 3 × 4 × $1.5 = $18; spend $48
    "three_gpus_beyond_a_one_card_host": Scenario(
        1.5,
        [
            sacct_row("11", "gres/gpu:h100=4,node=1", "n1", 0, 240),
            sacct_row("12", "gres/gpu:h100=1,node=1", "n2", 0, 240),
        ],
        cards("n1", 1, 0, 240) + cards("n2", 4, 0, 240, busy=False),
        48.0, 18.0, {"c1/11": 24.0, "c1/12": 6.0}, {"c1/11": 18.0},
    ),
    # two short hosts: 3 GPUs on n1 (reports 2), 2 on n2 (reports 1), job 13 on 1 of n3's 3; $4/h, 1 h:
    # $12 + $8 + $4 (unmeasured $4 and $4), n3's 2 free cards $8; spend $32
    "two_short_hosts": Scenario(
        4.0,
        [
            sacct_row("11", "gres/gpu:h100=3,node=1", "n1", 0, 60),
            sacct_row("12", "gres/gpu:h100=2,node=1", "n2", 0, 60),
            sacct_row("13", "gres/gpu:h100=1,node=1", "n3", 0, 60),
        ],
        cards("n1", 2, 0, 60) + cards("n2", 1, 0, 60) + cards("n3", 3, 0, 60, busy=False),
        32.0, 8.0, {"c1/11": 12.0, "c1/12": 8.0, "c1/13": 4.0}, {"c1/11": 4.0, "c1/12": 4.0},
    ),
    # short for part of the time: 3 GPUs on n1 (2 cards reporting 00:00-02:00) from 00:00 to 01:00; job 12 on
    # 1 of n2's 2 cards from 01:00 to 02:00; $2/h: $6 ($2 unmeasured) + $2; unallocated: n1's 2 cards
    # 01:00-02:00 $4, n2's 2 cards 00:00-01:00 $4 and its other card 01:00-02:00 $2 = $10; spend $18
    "short_host_for_an_hour": Scenario(
        2.0,
        [
            sacct_row("11", "gres/gpu:h100=3,node=1", "n1", 0, 60),
            sacct_row("12", "gres/gpu:h100=1,node=1", "n2", 60, 120),
        ],
        cards("n1", 2, 0, 120) + cards("n2", 2, 0, 120, busy=False),
        18.0, 10.0, {"c1/11": 6.0, "c1/12": 2.0}, {"c1/11": 2.0},
    ),
    # the other host names no job: its 2 cards are telemetry-only (each an unattributed pseudo-job, 2 h × $3 =
    # $6), not unallocated; 6 GPUs on n1 reporting 4 at $3/h, 2 h: $36 ($12 unmeasured); spend $48, and the
    # 2 unreported GPUs take nothing from the pseudo-jobs either
    "beyond_the_host_beside_a_host_no_job_names": Scenario(
        3.0,
        [sacct_row("11", "gres/gpu:h100=6,node=1", "n1", 0, 120)],
        cards("n1", 4, 0, 120) + cards("n2", 2, 0, 120, busy=False),
        48.0, 0.0, {"c1/11": 36.0}, {"c1/11": 12.0}, unattributed=12.0,
    ),
}  # fmt: skip


def _run(tmp_path: Path, s: Scenario) -> tuple[dict, list[dict], dict]:
    settings = tmp_path / "settings.toml"
    settings.write_text(
        f'[[price]]\ngpu_model = "H100-SXM-80GB"\ntier = "on_demand"\nusd_per_gpu_hour = {s.price}\n'
        'effective_from = 2025-01-01\nsource = "test"\n'
    )
    files = [sacct_file(tmp_path / "sacct.txt", s.jobs), write_lines(tmp_path / "dcgm.prom", s.telemetry)]
    base = ("--db", str(tmp_path / "ledger.duckdb"), "--settings", str(settings))
    done = gpuledger(*base, "ingest", "--cluster", "c1", "--tz", "UTC", *map(str, files))
    assert done.returncode == 0, done.stderr
    summary = json.loads(gpuledger(*base, "summary", "--json").stdout)
    jobs = json.loads(gpuledger(*base, "jobs", "--json").stdout)
    check = json.loads(gpuledger(*base, "check", "--json").stdout)
    return summary, jobs, check


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_unseen_held_time_takes_nothing_from_reporting_cards(tmp_path: Path, name: str) -> None:
    s = SCENARIOS[name]
    summary, jobs, check = _run(tmp_path, s)
    assert summary["spend_usd"] == pytest.approx(s.spend), summary["waste"]
    assert summary["waste"]["unallocated_usd"] == pytest.approx(s.unallocated, abs=1e-9), summary["waste"]
    assert sum(summary["waste"].values()) == pytest.approx(s.spend)
    by_id = {j["job_id"]: j for j in jobs}
    real = {k: v for k, v in by_id.items() if not k.startswith("unattributed:")}
    assert {k: v["cost_usd"] for k, v in real.items()} == pytest.approx(s.cost)
    for jid, usd in s.unmeasured.items():
        assert by_id[jid]["unmeasured_usd"] == pytest.approx(usd), jid
    pseudo = sum(v["cost_usd"] for k, v in by_id.items() if k.startswith("unattributed:"))
    assert pseudo == pytest.approx(s.unattributed, abs=1e-9)
    # no negative cost, GPU-hour or part anywhere; gpuledger check's money invariants find nothing
    for j in jobs:
        for k in ("cost_usd", "gpu_hours", "productive_usd", "idle_allocated_usd", "underused_usd",
                  "failed_usd", "unmeasured_usd"):  # fmt: skip
            assert j[k] is None or j[k] >= -1e-9, (j["job_id"], k, j[k])
    assert all(v >= -1e-9 for v in summary["waste"].values())
    assert check["money"] == []
