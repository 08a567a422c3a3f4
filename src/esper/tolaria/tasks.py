"""Tasks: a dataset, the host that learns it, and the hyperparameters that go with them."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from esper.kasmina import CNNHost, Host, Topology, TransformerHost
from esper.leyline import SlotId
from esper.leyline.slots import slot_names_for
from esper.tolaria.datasets import (
    DatasetError,
    TaskData,
    TokenData,
    load_cifar10,
    load_shapes,
    load_text_corpus,
    pydoc_topics_bytes,
    split_tokens,
)

DATA_DIR_ENV = "ESPER_DATA_DIR"
"""Environment variable read for a real dataset's location when `--data-dir` is not given."""

SHAPES_DATA_SEED = 0
"""The shapes dataset is one fixed dataset; `--seed` varies initialisation and shuffling, not data."""

TEXT_BLOCK_SIZE = 64


@dataclass(frozen=True)
class TaskSpec:
    name: str
    description: str
    topology: Topology
    make_host: Callable[[int], Host]
    """The task's host at a given width (CNN channels of the first block, transformer d_model)."""
    host_width: int
    """The default width."""
    n_slots: int
    """Insertion points of the host (one after each CNN block, one per transformer group): its
    slots are known without building it."""
    load_data: Callable[[Path | None], TaskData]
    needs_data_dir: bool
    batch_size: int
    host_lr: float
    seed_lr: float
    weight_decay: float
    max_epochs: int
    """Default episode length (host epochs)."""
    samples_per_epoch: int | None = None
    """Training images (or text windows) per epoch in place of the dataset's own count (None:
    the dataset's): a cheaper training variant of the task, with the same selection and test splits."""
    lr_warmup_epochs: int = 0
    """Epochs of linear learning-rate warm-up before the cosine decay (`cosine_lr_factor`), in an
    episode of the task's `max_epochs`; an episode of another length fits it (`warmup_for`)."""

    @property
    def slot_ids(self) -> tuple[SlotId, ...]:
        """The host's slots, in host order, as the host itself declares them."""
        return tuple(SlotId(i, name) for i, name in enumerate(slot_names_for(self.n_slots)))

    @property
    def slot_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.slot_ids)

    def build_host(self, width: int | None = None) -> Host:
        """The task's host, at its default width unless `width` is given (a static host enlarged
        to the size of a grown one, for a fair comparison)."""
        return self.make_host(self.host_width if width is None else width)

    def host_params(self, width: int) -> int:
        """Parameters of the task's host at `width`."""
        return sum(p.numel() for p in self.make_host(width).parameters())

    def width_for_params(self, target_params: int) -> int:
        """The host width whose parameter count is closest to `target_params` (at least the default)."""
        best, best_gap = self.host_width, math.inf
        width = self.host_width
        while True:
            params = self.host_params(width)
            gap = abs(params - target_params)
            if gap < best_gap:
                best, best_gap = width, gap
            if params >= target_params:
                return best
            width += 1

    def warmup_for(self, episode_epochs: int) -> int:
        """The task's warm-up in an episode of `episode_epochs`: the same share of the schedule,
        rounded down (shapes: 3 of its 40 epochs, 1 of 20, none below 14).

        A short run (`--max-epochs 2`, a test, a PPO round of short episodes) is not refused
        for a warm-up longer than itself that it never asked for, and a warm-up given explicitly
        (`--host.lr_warmup_epochs`, `EnvConfig.lr_warmup_epochs`) is taken as given."""
        return self.lr_warmup_epochs * episode_epochs // self.max_epochs

    def resolve_data_dir(self, flag: str | None) -> Path | None:
        """`--data-dir`, else $ESPER_DATA_DIR, for tasks that read from disk; a clear error otherwise."""
        if not self.needs_data_dir:
            if flag is not None:
                raise DatasetError(f"task {self.name!r} is embedded and takes no --data-dir (got {flag!r})")
            return None
        raw = flag if flag is not None else os.environ.get(DATA_DIR_ENV)
        if not raw:
            raise DatasetError(f"task {self.name!r} reads its data from disk: pass --data-dir or set {DATA_DIR_ENV}")
        return Path(raw).expanduser()


def _pydoc_data(_: Path | None) -> TaskData:
    train, val, test = split_tokens(pydoc_topics_bytes(), val_fraction=0.1, test_fraction=0.1)
    return TokenData(train, val, test, TEXT_BLOCK_SIZE, train_windows_per_epoch=1024, max_eval_windows=256)


def _textfile_data(path: Path | None) -> TaskData:
    assert path is not None  # resolve_data_dir guarantees it for this task
    train, val, test = load_text_corpus(path, TEXT_BLOCK_SIZE, val_fraction=0.1, test_fraction=0.1)
    return TokenData(train, val, test, TEXT_BLOCK_SIZE, train_windows_per_epoch=8192, max_eval_windows=1024)


TASKS: dict[str, TaskSpec] = {
    spec.name: spec
    for spec in (
        TaskSpec(
            name="shapes",
            description="embedded procedural 16x16 images of ten shapes, drawn per epoch from a 50k pool (default)",
            topology=Topology.CNN,
            make_host=lambda width: CNNHost(in_channels=3, num_classes=10, width=width, depth=3),
            host_width=8,
            n_slots=3,
            load_data=lambda _: load_shapes(
                SHAPES_DATA_SEED, n_train=50_000, n_val=2000, n_test=10_000, image_size=16, samples_per_epoch=10_000
            ),
            needs_data_dir=False,
            batch_size=100,
            host_lr=3e-3,
            seed_lr=3e-3,
            weight_decay=1e-4,
            max_epochs=40,
            lr_warmup_epochs=3,  # since 2026-11-28 (experiments/lr-warmup)
        ),
        TaskSpec(
            name="pydoc",
            description="embedded byte-level language modelling on CPython's pydoc_data.topics text",
            topology=Topology.TRANSFORMER,
            make_host=lambda width: TransformerHost(
                vocab_size=256, block_size=TEXT_BLOCK_SIZE, d_model=width, n_layer=3, n_slots=3
            ),
            host_width=64,
            n_slots=3,
            load_data=_pydoc_data,
            needs_data_dir=False,
            batch_size=64,
            host_lr=3e-3,
            seed_lr=3e-3,
            weight_decay=1e-4,
            max_epochs=30,
        ),
        TaskSpec(
            name="cifar10",
            description="CIFAR-10 from the python-pickle folder (cifar-10-batches-py)",
            topology=Topology.CNN,
            make_host=lambda width: CNNHost(in_channels=3, num_classes=10, width=width, depth=3),
            host_width=32,
            n_slots=3,
            load_data=lambda path: load_cifar10(path),  # type: ignore[arg-type]
            needs_data_dir=True,
            batch_size=128,
            host_lr=2e-3,
            seed_lr=2e-3,
            weight_decay=5e-4,
            max_epochs=25,
        ),
        TaskSpec(
            name="textfile",
            description="byte-level language modelling on TinyStories-style .txt files",
            topology=Topology.TRANSFORMER,
            make_host=lambda width: TransformerHost(
                vocab_size=256, block_size=TEXT_BLOCK_SIZE, d_model=width, n_layer=6, n_slots=3
            ),
            host_width=128,
            n_slots=3,
            load_data=_textfile_data,
            needs_data_dir=True,
            batch_size=64,
            host_lr=1e-3,
            seed_lr=1e-3,
            weight_decay=1e-4,
            max_epochs=20,
        ),
    )
}

DEFAULT_TASK = "shapes"


def get_task(name: str) -> TaskSpec:
    """A built-in task by name, or your own: `package.module:function` names a function of no
    arguments that returns a `TaskSpec` (a host you wrote, declaring its segments and slots, and
    your data). Every command, an eval's worker processes and `esper.load_grown` find it by that
    name, so the module must be importable wherever they run."""
    if name in TASKS:
        return TASKS[name]
    if ":" in name:
        return user_task(name)
    raise ValueError(f"unknown task {name!r}; choose from: {' '.join(TASKS)}, or package.module:function")


@functools.cache
def user_task(name: str) -> TaskSpec:
    """The task `module:function` returns, named `name` (the one word runs record); built once
    per process. Every failure is a `ValueError` in one line that names what is wrong."""
    module_name, _, function_name = name.partition(":")
    if not module_name or not function_name.isidentifier():
        raise ValueError(f"task {name!r}: write your own task as package.module:function")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` does: a module in the folder you run from
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"task {name!r}: cannot import {module_name!r} ({exc}); is it on PYTHONPATH?") from None
    make = getattr(module, function_name, None)
    if not callable(make):
        raise ValueError(f"task {name!r}: {module_name!r} has no function {function_name!r}")
    spec = make()
    if not isinstance(spec, TaskSpec):
        raise ValueError(f"task {name!r}: {function_name}() returned {type(spec).__name__}, not an esper TaskSpec")
    host = spec.build_host()
    if len(host.slot_ids) != spec.n_slots or host.topology != spec.topology:
        raise ValueError(
            f"task {name!r}: its host declares {len(host.slot_ids)} slots ({host.topology.name}), "
            f"the TaskSpec {spec.n_slots} ({spec.topology.name})"
        )
    return dataclasses.replace(spec, name=name)
