"""CUDA graphs of an env's training step and of its measurement pass: one launch for hundreds.

Why: a `shapes` host epoch is 100 steps of about a hundred small kernels each, launched from one
Python thread. On an H100 the GPU ran kernels 11% of the wall time, and envs on their own streams
had nothing to overlap: the CPU was the bottleneck. Captured once and replayed, a step costs the
CPU two batch copies and one graph launch, so the envs of a process queue work faster than the GPU
runs it, and their streams overlap.

What a graph bakes in is what re-captures it. It reads and writes fixed tensors (parameters,
BatchNorm buffers, optimizer moments and step counts, gradients, the epoch's running sums) and
it replays the Python choices made while it was captured (which seeds exist, each slot's stage
and alpha, the loss and optimizer constants). `signature` lists both; a graph is replayed while
the signature holds and captured again after a change: a germination, each blending epoch's new
alpha, a fossilization, a cull, a merge, a rollback that rebuilt seeds or optimizers. The graph
keeps a reference to every tensor of its signature, so no new tensor can take an old one's
address while it lives. Learning rates are read from device tensors the graph owns, refilled each
epoch, so the cosine schedule re-captures nothing.

After each change the first `WARMUP_STEPS` steps run eagerly (creating new seeds' optimizer
state and their kernels' workspaces), then the step is captured and replayed from then on. A
measurement is captured the second time its signature is seen (the first runs eagerly). A replay
runs the kernels of the eager path on the same inputs, so results agree bitwise where the eager
path is itself deterministic (`tests/cuda/test_cuda_graphs.py`).

Not graphed (they run eagerly): fp16's GradScaler (its step reads back whether gradients
overflowed), a `torch.compile`d forward (inductor's "reduce-overhead" mode graphs it), and
the test split, measured once per episode.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

import torch

from esper.kasmina import MorphogeneticModel
from esper.kasmina.slot import SeedSlot
from esper.leyline import SeedStage
from esper.tolaria.training import EpochSums, TrainingEpoch

WARMUP_STEPS = 2
"""Eager steps after each change of the signature, before the step is captured."""

Signature = tuple[Hashable, ...]
T = TypeVar("T")


def signature(model: MorphogeneticModel, optimizers: Sequence[torch.optim.Optimizer] = ()) -> Signature:
    """What a graph of `model` (and `optimizers`) depends on: every tensor it reads or writes, by
    identity and address, and the Python state its forward and optimizer steps branch on."""
    parts: list[Hashable] = []
    for name, tensor in itertools.chain(model.named_parameters(), model.named_buffers()):
        parts.append((name, id(tensor), tensor.data_ptr(), tuple(tensor.shape), tensor.requires_grad))
    for slot in model.ordered_slots():
        parts.append((slot.slot_id.name, *slot_forward_state(slot)))
    for opt in optimizers:
        parts.append(id(opt))
        for group in opt.param_groups:
            constants = tuple((k, v) for k, v in sorted(group.items()) if k not in ("params", "lr", "base_lr"))
            parts.append((tuple(id(p) for p in group["params"]), repr(constants)))
        for param, state in opt.state.items():
            parts.append((id(param), tuple((k, id(v), v.data_ptr()) for k, v in state.items() if torch.is_tensor(v))))
    return tuple(parts)


def slot_forward_state(slot: SeedSlot) -> tuple[Hashable, ...]:
    """What a slot's forward branches on: whether it holds a seed, of which kind, and how the seed
    joins (in isolation while it trains, else at its alpha). An empty slot's stage (embargoed,
    resetting) and a kept seed's (probationary or fossilized, both at alpha 1) change nothing."""
    if slot.seed is None:
        return ("empty",)
    joins = "isolated" if slot.stage is SeedStage.TRAINING else slot.alpha
    return ("seed", slot.holds_width_seed, joins)


def _kept_tensors(model: MorphogeneticModel, optimizers: Sequence[torch.optim.Optimizer]) -> list[torch.Tensor]:
    """Every tensor a signature names, held while its graph lives."""
    kept = [*model.parameters(), *model.buffers()]
    for opt in optimizers:
        kept += [v for state in opt.state.values() for v in state.values() if torch.is_tensor(v)]
    return kept


class TrainingGraph:
    """One env's training step as a CUDA graph, captured on the env's stream."""

    def __init__(self, stream: torch.cuda.Stream | None) -> None:
        self.stream = stream
        self.signature: Signature | None = None
        self.graph: torch.cuda.CUDAGraph | None = None
        self.sums: EpochSums | None = None
        self.eager_steps = 0
        self._x = self._y = None
        self._learning_rates: list[tuple[dict, torch.Tensor]] = []
        self._kept: list[torch.Tensor] = []
        self.captures = 0
        """Captures so far (a benchmark's count of how often the signature changed)."""

    def open_epoch(self, model: MorphogeneticModel, optimizers: list[torch.optim.Optimizer]) -> EpochSums | None:
        """At an epoch's start (on the env's stream): the running sums the graph writes, zeroed,
        when it still holds (its learning rates refilled); None when the step must run eagerly
        and be captured again."""
        if signature(model, optimizers) != self.signature:
            self.signature, self.graph, self.sums, self.eager_steps = None, None, None, 0
            self._learning_rates, self._kept, self._x, self._y = [], [], None, None
            return None
        for group, lr in self._learning_rates:
            lr.fill_(group["lr"])
        return self.sums

    def step(self, training: TrainingEpoch, x: torch.Tensor, y: torch.Tensor) -> None:
        """One step on the env's stream: replayed, run eagerly (warm-up), or captured and replayed."""
        if self.graph is None and self.eager_steps < WARMUP_STEPS:
            training.step(x, y)
            self.eager_steps += 1
            return
        if self.graph is None:
            self._capture(training, x, y)
        assert self._x is not None and self._y is not None and self.graph is not None
        if x.shape != self._x.shape or y.shape != self._y.shape:
            captured = tuple(self._x.shape)
            raise ValueError(f"a batch of shape {tuple(x.shape)}; the training graph was captured on {captured}")
        self._x.copy_(x, non_blocking=True)
        self._y.copy_(y, non_blocking=True)
        self.graph.replay()
        training.count(x, y)

    def _capture(self, training: TrainingEpoch, x: torch.Tensor, y: torch.Tensor) -> None:
        """Record `training.device_step` on fixed input tensors, each optimizer's learning rate a
        device tensor for the capture (the fused AdamW reads either; the float is put back)."""
        for opt in training.optimizers:
            opt.zero_grad(set_to_none=True)  # the captured backward writes (not adds) each gradient
        self._x, self._y = torch.empty_like(x), torch.empty_like(y)
        groups = [group for opt in training.optimizers for group in opt.param_groups]
        rates = [group["lr"] for group in groups]
        self._learning_rates = [(g, torch.full((), g["lr"], device=x.device)) for g in groups]
        try:
            for group, lr in self._learning_rates:
                group["lr"], group["capturable"] = lr, True
            graph, _ = capture(lambda: training.device_step(self._x, self._y), self.stream)
        finally:
            for group, rate in zip(groups, rates, strict=True):
                group["lr"], group["capturable"] = rate, False
        self.graph, self.sums = graph, training.sums
        self.signature = signature(training.model, training.optimizers)  # with the state the warm-up made
        self._kept = _kept_tensors(training.model, training.optimizers)
        self.captures += 1


def capture(work: Callable[[], T], stream: torch.cuda.Stream) -> tuple[torch.cuda.CUDAGraph, T]:
    """A graph of the device work `work()` issues on `stream` (the env's own), and what it
    returned (its tensors are the graph's outputs, rewritten by each replay). Captured, not run.
    Unlike `torch.cuda.graph`, it neither synchronises the device nor empties the allocator's
    cache: the other envs' streams run on while one env captures."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        graph.capture_begin()
        try:
            out = work()
        except Exception as exc:
            with contextlib.suppress(Exception):  # ending a broken capture fails too: keep the cause
                graph.capture_end()
            raise RuntimeError(f"capturing a CUDA graph failed ({exc}); --no-cuda-graphs runs eagerly") from exc
        graph.capture_end()
    return graph, out


class MeasurementGraph:
    """One env's selection measurement (calibration, validation, counterfactual arms) as a CUDA
    graph, captured the second time its signature is seen."""

    def __init__(self, stream: torch.cuda.Stream | None) -> None:
        self.stream = stream
        self.seen: Signature | None = None
        self.graph: torch.cuda.CUDAGraph | None = None
        self.result: tuple[torch.Tensor, int] | None = None
        self.launched = False
        """Replayed by `launch` for the next `run` to read."""
        self._kept: list[torch.Tensor] = []
        self.captures = 0

    def launch(self, model: MorphogeneticModel, ablate: tuple[str, ...]) -> None:
        """Replay now, if the graph holds (no sync), for the next `run` to read: the envs of a
        process queue their measurements together before any of them waits for its result."""
        if self.graph is not None and (*signature(model), ablate) == self.seen:
            self.graph.replay()
            self.launched = True

    def cancel(self) -> None:
        """Forget a launch: the step it measured was undone (its weights restored in place, which
        the signature cannot see), so the next `run` must replay."""
        self.launched = False

    def run(
        self, model: MorphogeneticModel, ablate: tuple[str, ...], measure: Callable[[], tuple[torch.Tensor, int]]
    ) -> tuple[torch.Tensor, int]:
        """`measure()`'s sums and count: replayed, captured, or (first sight) run eagerly."""
        now = (*signature(model), ablate)
        launched, self.launched = self.launched, False
        if now != self.seen:
            self.seen, self.graph, self.result, self._kept = now, None, None, []
            return measure()
        if self.graph is None:
            self.graph, self.result = capture(measure, self.stream)
            self._kept = _kept_tensors(model, ())
            self.captures += 1
            launched = False
        if not launched:
            self.graph.replay()
        model.eval()  # as the eager pass leaves it
        assert self.result is not None
        return self.result
