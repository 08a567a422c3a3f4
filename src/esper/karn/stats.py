"""Paired comparisons over seeds: the form every Esper claim takes.

Two controllers run on the same seeds (same data order, same host initialisation), so the
per-seed differences cancel what the seed alone decides; the claim is their mean with a 95%
confidence interval from Student's t distribution.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass

_T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131)
_T_975 += (2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
"""The 97.5% quantile of Student's t for 1..30 degrees of freedom."""


def t_quantile_975(dof: int) -> float:
    """The two-sided 95% critical value of Student's t with `dof` degrees of freedom (a table to 30,
    then the Cornish-Fisher expansion around the normal quantile, within 0.001 beyond 30)."""
    if dof < 1:
        raise ValueError(f"a t quantile needs at least 1 degree of freedom, got {dof}")
    if dof <= len(_T_975):
        return _T_975[dof - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * dof) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * dof**2)


@dataclass(frozen=True)
class Estimate:
    """A mean over seeds with its spread: sample standard deviation and the 95% interval."""

    mean: float
    std: float
    ci95: tuple[float, float]
    n: int

    def to_json(self) -> dict[str, object]:
        """One seed has no spread: its std and interval are written as null (JSON has no NaN)."""

        def plain(value: float) -> float | None:
            return None if math.isnan(value) else value

        return {
            k: ([plain(x) for x in v] if isinstance(v, tuple) else plain(v) if isinstance(v, float) else v)
            for k, v in asdict(self).items()
        }


def estimate(values: Sequence[float]) -> Estimate:
    """Mean, standard deviation and 95% t interval of `values` (one per seed)."""
    if not values:
        raise ValueError("an estimate needs at least one value")
    mean = statistics.fmean(values)
    if len(values) == 1:
        return Estimate(mean, math.nan, (math.nan, math.nan), 1)
    std = statistics.stdev(values)
    half = t_quantile_975(len(values) - 1) * std / math.sqrt(len(values))
    return Estimate(mean, std, (mean - half, mean + half), len(values))


def paired_difference(a: Sequence[float], b: Sequence[float]) -> Estimate:
    """The mean of a - b over paired seeds, with its interval."""
    if len(a) != len(b):
        raise ValueError(f"paired values need one per seed on both sides, got {len(a)} and {len(b)}")
    return estimate([x - y for x, y in zip(a, b, strict=True)])
