"""CUDA graphs of an env's training step and of its measurement pass: one launch for hundreds.

Why: a `shapes` host epoch is 100 steps of about a hundred small kernels each, launched from one
Python thread. On an H100 the GPU ran kernels 11% of the wall time, and envs on their own streams
had nothing to overlap: the CPU was the bottleneck. Captured once and replayed, a step costs the
CPU two batch copies and one graph launch, so the envs of a process queue work faster than the GPU
runs it, and their streams overlap.

Blocks: even one launch per step left eight envs bound by the CPU on an H100 (each replay, with
its copies, took about 115 microseconds of one thread against about 420 of GPU time per step, so
separate graphs stopped near 87 host-epochs per second however many envs ran). Once an env's
step has held a whole epoch, `block_steps` consecutive steps are captured as one graph on a
stack of that many batches: one launch and two copies per block. A block replays the kernels of
its steps in order, so it agrees with the single-step graph and the eager path bitwise. It is
captured only in an epoch whose signature held from the start (capturing it costs the CPU about
`block_steps` eager steps); an epoch that changed something trains on single-step graphs.

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

BLOCK_STEPS = 10
"""Steps per block graph: a tenth of the launches, for a capture that costs ten eager steps."""

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
    """One env's training step as a CUDA graph, captured on the env's stream, and (once the step
    has held a whole epoch) a block of `block_steps` steps as one graph."""

    def __init__(self, stream: torch.cuda.Stream | None, block_steps: int = BLOCK_STEPS) -> None:
        self.stream = stream
        self.block_steps = block_steps
        """Steps per block graph; 1: one graph per step, no blocks."""
        self.signature: Signature | None = None
        self.graph: torch.cuda.CUDAGraph | None = None
        self.block: torch.cuda.CUDAGraph | None = None
        self.block_due = False
        """The signature held at this epoch's start: the next full block is captured."""
        self.sums: EpochSums | None = None
        self.eager_steps = 0
        self._x = self._y = self._xs = self._ys = None
        self._learning_rates: list[tuple[dict, torch.Tensor]] = []
        self._kept: list[torch.Tensor] = []
        self.captures = 0
        """Single-step captures so far (a benchmark's count of how often the signature changed)."""
        self.block_captures = 0

    def open_epoch(self, model: MorphogeneticModel, optimizers: list[torch.optim.Optimizer]) -> EpochSums | None:
        """At an epoch's start (on the env's stream): the running sums the graphs write, zeroed,
        when they still hold (their learning rates refilled); None when the step must run eagerly
        and be captured again."""
        if signature(model, optimizers) != self.signature:
            self.signature, self.graph, self.block, self.sums, self.eager_steps = None, None, None, None, 0
            self._learning_rates, self._kept, self._x, self._y, self._xs, self._ys = [], [], None, None, None, None
            self.block_due = False
            return None
        for group, lr in self._learning_rates:
            lr.fill_(group["lr"])
        self.block_due = self.block is None and self.block_steps > 1
        return self.sums

    def steps(self, training: TrainingEpoch, xs: torch.Tensor, ys: torch.Tensor) -> None:
        """Consecutive steps on the batches stacked in `xs`, `ys`: as one block graph when they
        fill a block and the step has held since the epoch began, else one step at a time."""
        if len(xs) != self.block_steps or (self.block is None and not self.block_due):
            for x, y in zip(xs, ys, strict=True):
                self.step(training, x, y)
            return
        if self.block is None:
            self._xs, self._ys = torch.empty_like(xs), torch.empty_like(ys)
            self.block = self._record(training, self._block_work(training))
            self.block_due, self.block_captures = False, self.block_captures + 1
        assert self._xs is not None and self._ys is not None
        _check_shape(xs, self._xs, "block")
        self._xs.copy_(xs, non_blocking=True)
        self._ys.copy_(ys, non_blocking=True)
        self.block.replay()
        for x, y in zip(xs, ys, strict=True):
            training.count(x, y)

    def step(self, training: TrainingEpoch, x: torch.Tensor, y: torch.Tensor) -> None:
        """One step on the env's stream: replayed, run eagerly (warm-up), or captured and replayed."""
        if self.graph is None and self.eager_steps < WARMUP_STEPS:
            training.step(x, y)
            self.eager_steps += 1
            return
        if self.graph is None:
            self._x, self._y = torch.empty_like(x), torch.empty_like(y)
            self._learning_rates = [
                (group, torch.full((), group["lr"], device=x.device))
                for opt in training.optimizers
                for group in opt.param_groups
            ]
            self.graph = self._record(training, lambda: training.device_step(self._x, self._y))
            self.sums = training.sums
            self.signature = signature(training.model, training.optimizers)  # with the state the warm-up made
            self._kept = _kept_tensors(training.model, training.optimizers)
            self.captures += 1
        assert self._x is not None and self._y is not None
        _check_shape(x, self._x, "training")
        self._x.copy_(x, non_blocking=True)
        self._y.copy_(y, non_blocking=True)
        self.graph.replay()
        training.count(x, y)

    def _block_work(self, training: TrainingEpoch) -> Callable[[], None]:
        def block() -> None:
            assert self._xs is not None and self._ys is not None
            for i in range(self.block_steps):
                training.device_step(self._xs[i], self._ys[i])

        return block

    def _record(self, training: TrainingEpoch, work: Callable[[], None]) -> torch.cuda.CUDAGraph:
        """Capture `work` (device steps on fixed input tensors), each optimizer's learning rate
        the device tensor the graphs share for the capture (the fused AdamW reads either; the
        float is put back)."""
        for opt in training.optimizers:
            opt.zero_grad(set_to_none=True)  # the captured backward writes (not adds) each gradient
        rates = [group["lr"] for group, _ in self._learning_rates]
        try:
            for group, lr in self._learning_rates:
                group["lr"], group["capturable"] = lr, True
            graph, _ = capture(work, self.stream)
        finally:
            for (group, _), rate in zip(self._learning_rates, rates, strict=True):
                group["lr"], group["capturable"] = rate, False
        return graph


def _check_shape(x: torch.Tensor, captured: torch.Tensor, which: str) -> None:
    if x.shape != captured.shape:
        shape, on = tuple(x.shape), tuple(captured.shape)
        raise ValueError(f"a batch of shape {shape}; the {which} graph was captured on {on}")


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
