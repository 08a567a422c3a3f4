"""Karn: run reports. Builds the run directory's `summary.json` from episode outcomes and writes
files atomically so a crash never leaves a half-written report."""

from esper.karn.report import episode_summary, write_json_atomic

__all__ = ["episode_summary", "write_json_atomic"]
