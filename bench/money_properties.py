"""The money invariants of tests/analytics/test_money_properties.py over many generated cluster shapes.

    PYTHONPATH=. python bench/money_properties.py [EXAMPLES=200] [SEED]

Prints the examples run, the seconds each took and the first falsifying shape (Hypothesis shrinks it), if any.
"""

from __future__ import annotations

import sys
import time

from hypothesis import HealthCheck, given, seed, settings

from tests.analytics.money_shapes import Shape, shapes
from tests.analytics.test_money_properties import check


def main(examples: int = 200, rng: int = 0) -> None:
    took: list[float] = []

    @seed(rng)
    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(shapes())
    def run(shape: Shape) -> None:
        start = time.perf_counter()
        check(shape)
        took.append(time.perf_counter() - start)

    try:
        run()
    finally:
        mean = sum(took) / len(took) if took else 0.0
        print(f"{len(took)} examples passed, {mean:.2f} s each, {sum(took):.0f} s in all")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
