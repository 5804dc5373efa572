"""gpuledger/ledger/sample_time.py: the one home of a sample's interval, end, contiguity and reach."""

from __future__ import annotations

import duckdb
import pytest

from gpuledger.ledger import sample_time as st


def one(sql: str) -> object:
    return duckdb.sql("SELECT " + sql).fetchall()[0][0]


def test_a_samples_end_rounds_half_a_microsecond_up():
    # 1000.0078125 s = 1,000,007,812.5 µs. The copies disagreed here: cost.py rounded (…813), attribution,
    # job signals and the rollup cast to BIGINT (round half to even: …812). Rounding is the cost path's rule.
    end = one(st.sample_end_sql("TIMESTAMP '2025-01-01'", "1000.0078125::DOUBLE"))
    assert str(end) == "2025-01-01 00:16:40.007813"


@pytest.mark.parametrize(("gap", "contiguous"), [(15.0, True), (15.000001, False)])
def test_the_next_sample_continues_a_stretch_within_one_and_a_half_intervals(gap, contiguous):
    assert one(st.contiguous_sql(f"{gap}::DOUBLE", "10.0::DOUBLE")) is contiguous  # 1.5 × 10 s = 15 s


def test_reach_is_one_and_a_half_intervals_rounded_up_plus_a_second():
    # 1.5 × 0.3333333 s = 0.49999995 s → 499,999.95 µs, up to 500,000 µs, + 1 s
    assert (
        str(one(st.reach_sql("TIMESTAMP '2025-01-01'", "0.3333333::DOUBLE"))) == "2025-01-01 00:00:01.500000"
    )


@pytest.mark.parametrize(
    ("gap", "interval"),
    [("NULL", 10.0), ("25.0", 25.0), ("25.5", 10.0), ("100000.0", 10.0)],
)
def test_a_sample_stands_for_its_gap_up_to_two_and_a_half_cadences(gap, interval):
    assert one(st.interval_sql(f"{gap}::DOUBLE", "10.0")) == interval


def test_a_day_is_the_longest_derived_interval():
    # a cadence of 40,000 s would allow 100,000 s gaps; no sample stands for more than 86,400 s
    assert one(st.interval_sql("90000.0::DOUBLE", "40000.0")) == 40000.0
    assert one(st.cadence_sql("x", 1.0) + " FROM (VALUES (90000.0), (90000.0)) t(x)") == 1.0
