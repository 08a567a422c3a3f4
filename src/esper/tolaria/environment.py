"""The single environment: one host's training run on one device, stepped one epoch at a time.

`step(decision)` runs the phases of one RL step in this order:

1. execute the decision on the current state (the same state the controller observed, so a
   decision allowed by that state's masks is always executable; gates read the inputs that were
   measured at the end of the previous step);
2. train one epoch (host optimizer plus one optimizer per seed, all on the episode's cosine
   learning-rate schedule);
3. the measurement pass: BatchNorm statistics recomputed for the model and each ablated arm,
   then validation on the selection split with every blended seed's counterfactual;
4. the governor judges the losses, and on a panic restores the last healthy snapshot;
5. tick every slot's lifecycle with this epoch's gate inputs, then snapshot the healthy state;
6. return the new signals.

`MorphogeneticEnv` coordinates these phases; the parts it composes own the rest: the model's
optimizers and schedule (`ModelOptimizers`), the seed-lifecycle executor (`LifecycleExecutor`:
decisions, ticks, records), the rollback keeper (`RollbackKeeper`: snapshots, restores, culls of
diverged seeds, with the governor) and telemetry (`EnvEvents`). The heuristic controller and the
PPO trainer drive this same object.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from esper.kasmina import MorphogeneticModel
from esper.leyline import BudgetProjections, Decision, GateThresholds, SeedStage, TrainingSignals
from esper.nissa import Event
from esper.tolaria.compute import ComputeBudget, ComputeMeter
from esper.tolaria.datasets import TaskData
from esper.tolaria.events import EnvClock, EnvEvents
from esper.tolaria.governor import Governor, GovernorConfig
from esper.tolaria.grown import grown_payload
from esper.tolaria.passes import DevicePasses
from esper.tolaria.rng import draw_rng_seed, seeded_init
from esper.tolaria.rollback import RollbackKeeper
from esper.tolaria.seeds import LifecycleExecutor, SlotChange
from esper.tolaria.tasks import TaskSpec
from esper.tolaria.tracking import EpochMeasurements, SignalTracker, slot_signals
from esper.tolaria.training import PRECISIONS, TrainingEpoch, TrainStats, ValidationStats


@dataclass(frozen=True)
class EnvConfig:
    task: TaskSpec
    device: torch.device
    max_epochs: int
    enabled_slots: tuple[str, ...]
    """Slots a controller may act on, in host order; the others stay dormant."""
    max_germinations: int
    """Most germinations in one episode; 0 trains the host alone."""
    thresholds: GateThresholds = field(default_factory=GateThresholds)
    governor: GovernorConfig = field(default_factory=GovernorConfig)
    amp: str | None = None
    """Mixed precision for the host's forward and backward ("bf16" or "fp16", CUDA only); fp16
    gives the env its own GradScaler."""
    compile_backend: str | Callable | None = None
    """`torch.compile` backend for the host's training forward ("inductor" for `--compile`);
    None runs eagerly. See `compiled_forward` for what recompiles."""
    end_episode_on_panic: bool = False
    """End the episode at the first governor rollback (PPO: the panic is a terminal with a
    penalty); otherwise the env rolls back and trains on, until the governor gives up."""
    host_width: int | None = None
    """Build the task's host at this width instead of its default (a static host enlarged to a
    grown host's size)."""
    cuda_graphs: bool = True
    """On CUDA, replay the training step and the selection measurement as CUDA graphs
    (`esper.tolaria.graphs`); without fp16 and `compile_backend` only, which run eagerly. No
    effect on the CPU."""
    lr_warmup_epochs: int | None = None
    """Epochs of learning-rate warm-up (`cosine_lr_factor`), for host and seeds alike; None: the
    task's own, fitted to this episode's length (`TaskSpec.warmup_for`)."""

    def __post_init__(self) -> None:
        if not isinstance(self.device, torch.device):
            raise TypeError(
                f"EnvConfig.device must be a torch.device, got {type(self.device).__name__} {self.device!r}; "
                f"pass torch.device({self.device!r})"
            )
        if self.max_epochs < 1:
            raise ValueError(f"max_epochs must be >= 1, got {self.max_epochs}")
        if self.max_germinations < 0:
            raise ValueError(f"max_germinations must be >= 0, got {self.max_germinations}")
        if not 0 <= self.episode_lr_warmup_epochs < self.max_epochs:
            raise ValueError(
                f"host.lr_warmup_epochs must be >= 0 and below the episode's {self.max_epochs} epochs, "
                f"got {self.episode_lr_warmup_epochs}"
            )
        if self.host_width is not None and self.host_width < 1:
            raise ValueError(f"host_width must be >= 1, got {self.host_width}")
        if self.amp is not None and self.amp not in PRECISIONS:
            raise ValueError(f"unknown amp precision {self.amp!r}; choose from: {' '.join(PRECISIONS)}")

    @property
    def episode_lr_warmup_epochs(self) -> int:
        """The warm-up this episode runs: `lr_warmup_epochs`, or the task's fitted to `max_epochs`."""
        if self.lr_warmup_epochs is not None:
            return self.lr_warmup_epochs
        return self.task.warmup_for(self.max_epochs)


@dataclass(frozen=True)
class StepResult:
    signals: TrainingSignals
    changes: tuple[SlotChange, ...]
    """(slot, change) for every stage change of the step, in the order they happened."""
    panic: str | None
    """The governor's reason when this step was rolled back, else None."""
    done: bool


@dataclass
class _OpenStep:
    """A step between `begin_step` and `end_step`."""

    decision: Decision
    changes: list[SlotChange]
    blended: set[str]
    training: TrainingEpoch
    epoch_before: int
    compute_before: tuple[int, int, int]


def compiled_forward(model: MorphogeneticModel, backend: str | Callable | None) -> Callable[..., torch.Tensor]:
    """The training forward, compiled with `backend` (or the model itself when None).

    Dynamo guards on the module structure and on each slot's Python state (stage, alpha), with
    parameters as graph inputs, so:
    - steady-state epochs (no lifecycle change: dormant, training-stage or fossilized slots with
      fixed alpha) reuse the compiled graph, also across episodes of the same host;
    - germinate, cull, fossilize, each stage change and each blending epoch (alpha is a new
      constant) compile a new graph. Past dynamo's recompile limit a frame runs eagerly.
    """
    if backend is None:
        return model
    return torch.compile(model, backend=backend)


class MorphogeneticEnv:
    """One host training run. Deterministic given the `reset` RNG seed, from two generators of the
    env's own: one for the data order (shuffling, augmentation), one for initialisation (the host,
    then each new seed). Growing a seed therefore never changes the batches, so a grown run and a
    static run of the same RNG seed see the same data and start from the same host."""

    def __init__(
        self,
        config: EnvConfig,
        data: TaskData,
        emit: Callable[[Event], None] | None = None,
        first_seed_number: int = 1,
    ) -> None:
        """`first_seed_number` numbers this env's first seed (a resumed run continues the
        numbering of the seeds its finished episodes grew)."""
        self.config = config
        graphs = config.cuda_graphs and config.amp != "fp16" and config.compile_backend is None
        self.passes = DevicePasses(config.device, data, config.amp, graphs)
        self.compute = ComputeMeter(self.passes.data, config.device)
        self.budget = ComputeBudget(self.compute, config.thresholds.compute_budget)
        self.clock = EnvClock()
        self.events = EnvEvents(emit or (lambda event: None), self.clock)
        self.tracker = SignalTracker()
        self.governor = Governor(config.governor)
        self.model: MorphogeneticModel | None = None
        self.scaler: torch.amp.GradScaler | None = None
        """This env's own fp16 loss scaler, new each episode: never shared, never inherited."""
        self._seed_numbers = itertools.count(first_seed_number)  # over the env's lifetime: unique seed ids
        self._open: _OpenStep | None = None

    # ----------------------------------------------------------------- public API
    def reset(self, rng_seed: int, episode: int | None = None) -> TrainingSignals:
        """Build a fresh host and its parts, and measure it once (epoch 0)."""
        self.clock.episode = self.clock.episode + 1 if episode is None else episode
        self.clock.epoch = 0
        root = torch.Generator().manual_seed(rng_seed)
        init_rng = torch.Generator().manual_seed(draw_rng_seed(root))
        self._data_rng = torch.Generator().manual_seed(draw_rng_seed(root))
        c = self.config
        with seeded_init(draw_rng_seed(init_rng)):
            host = c.task.build_host(c.host_width)
        self.model = MorphogeneticModel(host, c.thresholds).to(c.device)
        for name in c.enabled_slots:
            self.model.slot(name)
        self._forward = compiled_forward(self.model, c.compile_backend)
        self.scaler = torch.amp.GradScaler(c.device.type) if c.amp == "fp16" else None
        self.optimizers = self.model.configure_optimizers(c.task.host_lr, c.task.seed_lr, c.task.weight_decay)
        self.seeds = LifecycleExecutor(
            self.model, self.optimizers, self.events, c.enabled_slots, c.max_germinations, init_rng, self._seed_numbers
        )
        self.governor.reset()
        self.keeper = RollbackKeeper(self.governor, self.model, self.optimizers, self.seeds, self.events)
        self.tracker.reset()
        self.events.pending.clear()
        self._open, self._ended_by_panic, self._started = None, False, time.perf_counter()
        self.passes.cancel_launched_measurement()
        self.compute.start_episode(self.model, c.max_epochs, self.passes.data.epoch_sample_count(c.task.batch_size))
        val = self._measure()
        self._last_val, self._last_grads = val, {}
        self.keeper.keep(None)
        self.signals = self._assemble_signals(EpochMeasurements(val.loss, val.accuracy, val.loss, val.accuracy), val)
        return self.signals

    def step(self, decision: Decision) -> StepResult:
        """One whole RL step on the env's own data order: `begin_step`, one epoch of
        `train_batch`, `end_step`."""
        self.begin_step(decision)
        try:
            for x, y in self.passes.data.train_batches(self.config.task.batch_size, self._data_rng):
                self.train_batch(x, y)
        except BaseException:
            self.abort_step()
            raise
        return self.end_step()

    def begin_step(self, decision: Decision) -> list[SlotChange]:
        """Check and execute `decision`, then open the epoch's training. A refused decision
        raises, and leaves the env as it was."""
        if self.model is None:
            raise RuntimeError("call reset() before step()")
        if self.episode_over:
            raise RuntimeError(f"episode is over after {self.clock.epoch} epochs; call reset()")
        if self._open is not None:
            raise RuntimeError("begin_step() called twice without end_step()")
        self.seeds.check(decision)
        self.budget.check(self.model, decision, self.signals, self.config.max_epochs - self.clock.epoch)
        self.passes.join()
        epoch_before, compute_before = self.clock.epoch, self.compute.tally()
        self.clock.epoch += 1
        try:
            changes = self.seeds.execute(decision, self._last_val)
            self.optimizers.set_epoch(
                self.clock.epoch, self.config.max_epochs, self.config.episode_lr_warmup_epochs, self.seeds.seed_epochs()
            )
            # its accumulators are zeroed on the stream that updates them
            training = self.passes.open_epoch(self.model, self.optimizers.all(), self.scaler, self._forward)
        except BaseException:
            self._undo(epoch_before, compute_before)
            raise
        blended = set(self.model.blended_slots())
        self._open = _OpenStep(decision, changes, blended, training, epoch_before, compute_before)
        return changes

    def train_batch(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """One optimisation step of the open epoch, on the env's device and stream (no sync)."""
        if self._open is None:
            raise RuntimeError("train_batch() outside begin_step()/end_step()")
        self.passes.train_step(self._open.training, x, y)

    def launch_measurement(self) -> None:
        """Queue the open epoch's measurement on the device without waiting for it (a CUDA graph
        replay, when one holds): the envs of a process queue theirs before any `end_step` waits."""
        if self._open is not None:
            self.passes.launch_measurement(self.model)

    def end_step(self) -> StepResult:
        """Validate, let the governor judge, tick every lifecycle, and return the new signals."""
        if self._open is None:
            raise RuntimeError("end_step() without begin_step()")
        step = self._open
        try:
            with self.passes.on_stream():  # the epoch's one sync and validation, on the env's stream
                train = step.training.finish()
            self.compute.add_training_epoch(self.model, step.training.n_samples)
            val = self._measure(join=False)
            panic = self.governor.judge(train.loss, val.loss)
            if panic is None:
                changes = step.changes + self.seeds.tick(train, val)
                val, measured = self._after_healthy_epoch(changes[len(step.changes) :], train, val)
            else:
                changes, val, measured = self._after_panic(step, train, panic)
        except BaseException:
            self.abort_step()
            raise
        self._open = None
        self.events.flush()
        self.signals = self._assemble_signals(measured, val, healthy=panic is None)
        if panic is not None and self.governor.gave_up:
            panic += f"; episode ended after {self.governor.consecutive_rollbacks} consecutive rollbacks"
        self.events.epoch(self.signals, step.decision)
        return StepResult(self.signals, tuple(changes), panic, self.episode_over)

    def abort_step(self) -> None:
        """Undo a step that raised half-way: nothing half-done survives an exception (out of
        memory, a bad batch, Ctrl-C)."""
        if self._open is not None:
            self._undo(self._open.epoch_before, self._open.compute_before)

    def evaluate_test(self) -> ValidationStats:
        """Loss and accuracy of the model on the test split, for reports only. Only at the end of
        an episode: nothing the controller, the gates or the reward read can depend on it."""
        if self.model is None or not self.episode_over:
            raise RuntimeError("the test split is read only once an episode is over")
        return self.passes.measure_test(self.model)

    def grown_network(self, record: dict[str, Any]) -> dict[str, Any]:
        """The episode's network as a grown-network file's contents (`esper.tolaria.grown`), with
        `record` (what the episode measured) beside it. Only once the episode is over."""
        if self.model is None or not self.episode_over:
            raise RuntimeError("a grown network is saved only once its episode is over")
        stats = self.passes.inference_batchnorm_stats(self.model)
        c = self.config
        width = c.task.host_width if c.host_width is None else c.host_width
        return grown_payload(self.model, c.task.name, width, stats, c.amp, record)

    @property
    def episode_over(self) -> bool:
        return self.clock.epoch >= self.config.max_epochs or self.governor.gave_up or self._ended_by_panic

    def episode_seconds(self) -> float:
        return time.perf_counter() - self._started

    # ----------------------------------------------------------------- phases
    def _after_healthy_epoch(
        self, tick_changes: list[SlotChange], train: TrainStats, val: ValidationStats
    ) -> tuple[ValidationStats, EpochMeasurements]:
        measured = EpochMeasurements(train.loss, train.accuracy, val.loss, val.accuracy)
        if any(c.target is SeedStage.CULLED and slot in val.ablated_accuracy for slot, c in tick_changes):
            val, measured = self._revalidate(measured)  # a gate removed a seed the measurement held
        self._last_val, self._last_grads = val, train.seed_grad_norm
        self.keeper.keep(train.loss)
        return val, measured

    def _after_panic(
        self, step: _OpenStep, train: TrainStats, panic: str
    ) -> tuple[list[SlotChange], ValidationStats, EpochMeasurements]:
        """The step's transitions are undone with the rest of the state, so none is reported; a
        blended seed that diverged is culled, and the kept snapshot learns the cull."""
        self.keeper.roll_back(panic)
        changes = self.keeper.cull_diverged(train, step.blended)
        val, measured = self._last_val, self._last_measured
        if changes:
            val, measured = self._revalidate(measured)
            self.keeper.amend()
        if self.config.end_episode_on_panic:
            self._ended_by_panic = True
        return changes, val, measured

    def _budget_projections(self) -> BudgetProjections | None:
        c = self.config
        possible = self.seeds.germinated < c.max_germinations
        return self.budget.projections(self.model, c.enabled_slots, c.max_epochs - self.clock.epoch, possible)

    def _undo(self, epoch_before: int, compute_before: tuple[int, int, int]) -> None:
        self.passes.cancel_launched_measurement()
        self.compute.rewind(compute_before)
        self.events.discard()
        self.keeper.restore()
        self.clock.epoch = epoch_before
        self._open = None

    def _revalidate(self, measured: EpochMeasurements) -> tuple[ValidationStats, EpochMeasurements]:
        """Measure again after a cull (by a gate, or by the governor after a rollback) removed a
        seed that shaped the output: the accuracy reported (and rewarded) must be that of the
        model left, not of the one that still held the seed."""
        val = self._measure()
        self._last_val = val
        return val, dataclasses.replace(measured, val_loss=val.loss, val_accuracy=val.accuracy)

    def _measure(self, join: bool = True) -> ValidationStats:
        """The selection measurement on the env's stream (after the device's current stream's
        work, when `join`), its compute counted."""
        if join:
            self.passes.join()
        with self.passes.on_stream():
            val = self.passes.measure(self.model)
        self.compute.add_measurement(self.model, tuple(val.ablated_accuracy))
        return dataclasses.replace(val, keep_reading=self.config.thresholds.keep_reading)

    def _assemble_signals(
        self, measured: EpochMeasurements, val: ValidationStats, healthy: bool = True
    ) -> TrainingSignals:
        assert self.model is not None
        self._last_measured = measured
        projections = self._budget_projections()
        affordable = None if projections is None else projections.affordable()
        return self.tracker.update(
            self.clock.epoch,
            self.config.max_epochs,
            measured,
            slot_signals(self.model, self.config.enabled_slots, val, self._last_grads, affordable),
            self.model.host_param_count(),
            self.seeds.germinated,
            self.config.max_germinations,
            self.seeds.last_germination_epoch,
            healthy=healthy,
            extra_compute_share=self.compute.extra_train_share,
            compute_budget_used=self.budget.used(),
            budget_projections=projections,
        )
