"""analytics.advice_common.family_stem: a job's run family by name (cached by the name alone)."""

from __future__ import annotations

import pytest

from analytics.advice_common import family_stem


@pytest.mark.parametrize(
    ("name", "job_id", "stem"),
    [
        ("ft-valentina-3284", "j1", "ft-valentina"),
        ("small-batch-gpt2-medium-b4-w1-0", "j2", "small-batch-gpt2-medium"),
        ("42-7", "j3", "42"),  # only digit parts: the first one stays
        ("a--1", "j4", "a-"),  # an empty part carries no digit: the strip stops there
        ("plain", "j5", "plain"),
        (None, "train-7", "train"),  # no name: the job id stands in
        ("", "eval-sven-0075", "eval-sven"),  # an empty name too
    ],
)
def test_family_stem(name: str | None, job_id: str, stem: str) -> None:
    assert family_stem(name, job_id) == stem


def test_family_stem_depends_on_the_name_not_the_job_id_it_was_first_asked_with() -> None:
    """The cache is keyed by the name (or the job id standing in for none): two jobs of one name share a
    stem, and a job without a name gets its own id's stem, whatever was asked before."""
    assert family_stem("sweep-lr-3", "job-a") == "sweep-lr"
    assert family_stem("sweep-lr-3", "job-b") == "sweep-lr"
    assert family_stem(None, "job-b") == "job-b"  # no digit in "b": nothing to strip
    assert family_stem(None, "other-9") == "other"


def test_every_kind_comes_from_one_advice_module_of_the_same_shape() -> None:
    """analytics.recommend runs ADVICE in order: each module makes its own kinds, no kind twice, every kind of
    KIND_LABELS from one of them, and each ``advise`` takes the same two arguments."""
    import inspect

    from analytics.recommend import ADVICE, KINDS

    made = [k for m in ADVICE for k in m.KINDS]
    assert sorted(made) == sorted(KINDS) and len(made) == len(set(made))
    for m in ADVICE:
        assert list(inspect.signature(m.advise).parameters) == ["v", "found"], m.__name__


def test_a_row_of_the_list_is_the_item_it_was_made_from() -> None:
    """Recommendation.of_row (what the page reads a line as) gives back each field of every row of the hand
    ledger's list, batch plans, alternatives and the rules' own items (alternatives None) included."""
    from analytics.advice_common import Recommendation
    from analytics.recommend import recommendations
    from gpuledger.ledger.db import memory_ledger
    from tests.analytics.recommend_ledgers import recommend_ledger
    from tests.analytics.test_recommend import ELASTIC, VIEW

    con = memory_ledger()
    recommend_ledger(con)
    lists = [recommendations(con, filters=VIEW, settings=ELASTIC, problems=p) for p in (True, False)]
    con.close()
    counted = ("id", "overlaps_with", "counted_saving_usd", "counted_usd_per_week")
    for recs in lists:
        assert "larger_batch" in set(recs["kind"])  # a row with a batch plan is among them
        for r in recs.to_dicts():
            again = Recommendation.of_row(r).row(r["kind_label"])
            assert {k: v for k, v in again.items() if k not in counted} == {
                k: v for k, v in r.items() if k not in counted
            }
