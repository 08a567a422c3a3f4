"""Records name the CPU beside torch's kernel capability: two "AVX512" machines rounded a held
episode apart, so `cpu_capability` alone cannot say whether two records can repeat each other."""

from __future__ import annotations

from pathlib import Path

from esper.runs.common import cpu_identity, torch_build

CPUINFO = """processor\t: 0
model name\t: Example CPU @ 2.0GHz
flags\t\t: fpu sse avx2 avx512f avx512_bf16 amx_tile
processor\t: 1
model name\t: Example CPU @ 2.0GHz
flags\t\t: fpu sse avx2 avx512f avx512_bf16 amx_tile
"""


def test_the_cpu_is_its_model_and_the_extensions_that_change_kernels(tmp_path: Path) -> None:
    path = tmp_path / "cpuinfo"
    path.write_text(CPUINFO)
    assert cpu_identity(path) == "Example CPU @ 2.0GHz [avx2 avx512f avx512_bf16 amx_tile]"
    path.write_text(CPUINFO.replace(" avx512f avx512_bf16 amx_tile", ""))
    assert cpu_identity(path) == "Example CPU @ 2.0GHz [avx2]"


def test_without_cpuinfo_the_platform_names_the_processor(tmp_path: Path) -> None:
    assert cpu_identity(tmp_path / "missing")


def test_every_record_carries_the_cpu() -> None:
    assert torch_build()["cpu"] == cpu_identity()
