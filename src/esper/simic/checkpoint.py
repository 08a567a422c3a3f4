"""Checkpoints: written atomically, read with `weights_only=True`, checked before use.

A checkpoint is a plain dict of tensors, numbers, strings, lists and dicts (everything
`torch.load(weights_only=True)` accepts, so loading one never runs pickled code).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch

CHECKPOINT_FORMAT = 2
"""2: the reward is the dense form of the stated objective (issue 8); a format-1 checkpoint's
reward settings no longer exist, and its policy learned from inflated counterfactuals."""


class CheckpointError(ValueError):
    """A checkpoint is missing, unreadable, corrupt, or does not fit the current configuration."""


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    """Write to a temporary file in the same folder, fsync, then rename over `path`: a crash
    leaves either the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save({"format": CHECKPOINT_FORMAT, **payload}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Read a checkpoint onto the CPU; any problem is a `CheckpointError` naming the file."""
    if not path.is_file():
        raise CheckpointError(f"checkpoint {str(path)!r} does not exist or is not a file")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for a damaged file
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"checkpoint {str(path)!r} is corrupt or unreadable: {first_line}") from exc
    if not isinstance(payload, dict) or "format" not in payload:
        raise CheckpointError(f"checkpoint {str(path)!r} is not an Esper checkpoint (format {CHECKPOINT_FORMAT})")
    if payload["format"] != CHECKPOINT_FORMAT:
        raise CheckpointError(
            f"checkpoint {str(path)!r} has format {payload['format']!r}, this Esper reads format {CHECKPOINT_FORMAT} "
            "(written by an older version: train a new one)"
        )
    return payload


def check_compatible(path: Path, saved: dict[str, Any], current: dict[str, Any]) -> None:
    """The saved observation layout and action space must equal the current ones."""
    for key in current:
        if saved.get(key) != current[key]:
            raise CheckpointError(
                f"checkpoint {str(path)!r} does not fit this run's {key.replace('_', ' ')}: "
                + _difference(saved.get(key), current[key])
            )


def _difference(saved: object, current: object) -> str:
    """Where two values first differ: for lists, the first differing entry and the lengths."""
    if isinstance(saved, list) and isinstance(current, list):
        for i, (a, b) in enumerate(zip(saved, current, strict=False)):
            if a != b:
                return f"entry {i} is {a!r} in the checkpoint and {b!r} here ({len(saved)} vs {len(current)} entries)"
        return f"the checkpoint has {len(saved)} entries, this run {len(current)}"
    return f"saved {_short(saved)}, this run has {_short(current)}"


def _short(value: object, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
