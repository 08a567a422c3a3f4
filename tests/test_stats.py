"""Paired statistics over seeds."""

from __future__ import annotations

import math
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from esper.karn.stats import estimate, paired_difference, t_quantile_975


def test_known_interval() -> None:
    e = estimate([1.0, 2.0, 3.0, 4.0, 5.0])
    assert e.mean == 3.0 and e.std == pytest.approx(math.sqrt(2.5)) and e.n == 5
    half = 2.776 * math.sqrt(2.5) / math.sqrt(5)
    assert e.ci95 == pytest.approx((3.0 - half, 3.0 + half))


def test_t_quantiles_approach_the_normal_one() -> None:
    assert t_quantile_975(1) == 12.706 and t_quantile_975(30) == 2.042
    assert t_quantile_975(31) == pytest.approx(2.040, abs=1e-3)
    assert t_quantile_975(60) == pytest.approx(2.000, abs=1e-3)
    assert t_quantile_975(10_000) == pytest.approx(1.960, abs=1e-3)
    with pytest.raises(ValueError, match="at least 1 degree"):
        t_quantile_975(0)


@given(st.lists(st.floats(-100, 100), min_size=2, max_size=40), st.floats(-10, 10))
def test_pairing_removes_what_both_sides_share(base, shift) -> None:
    """b = a + shift: every paired difference is -shift, so the interval is a point."""
    other = [x + shift for x in base]
    d = paired_difference(base, other)
    assert d.mean == pytest.approx(-shift, abs=1e-9)
    assert d.ci95[0] == pytest.approx(-shift, abs=1e-6) and d.ci95[1] == pytest.approx(-shift, abs=1e-6)
    assert d.std <= 1e-6 * (1 + statistics.pstdev(base))


def test_a_single_seed_has_no_interval_and_mismatched_pairs_are_refused() -> None:
    e = estimate([4.0])
    assert e.mean == 4.0 and math.isnan(e.std) and all(math.isnan(x) for x in e.ci95)
    with pytest.raises(ValueError, match="one per seed"):
        paired_difference([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="at least one value"):
        estimate([])
    assert estimate([1.0, 3.0]).to_json() == {
        "mean": 2.0,
        "std": math.sqrt(2.0),
        "ci95": [2.0 - 12.706, 2.0 + 12.706],
        "n": 2,
    }
    assert e.to_json() == {"mean": 4.0, "std": None, "ci95": [None, None], "n": 1}  # JSON has no NaN
