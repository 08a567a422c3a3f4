"""The single environment: one host's training run on one device, stepped one epoch at a time.

`step(decision)` runs the phases of one RL step in this order:

1. execute the decision on the current state (the same state the controller observed, so a
   decision allowed by that state's masks is always executable; gates read the inputs that were
   measured at the end of the previous step);
2. train one epoch (host optimizer plus one optimizer per seed, all on the episode's cosine
   learning-rate schedule);
3. one fused validation pass with every blended seed's counterfactual;
4. the governor judges the losses, and on a panic restores the last healthy snapshot;
5. tick every slot's lifecycle with this epoch's gate inputs, then snapshot the healthy state;
6. return the new signals.

The heuristic controller and the PPO trainer drive this same object.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

from esper.kasmina import GateInputs, GateRefused, MorphogeneticModel, StageChange, get_blueprint
from esper.leyline import (
    Decision,
    GateThresholds,
    InvalidDecision,
    LifecycleOp,
    SeedStage,
    SlotSignals,
    TrainingSignals,
)
from esper.nissa import Event
from esper.tolaria.datasets import TaskData
from esper.tolaria.governor import Governor, GovernorConfig, Snapshot
from esper.tolaria.signals import EpochMeasurements, SignalTracker
from esper.tolaria.tasks import TaskSpec
from esper.tolaria.training import PRECISIONS, TrainingEpoch, TrainStats, ValidationStats, validate

VALIDATION_BATCH_SIZE = 500


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

    def __post_init__(self) -> None:
        if self.max_epochs < 1:
            raise ValueError(f"max_epochs must be >= 1, got {self.max_epochs}")
        if self.max_germinations < 0:
            raise ValueError(f"max_germinations must be >= 0, got {self.max_germinations}")
        if self.host_width is not None and self.host_width < 1:
            raise ValueError(f"host_width must be >= 1, got {self.host_width}")
        if self.amp is not None and self.amp not in PRECISIONS:
            raise ValueError(f"unknown amp precision {self.amp!r}; choose from: {' '.join(PRECISIONS)}")


@dataclass
class SeedRecord:
    """The life of one seed, for reports."""

    seed_id: str
    slot: str
    blueprint: str
    schedule: str
    param_count: int
    stage_history: list[tuple[int, str]]

    @property
    def final_stage(self) -> str:
        return self.stage_history[-1][1]

    def to_json(self) -> dict[str, object]:
        return {
            "seed_id": self.seed_id,
            "blueprint": self.blueprint,
            "schedule": self.schedule,
            "param_count": self.param_count,
            "stage_history": [list(p) for p in self.stage_history],
            "final_stage": self.final_stage,
        }


@dataclass
class _OpenStep:
    """A step between `begin_step` and `end_step`."""

    decision: Decision
    changes: list[tuple[str, StageChange]]
    blended: set[str]
    training: TrainingEpoch


@dataclass(frozen=True)
class StepResult:
    signals: TrainingSignals
    changes: tuple[tuple[str, StageChange], ...]
    """(slot, change) for every stage change of the step, in the order they happened."""
    panic: str | None
    """The governor's reason when this step was rolled back, else None."""
    done: bool


def cosine_lr_factor(epoch: int, max_epochs: int) -> float:
    """Learning-rate multiplier for 1-based `epoch`: 1 at the first epoch, decaying on a half cosine.

    Every optimizer of the env (host and seeds alike) follows the episode's clock, so a seed
    germinated late trains at the same, lower rate as the host around it, and the final
    accuracy of an episode is not the noise of a large last step.
    """
    return 0.5 * (1.0 + math.cos(math.pi * (epoch - 1) / max_epochs))


@contextlib.contextmanager
def seeded_init(rng_seed: int) -> Iterator[None]:
    """Build modules from a private CPU RNG stream; the global CPU and CUDA RNG states are
    left as they were (modules are built on the CPU, then moved)."""
    with torch.random.fork_rng(devices=[]):
        torch.random.default_generator.manual_seed(rng_seed)
        yield


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


def _draw_rng_seed(generator: torch.Generator) -> int:
    return int(torch.randint(0, 2**62, (1,), generator=generator))


class MorphogeneticEnv:
    """One host training run. Deterministic given the `reset` RNG seed, from two generators of the
    env's own: one for the data order (shuffling, augmentation), one for initialisation (the host,
    then each new seed). Growing a seed therefore never changes the batches, so a grown run and a
    static run of the same RNG seed see the same data and start from the same host."""

    def __init__(self, config: EnvConfig, data: TaskData, emit: Callable[[Event], None] | None = None) -> None:
        self.config = config
        self.data = data.to(config.device)
        self.emit = emit or (lambda event: None)
        self.tracker = SignalTracker()
        self.governor = Governor(config.governor)
        self.episode = -1
        self.model: MorphogeneticModel | None = None
        self.stream = torch.cuda.Stream(config.device) if config.device.type == "cuda" else None
        """This env's own CUDA stream: its training, validation and counterfactuals run there."""
        self.scaler: torch.amp.GradScaler | None = None
        """This env's own loss scaler (fp16 only), new each episode: never shared with another
        env or device, and an episode never inherits an earlier one's loss scale."""
        self._seeds_created = 0  # over the env's lifetime, so seed ids are unique per env

    # ----------------------------------------------------------------- public API
    def reset(self, rng_seed: int, episode: int | None = None) -> TrainingSignals:
        """Build a fresh host and measure it once (epoch 0)."""
        self.episode = self.episode + 1 if episode is None else episode
        root = torch.Generator().manual_seed(rng_seed)
        self._init_rng = torch.Generator().manual_seed(_draw_rng_seed(root))
        self._data_rng = torch.Generator().manual_seed(_draw_rng_seed(root))
        with seeded_init(_draw_rng_seed(self._init_rng)):
            host = self.config.task.build_host(self.config.host_width)
        self.model = MorphogeneticModel(host, self.config.thresholds).to(self.config.device)
        for name in self.config.enabled_slots:
            self.model.slot(name)
        self._forward = compiled_forward(self.model, self.config.compile_backend)
        self.scaler = torch.amp.GradScaler(self.config.device.type) if self.config.amp == "fp16" else None
        self.host_optimizer = self._make_optimizer(self.model.host_parameters(), self.config.task.host_lr)
        self.seed_optimizers: dict[str, torch.optim.Optimizer] = {}
        self.epoch = 0
        self.seeds_germinated = 0
        self.records: list[SeedRecord] = []
        self._live_records: dict[str, SeedRecord] = {}
        self._started = time.perf_counter()
        self.tracker.reset()
        self.governor.reset()
        self._join_device_stream()
        with self._on_stream():
            val = self._validate()
        measured = EpochMeasurements(val.loss, val.accuracy, val.loss, val.accuracy)
        self._last_val, self._last_grads = val, {}
        self._pending_events: list[Event] = []
        self._open: _OpenStep | None = None
        self._epoch_before_step: int | None = None
        self._ended_by_panic = False
        self.governor.record_healthy(None, self._snapshot())
        self.signals = self._assemble_signals(measured, val)
        return self.signals

    def step(self, decision: Decision) -> StepResult:
        """One whole RL step on the env's own data order: `begin_step`, one epoch of
        `train_batch`, `end_step`."""
        self.begin_step(decision)
        try:
            for x, y in self.data.train_batches(self.config.task.batch_size, self._data_rng):
                self.train_batch(x, y)
        except BaseException:
            self.abort_step()
            raise
        return self.end_step()

    def begin_step(self, decision: Decision) -> list[tuple[str, StageChange]]:
        """Check and execute `decision`, then open the epoch's training. A refused decision
        raises before anything changes."""
        if self.model is None:
            raise RuntimeError("call reset() before step()")
        if self.episode_over:
            raise RuntimeError(f"episode is over after {self.epoch} epochs; call reset()")
        if self._open is not None:
            raise RuntimeError("begin_step() called twice without end_step()")
        self._check(decision)
        self._join_device_stream()
        self._epoch_before_step = self.epoch
        self.epoch += 1
        try:
            changes = self._execute(decision)
            factor = cosine_lr_factor(self.epoch, self.config.max_epochs)
            optimizers = [self.host_optimizer, *self.seed_optimizers.values()]
            for opt in optimizers:
                for group in opt.param_groups:
                    group["lr"] = group["base_lr"] * factor
            blended = set(self.model.blended_slots())
            with self._on_stream():  # its accumulators are zeroed on the stream that updates them
                training = TrainingEpoch(self.model, optimizers, self.config.amp, self.scaler, self._forward)
            self._open = _OpenStep(decision, changes, blended, training)
        except BaseException:
            self.abort_step()
            raise
        return changes

    def train_batch(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """One optimisation step of the open epoch (no host-device sync).

        On CUDA the step runs on the env's own stream: the batch is copied there without
        blocking, once the producing stream's work is done, and recorded on the env's stream so
        its memory is not reused while the env still reads it."""
        if self._open is None:
            raise RuntimeError("train_batch() outside begin_step()/end_step()")
        if self.stream is None:
            self._open.training.step(x.to(self.config.device), y.to(self.config.device))
            return
        producer = torch.cuda.current_stream(x.device) if x.is_cuda else None
        with torch.cuda.stream(self.stream):
            if producer is not None:
                self.stream.wait_stream(producer)
            x = x.to(self.config.device, non_blocking=True)
            y = y.to(self.config.device, non_blocking=True)
            x.record_stream(self.stream)
            y.record_stream(self.stream)
            self._open.training.step(x, y)

    def end_step(self) -> StepResult:
        """Validate, let the governor judge, tick every lifecycle, and return the new signals."""
        assert self.model is not None
        if self._open is None:
            raise RuntimeError("end_step() without begin_step()")
        step = self._open
        try:
            with self._on_stream():  # the epoch's one sync and validation, on the env's stream
                train = step.training.finish()
                val = self._validate()
            panic = self.governor.judge(train.loss, val.loss)
            changes = step.changes
            if panic is None:
                tick_changes = self._tick(train, val)
                changes += tick_changes
                measured = EpochMeasurements(train.loss, train.accuracy, val.loss, val.accuracy)
                if any(c.target is SeedStage.CULLED and slot in val.ablated_accuracy for slot, c in tick_changes):
                    val, measured = self._revalidate(measured)  # a gate removed a seed the measurement held
                self._last_val, self._last_grads = val, train.seed_grad_norm
                self.governor.record_healthy(train.loss, self._snapshot())
            else:
                # The step's transitions are undone with the rest of the state, so none is reported;
                # a blended seed that diverged is culled, and the kept snapshot learns the cull.
                self._rollback(panic)
                changes = self._cull_diverged(train, step.blended)
                val, measured = self._last_val, self._last_measured
                if changes:
                    val, measured = self._revalidate(measured)
                    self.governor.amend_snapshot(self._snapshot())
                if self.config.end_episode_on_panic:
                    self._ended_by_panic = True
        except BaseException:
            self.abort_step()
            raise
        self._open, self._epoch_before_step = None, None
        self._flush_events()
        self.signals = self._assemble_signals(measured, val, healthy=panic is None)
        if panic is not None and self.governor.gave_up:
            panic += f"; episode ended after {self.governor.consecutive_rollbacks} consecutive rollbacks"
        self._emit_epoch(self.signals, step.decision)
        return StepResult(self.signals, tuple(changes), panic, self.episode_over)

    def abort_step(self) -> None:
        """Undo a step that raised half-way: nothing half-done survives an exception (out of
        memory, a bad batch, Ctrl-C)."""
        if self._epoch_before_step is None:
            return
        self._pending_events.clear()
        self._restore(self.governor.last_snapshot())
        self.epoch = self._epoch_before_step
        self._open, self._epoch_before_step = None, None

    @property
    def episode_over(self) -> bool:
        return self.epoch >= self.config.max_epochs or self.governor.gave_up or self._ended_by_panic

    def evaluate_test(self) -> ValidationStats:
        """Loss and accuracy of the model on the test split, for reports only. Only at the end of
        an episode: nothing the controller, the gates or the reward read can depend on it."""
        assert self.model is not None
        if not self.episode_over:
            raise RuntimeError("the test split is read only once an episode is over")
        self._join_device_stream()
        with self._on_stream():
            return validate(
                self.model,
                self.data.test_batches(VALIDATION_BATCH_SIZE),
                (),
                self.config.amp,
                self.data.calibration_batches(VALIDATION_BATCH_SIZE),
            )

    def _join_device_stream(self) -> None:
        """Snapshots, restores and allocations run on the device's current stream: the env's
        stream must see them complete before it trains or measures."""
        if self.stream is not None:
            self.stream.wait_stream(torch.cuda.current_stream(self.config.device))

    def _on_stream(self) -> contextlib.AbstractContextManager:
        return torch.cuda.stream(self.stream) if self.stream is not None else contextlib.nullcontext()

    def episode_seconds(self) -> float:
        return time.perf_counter() - self._started

    # ----------------------------------------------------------------- phases
    def _check(self, decision: Decision) -> None:
        """Refuse a decision that cannot be executed, before anything changes."""
        assert self.model is not None
        if decision.op is LifecycleOp.WAIT:
            return
        name = decision.slot
        if name not in self.config.enabled_slots:
            enabled = " ".join(self.config.enabled_slots)
            raise InvalidDecision(f"{decision!r}: slot {name!r} is not enabled (enabled: {enabled})")
        slot = self.model.slot(name)
        if decision.op is LifecycleOp.GERMINATE:
            assert decision.blueprint is not None
            get_blueprint(self.model.topology, decision.blueprint)
            if self.seeds_germinated >= self.config.max_germinations:
                raise GateRefused(f"G0: seed budget of {self.config.max_germinations} germinations is spent")
            result = slot.lifecycle.gate_germinate()
        elif decision.op is LifecycleOp.FOSSILIZE:
            result = slot.lifecycle.gate_fossilize(self._last_val.contribution(name))
        else:
            result = slot.lifecycle.gate_cull()
        if not result.passed:
            raise GateRefused(f"{decision!r}: {result.gate}: {result.reason}")

    def _execute(self, decision: Decision) -> list[tuple[str, StageChange]]:
        """Carry out a checked decision on the state the controller saw."""
        assert self.model is not None
        if decision.op is LifecycleOp.WAIT:
            return []
        name = decision.slot
        assert name is not None  # Decision guarantees a slot for every op but WAIT
        slot = self.model.slot(name)
        if decision.op is LifecycleOp.GERMINATE:
            assert decision.blueprint is not None
            self._seeds_created += 1
            seed_id = f"seed-{self._seeds_created}"
            with seeded_init(_draw_rng_seed(self._init_rng)):
                slot_changes = slot.germinate(decision.blueprint, seed_id, decision.schedule)
            self.seeds_germinated += 1
            self.tracker.last_germination_epoch = self.epoch
            record = SeedRecord(
                seed_id, name, decision.blueprint, decision.schedule.name.lower(), slot.param_count(), []
            )
            self.records.append(record)
            self._live_records[name] = record
            if slot.seed is not None:
                self.seed_optimizers[name] = self._make_optimizer(slot.seed.parameters(), self.config.task.seed_lr)
            return self._log_changes(name, slot_changes)
        if decision.op is LifecycleOp.FOSSILIZE:
            return self._log_changes(name, [slot.fossilize(self._last_val.contribution(name))])
        change = slot.cull(decision.reason or "culled by controller")
        self.seed_optimizers.pop(name, None)
        return self._log_changes(name, [change])

    def _validate(self) -> ValidationStats:
        """The selection split, with every blended seed's counterfactual; BatchNorm statistics
        recomputed on the training split's calibration images first (`validate`)."""
        assert self.model is not None
        return validate(
            self.model,
            self.data.val_batches(VALIDATION_BATCH_SIZE),
            self.model.blended_slots(),
            self.config.amp,
            self.data.calibration_batches(VALIDATION_BATCH_SIZE),
        )

    def _revalidate(self, measured: EpochMeasurements) -> tuple[ValidationStats, EpochMeasurements]:
        """Measure again after a cull (by a gate, or by the governor after a rollback) removed a
        seed that shaped the output: the accuracy reported (and rewarded) must be that of the
        model left, not of the one that still held the seed."""
        self._join_device_stream()
        with self._on_stream():
            val = self._validate()
        self._last_val = val
        return val, dataclasses.replace(measured, val_loss=val.loss, val_accuracy=val.accuracy)

    def _tick(self, train: TrainStats, val: ValidationStats) -> list[tuple[str, StageChange]]:
        assert self.model is not None
        changes: list[tuple[str, StageChange]] = []
        for slot in self.model.ordered_slots():
            name = slot.slot_id.name
            grad = train.seed_grad_norm.get(name)
            inputs = GateInputs(
                contribution=val.contribution(name),
                grad_norm=grad,
                finite=train.seed_finite.get(name, True) and (grad is None or math.isfinite(grad)),
            )
            slot_changes = slot.tick(inputs)
            if slot.seed is None:
                self.seed_optimizers.pop(name, None)
            changes += self._log_changes(name, slot_changes)
        return changes

    def _rollback(self, reason: str) -> None:
        """Return to the last healthy epoch, and say in one event what was undone."""
        undone = [e.data for e in self._pending_events]
        self._pending_events.clear()
        self.governor.count_rollback()
        self._restore(self.governor.last_snapshot())
        self.emit(Event("governor_rollback", self.episode, self.epoch, {"reason": reason, "undone": undone}))

    def _restore(self, snapshot: Snapshot) -> None:
        """Put model, lifecycles, optimizers, counters and seed records back as they were."""
        assert self.model is not None
        self.model.load_state_dict(snapshot.model)
        self.host_optimizer.load_state_dict(snapshot.optimizers["host"])
        self.seed_optimizers = {}
        for slot in self.model.ordered_slots():
            if slot.seed is not None:
                name = slot.slot_id.name
                opt = self._make_optimizer(slot.seed.parameters(), self.config.task.seed_lr)
                opt.load_state_dict(snapshot.optimizers[f"seed:{name}"])
                self.seed_optimizers[name] = opt
        counters = snapshot.counters
        self.seeds_germinated = counters["seeds_germinated"]
        self.tracker.last_germination_epoch = counters["last_germination_epoch"]
        del self.records[counters["records"] :]
        for record in self.records:
            del record.stage_history[counters["history_lengths"][record.seed_id] :]
        by_id = {r.seed_id: r for r in self.records}
        self._live_records = {slot: by_id[seed_id] for slot, seed_id in counters["live_records"].items()}

    def _snapshot(self) -> Snapshot:
        """The env's whole state as of now (the governor clones it)."""
        assert self.model is not None
        counters = {
            "seeds_germinated": self.seeds_germinated,
            "last_germination_epoch": self.tracker.last_germination_epoch,
            "records": len(self.records),
            "history_lengths": {r.seed_id: len(r.stage_history) for r in self.records},
            "live_records": {slot: r.seed_id for slot, r in self._live_records.items()},
        }
        return Snapshot(self.model.state_dict(), self._optimizer_states(), counters)

    def _cull_diverged(self, train: TrainStats, blended: set[str]) -> list[tuple[str, StageChange]]:
        """After a rollback, cull the seed to blame, if one can be named.

        Only a seed that was blended in the failed epoch can have caused it (a seed in TRAINING
        cannot change the model's output). The suspects are those whose parameters or gradients
        went non-finite. A diverging host spreads NaN into every seed's gradients, so when the
        host went non-finite too, the first rollback blames nobody; if it happens again, the most
        recently germinated suspect is culled, one per rollback.
        """
        assert self.model is not None
        suspects = []
        for slot in self.model.ordered_slots():
            name = slot.slot_id.name
            grad = train.seed_grad_norm.get(name)
            diverged = not train.seed_finite.get(name, True) or (grad is not None and not math.isfinite(grad))
            if diverged and name in blended and slot.lifecycle.is_live:
                suspects.append(slot)
        if not train.host_finite:
            if self.governor.consecutive_rollbacks < 2 or not suspects:
                return []
            order = {r.seed_id: i for i, r in enumerate(self.records)}
            suspects = [max(suspects, key=lambda s: order[s.seed_id])]
        changes: list[tuple[str, StageChange]] = []
        for slot in suspects:
            name = slot.slot_id.name
            changes += self._log_changes(name, [slot.cull("governor: seed diverged")])
            self.seed_optimizers.pop(name, None)
        return changes

    def _assemble_signals(
        self, measured: EpochMeasurements, val: ValidationStats, healthy: bool = True
    ) -> TrainingSignals:
        assert self.model is not None
        self._last_measured = measured
        slots = tuple(
            SlotSignals(
                name=s.slot_id.name,
                index=s.slot_id.index,
                enabled=s.slot_id.name in self.config.enabled_slots,
                stage=s.stage,
                epochs_in_stage=s.lifecycle.epochs_in_stage,
                alpha=s.alpha if s.seed is not None else 0.0,
                blueprint=s.blueprint,
                seed_id=s.seed_id,
                contribution=val.contribution(s.slot_id.name) if s.seed is not None else None,
                grad_norm=self._last_grads.get(s.slot_id.name) if s.seed is not None else None,
                param_count=s.param_count(),
            )
            for s in self.model.ordered_slots()
        )
        return self.tracker.update(
            self.epoch,
            self.config.max_epochs,
            measured,
            slots,
            self.model.host_param_count(),
            self.seeds_germinated,
            self.config.max_germinations,
            healthy=healthy,
        )

    # ----------------------------------------------------------------- helpers
    def _make_optimizer(self, params, lr: float) -> torch.optim.Optimizer:
        # Fused on CUDA: one kernel per step, and GradScaler steps it without a host-device sync.
        fused = self.config.device.type == "cuda"
        opt = torch.optim.AdamW(params, lr=lr, weight_decay=self.config.task.weight_decay, fused=fused)
        for group in opt.param_groups:
            group["base_lr"] = lr
        return opt

    def _optimizer_states(self) -> dict[str, dict]:
        states = {"host": self.host_optimizer.state_dict()}
        states.update({f"seed:{name}": opt.state_dict() for name, opt in self.seed_optimizers.items()})
        return states

    def _log_changes(self, slot: str, changes: list[StageChange]) -> list[tuple[str, StageChange]]:
        record = self._live_records.get(slot)
        for change in changes:
            if record is not None:
                record.stage_history.append((self.epoch, change.target.name))
            self._pending_events.append(
                Event(
                    "stage_change",
                    self.episode,
                    self.epoch,
                    {
                        "slot": slot,
                        "seed_id": record.seed_id if record else None,
                        "blueprint": record.blueprint if record else None,
                        "source": change.source.name,
                        "target": change.target.name,
                        "reason": change.reason,
                    },
                )
            )
            if change.target is SeedStage.CULLED:
                self._live_records.pop(slot, None)
                record = None
        return [(slot, c) for c in changes]

    def _flush_events(self) -> None:
        """Stage changes are emitted once their epoch is judged healthy (or they survive a rollback)."""
        for event in self._pending_events:
            self.emit(event)
        self._pending_events.clear()

    def _emit_epoch(self, signals: TrainingSignals, decision: Decision) -> None:
        self.emit(
            Event(
                "epoch",
                self.episode,
                signals.epoch,
                {
                    "decision": repr(decision),
                    "train_loss": signals.train_loss,
                    "train_accuracy": signals.train_accuracy,
                    "val_loss": signals.val_loss,
                    "val_accuracy": signals.val_accuracy,
                    "plateau_epochs": signals.plateau_epochs,
                    "host_params": signals.host_params,
                    "seed_params": signals.seed_params,
                    "slots": [
                        {
                            "slot": s.name,
                            "stage": s.stage.name,
                            "alpha": s.alpha,
                            "blueprint": s.blueprint,
                            "seed_id": s.seed_id,
                            "contribution": s.contribution,
                            "grad_norm": s.grad_norm,
                        }
                        for s in signals.slots
                    ],
                },
            )
        )
