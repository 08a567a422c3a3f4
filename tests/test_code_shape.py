"""The source stays readable in small pieces: no function over 60 lines, no class over 250, and
no two modules of the package share a file name (each name says one role)."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

SRC = Path(__file__).parents[1] / "src" / "esper"
MODULES = sorted(SRC.rglob("*.py"))


def test_no_function_over_60_lines_and_no_class_over_250() -> None:
    too_long = []
    for path in MODULES:
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                continue
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and length > 60:
                too_long.append(f"{path.relative_to(SRC)}:{node.name} ({length} lines)")
            if isinstance(node, ast.ClassDef) and length > 250:
                too_long.append(f"{path.relative_to(SRC)}:class {node.name} ({length} lines)")
    assert not too_long, too_long


def test_no_two_modules_share_a_file_name() -> None:
    names = Counter(path.name for path in MODULES if path.name not in ("__init__.py", "__main__.py"))
    assert not [name for name, count in names.items() if count > 1]
