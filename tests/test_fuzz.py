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
    from collectors.base import IngestOptions, ingest_file

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
