"""What conftest gives every test: one torch thread, whatever the test before it set
(`one_torch_thread`), so exact-equality tests of float sums do not depend on the order tests run
in; and no hypothesis deadline, so a loaded machine does not fail a property about values."""

from __future__ import annotations

from pathlib import Path

import torch
from hypothesis import settings

from esper.scripts.cli import main
from test_eval import tiny_shapes  # noqa: F401 (the tiny task in place of shapes)


def test_a_command_sets_the_thread_count_it_was_given(tiny_shapes, workdir: Path) -> None:  # noqa: F811
    assert main(["grow", "--controller", "static", "--max-epochs", "1", "--quiet", "--threads", "2"]) == 0
    assert torch.get_num_threads() == 2


def test_the_next_test_starts_on_one_thread_again() -> None:
    assert torch.get_num_threads() == 1


def test_hypothesis_examples_have_no_deadline() -> None:
    assert settings.default.deadline is None
