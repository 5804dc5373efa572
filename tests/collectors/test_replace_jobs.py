"""``--replace`` of a job dump never removes a job another dump still holds (collectors/provenance.py ``delete_ingests``).

Through the real CLI on tiny sacct dumps, as tests/collectors/test_job_records.py; GPU-hours are GPUs × hours
worked by hand, money GPU-hours × $2.99 (the price sheet's H100 on-demand rate).
"""

from __future__ import annotations

import pytest

from tests.collectors.test_job_records import FINISHED, H100_USD, OTHER, RUNNING, cli, dump, ledger_rows


def row(n: int, gpus: int = 1) -> str:
    """Job ``n``: ``gpus`` H100s on g0n from 10:00 to 11:00 on March ``n``."""
    return (
        f"{n}|ci|train|bob|cv|COMPLETED|2025-03-0{n}T10:00:00|2025-03-0{n}T11:00:00|01:00:00|"
        f"gres/gpu:h100={gpus},gres/gpu={gpus}|g0{n}"
    )


def hours(tmp_path) -> dict[str, float]:
    return {j["job_id"]: j["gpu_hours"] for j in cli(tmp_path, "jobs")}


def test_a_job_another_dump_holds_is_handed_over_with_its_allocation(tmp_path):
    # d1: jobs 1 and 2 (2 GPUs); d2: jobs 2 and 3, so job 2's row and allocation are d2's (ingest #2) and d1
    # (ingest #1) holds it too
    d1 = dump(tmp_path, "d1.txt", row(1), row(2, gpus=2))
    d2 = dump(tmp_path, "d2.txt", row(2, gpus=2), row(3))
    cli(tmp_path, "ingest", "--tz", "UTC", str(d1), str(d2))
    assert ledger_rows(tmp_path, "SELECT table_name, row_key, ingest_id FROM held_rows") == [
        ("jobs", "ci/2", 1)
    ]
    # d2 exported again without job 2: job 2 stays (was removed: 2 GPU-h and $5.98 lost), now d1's
    dump(tmp_path, "d2.txt", row(3))
    [report] = cli(tmp_path, "ingest", "--tz", "UTC", "--replace", str(d2))
    assert report["replaced_ingests"] == [2] and report["ingest_id"] == 3
    assert hours(tmp_path) == {"ci/1": 1.0, "ci/2": 2 * 1.0, "ci/3": 1.0}
    assert sum(j["cost_usd"] for j in cli(tmp_path, "jobs")) == pytest.approx(
        (1 + 2 + 1) * H100_USD
    )  # $11.96
    assert ledger_rows(tmp_path, "SELECT job_id, ingest_id FROM jobs ORDER BY 1") == [
        ("ci/1", 1),
        ("ci/2", 1),
        ("ci/3", 3),
    ]
    assert ledger_rows(tmp_path, "SELECT job_id, ingest_id, host FROM allocations ORDER BY 1") == [
        ("ci/1", 1, "g01"),
        ("ci/2", 1, "g02"),  # the allocation went with its job
        ("ci/3", 3, "g03"),
    ]
    assert ledger_rows(tmp_path, "SELECT count(*) FROM held_rows") == [(0,)]  # d1 owns job 2 now
    # d1 exported again without job 2 as well: now no dump holds it, and it goes
    dump(tmp_path, "d1.txt", row(1))
    cli(tmp_path, "ingest", "--tz", "UTC", "--replace", str(d1))
    assert hours(tmp_path) == {"ci/1": 1.0, "ci/3": 1.0}
    assert ledger_rows(tmp_path, "SELECT count(*) FROM allocations WHERE job_id = 'ci/2'") == [(0,)]


@pytest.mark.parametrize("order", ["newer-first", "older-first"])
def test_a_dump_with_an_older_record_still_holds_the_job(tmp_path, order):
    # job 101: 2 H100s, finished 10:00–20:00 (new.txt, with job 104), and as sacct saw it running at 15:00
    # (old.txt). Whichever came first, old.txt holds job 101 too: when new.txt is exported again without it,
    # 101 stays with the record the ledger has, 2 × 10 = 20 GPU-h, $59.80 (before: removed, $0).
    new = dump(tmp_path, "new.txt", FINISHED, OTHER)
    old = dump(tmp_path, "old.txt", RUNNING)
    cli(tmp_path, "ingest", "--tz", "UTC", *map(str, [new, old] if order == "newer-first" else [old, new]))
    dump(tmp_path, "new.txt", OTHER)
    cli(tmp_path, "ingest", "--tz", "UTC", "--replace", str(new))
    jobs = {j["job_id"]: j for j in cli(tmp_path, "jobs")}
    assert {k: j["gpu_hours"] for k, j in jobs.items()} == {"ci/101": 2 * 10.0, "ci/104": 1.0}
    assert jobs["ci/101"]["cost_usd"] == pytest.approx(2 * 10 * H100_USD)
    assert ledger_rows(tmp_path, "SELECT state, ingest_id FROM jobs WHERE job_id = 'ci/101'") == [
        ("COMPLETED", 1 if order == "older-first" else 2)  # old.txt's ingest
    ]


def test_a_dump_exported_again_as_it_grows_keeps_no_claim_of_its_older_exports(tmp_path):
    # jobs.txt exported three times as jobs finish (1; 1, 2; 1, 2, 3) and ingested without --replace, as a
    # cron job or the Slurm poll does: the older exports of the same source hold nothing the newest does
    # not, so no held_rows row is kept for them, and --replace of the source still removes a job that only
    # it listed (1 and 2 here)
    d = tmp_path / "jobs.txt"
    for n in (1, 2, 3):
        dump(tmp_path, "jobs.txt", *(row(i) for i in range(1, n + 1)))
        cli(tmp_path, "ingest", "--tz", "UTC", str(d))
    assert ledger_rows(tmp_path, "SELECT job_id, ingest_id FROM jobs ORDER BY 1") == [
        ("ci/1", 3),
        ("ci/2", 3),
        ("ci/3", 3),
    ]
    assert ledger_rows(tmp_path, "SELECT count(*) FROM held_rows") == [(0,)]
    dump(tmp_path, "jobs.txt", row(3))
    [report] = cli(tmp_path, "ingest", "--tz", "UTC", "--replace", str(d))
    assert report["replaced_ingests"] == [1, 2, 3]
    assert hours(tmp_path) == {"ci/3": 1.0}
