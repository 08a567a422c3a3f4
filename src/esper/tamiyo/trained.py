"""The policies trained for a task and shipped with the package (`policy:shapes`), each beside a
JSON record of the command, seeds, date and machine that produced it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TRAINED_DIR = Path(__file__).parent / "trained"


def trained_policy_names() -> tuple[str, ...]:
    return tuple(sorted(path.stem for path in TRAINED_DIR.glob("*.pt")))


def is_policy_name(text: str) -> bool:
    """A name a policy could ship under, never a path: `policy:./x` and `policy:run/round-4.pt`
    always mean files."""
    return not ("/" in text or "\\" in text or text.endswith(".pt"))


def trained_policy_path(name: str) -> Path | None:
    """The shipped policy called `name`, or None when none is."""
    if not is_policy_name(name):
        return None
    path = TRAINED_DIR / f"{name}.pt"
    return path if path.is_file() else None


def trained_policy_record(name: str) -> dict[str, Any]:
    """How the shipped policy `name` was produced (its training command and seeds, the eval that
    measured it)."""
    return json.loads((TRAINED_DIR / f"{name}.json").read_text(encoding="utf-8"))
