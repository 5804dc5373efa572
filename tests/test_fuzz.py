"""Fuzzing in the suite: mutated real files (../shared/datasets) of every parser family through ingest_file.

Each input must land with nothing out of range in the ledger, or be rejected with a FormatError that names
the file; any other exception is a traceback a user would see. bench/fuzz.py is the same engine for
10,000 inputs per family; here a fixed seed and a few dozen inputs per family keep it to about a minute.
"""

from __future__ import annotations

import pytest

from bench.fuzz import FAMILIES, fuzz_family
from tests.conftest import DATASETS, dataset

PER_FAMILY = 30


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_mutated_real_files_land_plausibly_or_are_rejected_naming_the_file(family, tmp_path):
    for spec in FAMILIES[family]:
        for relative in spec.split("+"):
            if not relative.startswith("repo:"):  # a fixture of this repository is always there
                dataset(relative)  # skips, saying why, where ../shared/datasets is absent
    tally = fuzz_family(family, PER_FAMILY, seed=9, workdir=tmp_path, datasets=DATASETS)
    problems = {k: v for k, v in tally.examples.items() if k != "no_line"}
    assert tally.inputs == PER_FAMILY
    assert (tally.crashes, tally.out_of_range, tally.hangs) == (0, 0, 0), problems
    # the mutations must exercise both outcomes, or the test proves nothing
    assert tally.ok > 0 and tally.rejected > 0, tally.line()


def test_ledger_watch_rechecks_what_changed_and_the_samples_of_a_changed_gpu(tmp_path):
    """bench/fuzz.py checks only the tables that changed since its last clean check: a value made implausible
    after a clean check must still be found, and so must samples whose GPU's model changed under them."""
    from bench.fuzz import LedgerWatch, fresh_ledger
    from collectors.base import IngestOptions
    from collectors.ingest import ingest_file

    con = fresh_ledger()
    try:
        # an RTX A5000 with 24,564 MiB total: plausible for it, not for a T4 (16 GB)
        ingest_file(
            con,
            dataset("nvidia-smi-csv/anjana5anand_gpu_usage_log_resnet_224.csv"),
            opts=IngestOptions(tz="UTC"),
        )
        watch = LedgerWatch(con)
        assert watch.violations() == []
        assert watch.violations() == []  # nothing changed: nothing to find
        con.execute("UPDATE samples SET mem_used_mib = -300 WHERE rowid = (SELECT min(rowid) FROM samples)")
        [bad] = watch.violations()
        assert (bad.table, bad.value) == ("samples", "-300")
        con.execute("UPDATE samples SET mem_used_mib = 11325 WHERE mem_used_mib = -300")
        assert watch.violations() == []
        # the samples did not change, their limit did (the GPU's own total unknown, so only samples break)
        con.execute("UPDATE gpus SET model = 'T4', memory_total_mib = NULL")
        [bad] = watch.violations()
        assert bad.table == "samples" and bad.column == "mem_total_mib" and "T4" in bad.reason, bad
    finally:
        con.close()


def test_a_derived_sample_interval_is_never_over_a_day(tmp_path):
    from bench.fuzz import LedgerWatch, fresh_ledger
    from collectors.base import IngestOptions
    from collectors.ingest import ingest_file

    # pod a: one sample at 2022-09-11 and one at 2001-09-09 (epoch 1e9, a plausible time): the gap between
    # them is 1,662,858,720 - 1,000,000,000 = 662,858,720 s; pod b reports every 57 s
    path = tmp_path / "pod_gpu_duty_cycle_anon.csv"
    path.write_text(
        "value,timestamp_anon,container_ip\n"
        "10.0,1662858720.0,a\n20.0,1000000000,a\n"
        "30.0,1662858720.0,b\n40.0,1662858777.0,b\n50.0,1662858834.0,b\n"
    )
    con = fresh_ledger()
    try:
        ingest_file(con, path, opts=IngestOptions(tz="UTC"))
        assert con.execute("SELECT max(interval_s) FROM samples").fetchall()[0][0] <= 86400
        # found by bench/fuzz.py (traces, seed 1, input #382). By hand: pod a's median gap (662,858,720 s)
        # is no cadence, so each of its two samples stands for 1 s; pod b keeps its 57 s cadence
        by_pod = con.execute(
            "SELECT gpu_id, list(interval_s ORDER BY ts) FROM samples GROUP BY gpu_id"
        ).fetchall()
        assert sorted(v for _, v in by_pod) == [[1.0, 1.0], [57.0, 57.0, 57.0]]
        assert LedgerWatch(con).violations() == []
    finally:
        con.close()
