"""The one MIG sizing rule (gpuledger/ledger/mig.py): a card's compute slices, from any name a source gives it."""

from __future__ import annotations

import duckdb
import pytest

from gpuledger.ledger.mig import card_slices_sql


@pytest.mark.parametrize(
    ("text", "slices"),
    [
        ("NVIDIA A30", 4),  # nvidia-smi's model name
        ("gres/gpu:a30", 4),  # a Slurm GRES type
        ("gres/gpu:a30_1g.6gb", 4),  # a Slurm MIG GRES type
        ("gres/gpu:nvidia_a30_2g.12gb", 4),
        ("NVIDIA A100-SXM4-40GB", 7),
        ("gres/gpu:a100_3g.20gb", 7),
        ("NVIDIA H100 80GB HBM3", 7),
        ("gres/gpu:a300", 7),  # not an A30
    ],
)
def test_card_slices_from_any_name(text: str, slices: int) -> None:
    got = duckdb.connect().execute(f"SELECT {card_slices_sql('?')}", [text]).fetchall()[0][0]
    assert got == slices
