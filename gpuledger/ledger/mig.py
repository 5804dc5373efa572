"""How much of its physical card a GPU row stands for: one home for the MIG sizing rule.

A GPU row is a MIG *instance* when it has a parent and a profile, or its id is ``<card>/<instance>``; any other
row with a parent (a W&B series: a second view of the whole card, collectors/attribute.py) stands for all of
it. An instance's size is its compute slices over the card's: 7 on an A100, H100, H200 or B200, 4 on an A30
(the rule collectors/sacct.py counts ``gres/gpu:a100_3g.20gb`` by), so ``3g.40gb`` is 3/7 and the compute
instance ``1c.3g.40gb`` 1/7; a profile nvidia-smi could not size (``?g.20gb``): its memory over the catalog
card's; else one slice.

Read by the telemetry-only cards' weights (analytics/cost.py) and by the split of a shared GPU
(gpuledger/ledger/shares.py: an instance two jobs hold at once holds its own share of the card, not a card).
"""

from __future__ import annotations

CARD_SLICES = 7  # compute slices of an A100, H100, H200 or B200
A30_SLICES = 4  # an A30's (its profiles carry 6 GB a slice)


def card_slices_sql(text: str) -> str:
    """The compute slices of the card a model name, a Slurm GRES type (``a30_1g.6gb``) or a profile names."""
    return f"(CASE WHEN regexp_matches(lower({text}), 'a30(\\b|_)') THEN {A30_SLICES}.0 ELSE {CARD_SLICES}.0 END)"


# One row per GPU row: gpu_id, instance (bool), slices (the card's), slice_units (the slices this row stands
# for: all of them for a card or a view of one). No parameters.
GPU_SLICES_SQL = rf"""
    SELECT gpu_id, instance, slices,
           CASE WHEN instance THEN least(slices, coalesce(used, mem_share * slices, 1.0)) ELSE slices END
               AS slice_units
    FROM (
        SELECT g.gpu_id,
               g.parent_gpu_id IS NOT NULL
                   AND (g.mig_profile IS NOT NULL OR starts_with(g.gpu_id, g.parent_gpu_id || '/')) AS instance,
               {card_slices_sql("concat_ws(' ', g.model, g.model_raw)")} AS slices,
               coalesce(TRY_CAST(nullif(regexp_extract(g.mig_profile, '^(\d+)c\.', 1), '') AS DOUBLE),
                        TRY_CAST(nullif(regexp_extract(g.mig_profile, '^(?:\d+c\.)?(\d+)g\.', 1), '') AS DOUBLE))
                   AS used,
               g.memory_total_mib / nullif(c.memory_mib, 0) AS mem_share
        FROM gpus g LEFT JOIN gpu_catalog c ON c.model = g.model
    )
"""
