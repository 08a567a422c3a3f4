"""Karn: run reports. Builds the run directory's `summary.json` from episode outcomes, reads a
run directory back (`rundir`, and an eval's record: `evaluation`) for the HTML report
(`figures`, `html`) and the live view (`live_view`), writes files atomically so a crash never
leaves a half-written report, and compares runs paired over seeds."""

from esper.karn.files import write_atomic, write_json_atomic, write_torch_atomic
from esper.karn.stats import Estimate, estimate, paired_difference
from esper.karn.summary import episode_summary

__all__ = [
    "Estimate",
    "episode_summary",
    "estimate",
    "paired_difference",
    "write_atomic",
    "write_json_atomic",
    "write_torch_atomic",
]
