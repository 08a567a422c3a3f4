"""The benchmarks' bad input: one line naming the value and the choices, exit code 2, before any
measurement (these run on the CPU, where the CUDA-only probe would otherwise stop first)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).parents[1] / "benchmarks"


@pytest.mark.parametrize(
    ("script", "argv", "fragments"),
    [
        ("scaling.py", ["--paths", "graphs,bogus"], ["--paths bogus", "graphs,eager"]),
        ("kernel_rate_probe.py", ["--streams", "2,4"], ["'2,4' starts at 2", "start at 1"]),
        ("kernel_rate_probe.py", ["--streams", "1,x"], ["'x'", "at least 1"]),
        ("kernel_rate_probe.py", ["--kernels", "0"], ["--kernels", "'0'"]),
        ("batched_envs_probe.py", ["--envs", "1,x"], ["--envs", "'1,x'", "each at least 1"]),
        ("batched_envs_probe.py", ["--kernels", "0"], ["--kernels", "'0'", "each at least 1"]),
        ("batched_envs_probe.py", ["--arms", "grouped"], ["--arms 'grouped'", "beginning with separate"]),
    ],
)
def test_bad_benchmark_input_is_one_line_with_exit_code_2(script: str, argv: list[str], fragments: list[str]) -> None:
    done = subprocess.run([sys.executable, str(BENCHMARKS / script), *argv], capture_output=True, text=True)
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()[-1]
    assert "Traceback" not in done.stderr and all(f in last for f in fragments), done.stderr
