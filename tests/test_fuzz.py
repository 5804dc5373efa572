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
