"""Device parsing and validation: every device is a `torch.device`, checked once at start-up."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import torch

CUBLAS_WORKSPACE = ":4096:8"
"""cuBLAS's workspace setting for repeatable results (NVIDIA's cuBLAS notes): without it, torch's
deterministic mode refuses every cuBLAS matrix product."""


class DeviceError(ValueError):
    """A requested device that does not exist here; the message names what does."""


def available_devices() -> list[str]:
    found = ["cpu"]
    if torch.cuda.is_available():
        found += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        found.append("mps")
    return found


def resolve_device(spec: str) -> torch.device:
    """Parse and validate `spec` ('cpu', 'cuda', 'cuda:1', 'mps'). Bare 'cuda' means cuda:0."""
    available = available_devices()
    try:
        device = torch.device(spec)
    except (RuntimeError, ValueError):
        raise DeviceError(f"malformed device {spec!r}; available devices: {' '.join(available)}") from None
    if device.type == "cpu":
        return torch.device("cpu")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(
                f"device {spec!r} asked for CUDA, which is not available here; available devices: {' '.join(available)}"
            )
        index = 0 if device.index is None else device.index
        if index >= torch.cuda.device_count():
            raise DeviceError(
                f"device {spec!r} does not exist: this machine has {torch.cuda.device_count()} CUDA device(s); "
                f"available devices: {' '.join(available)}"
            )
        return torch.device("cuda", index)
    if device.type == "mps" and "mps" in available:
        return device
    raise DeviceError(f"device {spec!r} is not available; available devices: {' '.join(available)}")


def use_deterministic_kernels() -> None:
    """`--deterministic`: this process runs torch's deterministic kernels (cuDNN's and cuBLAS's
    among them), so a CUDA run repeats bit for bit on one GPU and torch build. By default a CUDA
    run does not repeat: cuDNN's fastest backward convolutions add in an unordered way. An op
    with no deterministic kernel raises torch's error rather than run unrepeatably. Called before
    the process's first CUDA matrix product, since cuBLAS reads its workspace setting then."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False


@contextmanager
def kernel_settings_restored() -> Iterator[None]:
    """Torch's deterministic-kernel settings as they were once the block ends: a run called from
    Python with `deterministic=True` leaves the caller's process as it found it (the CLI's process
    ends with its run). cuBLAS's workspace variable stays set: cuBLAS read it at the first matrix
    product, and it only sizes a workspace."""
    saved = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.benchmark,
    )
    try:
        yield
    finally:
        enabled, warn_only, cudnn_deterministic, cudnn_benchmark = saved
        torch.use_deterministic_algorithms(enabled, warn_only=warn_only)
        torch.backends.cudnn.deterministic = cudnn_deterministic
        torch.backends.cudnn.benchmark = cudnn_benchmark
