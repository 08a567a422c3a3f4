"""Atomic file writes: the one way Esper writes a report, a summary or a checkpoint."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: Path, write: Callable[[IO[bytes]], None]) -> None:
    """`write` fills a temporary file beside `path`, which is fsynced and renamed over it, and the
    folder is fsynced after the rename: readers and a crash see the old file or the new one,
    never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_current_umask())  # mkstemp makes 0600; a report is for everyone
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def write_json_atomic(path: Path, obj: Any) -> None:
    """`obj` as indented JSON (NaN and infinity refused), written atomically."""
    text = json.dumps(obj, indent=2, allow_nan=False) + "\n"
    write_atomic(path, lambda f: f.write(text.encode("utf-8")))


def write_torch_atomic(path: Path, obj: Any) -> None:
    """`obj` through `torch.save` (a checkpoint, a grown network), written atomically."""
    import torch  # only the files that hold tensors need it

    write_atomic(path, lambda f: torch.save(obj, f))
