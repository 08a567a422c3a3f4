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
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

from esper.kasmina import GateInputs, GateRefused, MorphogeneticModel, StageChange, get_blueprint
from esper.leyline import Decision, GateThresholds, InvalidDecision, LifecycleOp, SeedStage
from esper.nissa import Event
from esper.tamiyo.signals import EpochMeasurements, SignalTracker, SlotSignals, TrainingSignals
from esper.tolaria.datasets import TaskData
from esper.tolaria.governor import Governor, GovernorConfig
from esper.tolaria.tasks import TaskSpec
from esper.tolaria.training import TrainStats, ValidationStats, train_epoch, validate

VALIDATION_BATCH_SIZE = 500
ROLLED_BACK = "ROLLED_BACK"
"""Pseudo-stage in a seed's history: the governor restored a snapshot from before this seed."""


@dataclass(frozen=True)
class EnvConfig:
    task: TaskSpec
    device: torch.device
    max_epochs: int
    enabled_slots: tuple[str, ...]
    """Slots a controller may act on, in host order; the others stay dormant."""
    max_seeds: int
    """Most germinations in one episode; 0 trains the host alone."""
    thresholds: GateThresholds = field(default_factory=GateThresholds)
    governor: GovernorConfig = field(default_factory=GovernorConfig)

    def __post_init__(self) -> None:
        if self.max_epochs < 1:
            raise ValueError(f"max_epochs must be >= 1, got {self.max_epochs}")
        if self.max_seeds < 0:
            raise ValueError(f"max_seeds must be >= 0, got {self.max_seeds}")


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
def seeded_init(seed: int) -> Iterator[None]:
    """Build modules from a private CPU RNG stream; the global CPU and CUDA RNG states are
    left as they were (modules are built on the CPU, then moved)."""
    with torch.random.fork_rng(devices=[]):
        torch.random.default_generator.manual_seed(seed)
        yield


class MorphogeneticEnv:
    """One host training run. Deterministic given the `reset` seed: initialisation, shuffling and
    seed construction all draw from the env's own generator."""

    def __init__(self, config: EnvConfig, data: TaskData, emit: Callable[[Event], None] | None = None) -> None:
        self.config = config
        self.data = data.to(config.device)
        self.emit = emit or (lambda event: None)
        self.tracker = SignalTracker()
        self.governor = Governor(config.governor)
        self.episode = -1
        self.model: MorphogeneticModel | None = None
        self._seeds_created = 0  # over the env's lifetime, so seed ids are unique per env

    # ----------------------------------------------------------------- public API
    def reset(self, seed: int, episode: int | None = None) -> TrainingSignals:
        """Build a fresh host and measure it once (epoch 0)."""
        self.episode = self.episode + 1 if episode is None else episode
        self._rng = torch.Generator().manual_seed(seed)
        with seeded_init(self._draw_seed()):
            host = self.config.task.build_host()
        self.model = MorphogeneticModel(host, self.config.thresholds).to(self.config.device)
        for name in self.config.enabled_slots:
            self.model.slot(name)
        self.host_optimizer = self._make_optimizer(self.model.host_parameters(), self.config.task.host_lr)
        self.seed_optimizers: dict[str, torch.optim.Optimizer] = {}
        self.epoch = 0
        self.seeds_germinated = 0
        self.records: list[SeedRecord] = []
        self._live_records: dict[str, SeedRecord] = {}
        self._started = time.perf_counter()
        self.tracker.reset()
        self.governor.reset()
        val = self._validate()
        measured = EpochMeasurements(val.loss, val.accuracy, val.loss, val.accuracy)
        self._last_val, self._last_grads = val, {}
        self._record_healthy(val.loss)
        self.signals = self._observe(measured, val)
        return self.signals

    def step(self, decision: Decision) -> StepResult:
        if self.model is None:
            raise RuntimeError("call reset() before step()")
        if self.epoch >= self.config.max_epochs:
            raise RuntimeError(f"episode is over: {self.config.max_epochs} epochs done; call reset()")
        self._check(decision)
        self.epoch += 1
        changes = self._execute(decision)
        train = self._train_epoch()
        val = self._validate()
        panic = self.governor.judge(train.loss, val.loss)
        if panic is None:
            changes += self._tick(train, val)
            measured = EpochMeasurements(train.loss, train.accuracy, val.loss, val.accuracy)
            self._last_val, self._last_grads = val, train.seed_grad_norm
            self._record_healthy(train.loss)
        else:
            # The step's transitions are undone with the rest of the state, so none is reported;
            # a seed that diverged in the failed epoch is culled so it cannot diverge again.
            self._rollback(panic)
            changes = self._cull_diverged(train)
            val, measured = self._last_val, self._last_measured
        self.signals = self._observe(measured, val)
        done = self.epoch >= self.config.max_epochs or self.governor.gave_up
        if panic is not None and self.governor.gave_up:
            panic += f"; episode ended after {self.governor.consecutive_rollbacks} consecutive rollbacks"
        self._emit_epoch(self.signals, decision)
        return StepResult(self.signals, tuple(changes), panic, done)

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
            if self.seeds_germinated >= self.config.max_seeds:
                raise GateRefused(f"G0: seed budget of {self.config.max_seeds} germinations is spent")
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
            with seeded_init(self._draw_seed()):
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

    def _train_epoch(self) -> TrainStats:
        assert self.model is not None
        factor = cosine_lr_factor(self.epoch, self.config.max_epochs)
        for opt in (self.host_optimizer, *self.seed_optimizers.values()):
            for group in opt.param_groups:
                group["lr"] = group["base_lr"] * factor
        batches = self.data.train_batches(self.config.task.batch_size, self._rng)
        return train_epoch(self.model, batches, [self.host_optimizer, *self.seed_optimizers.values()])

    def _validate(self) -> ValidationStats:
        assert self.model is not None
        return validate(self.model, self.data.val_batches(VALIDATION_BATCH_SIZE), self.model.blended_slots())

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
        """Restore model, lifecycles, optimizers and counters to the last healthy epoch."""
        assert self.model is not None
        snapshot = self.governor.last_snapshot()
        self.model.load_state_dict(snapshot.model)
        self.seeds_germinated = snapshot.counters["seeds_germinated"]
        self.tracker.last_germination_epoch = snapshot.counters["last_germination_epoch"]
        self.host_optimizer.load_state_dict(snapshot.optimizers["host"])
        self.seed_optimizers = {}
        for slot in self.model.ordered_slots():
            if slot.seed is not None:
                name = slot.slot_id.name
                opt = self._make_optimizer(slot.seed.parameters(), self.config.task.seed_lr)
                opt.load_state_dict(snapshot.optimizers[f"seed:{name}"])
                self.seed_optimizers[name] = opt
        self._sync_records_after_rollback()
        self.emit(Event("governor_rollback", self.episode, self.epoch, {"reason": reason}))

    def _cull_diverged(self, train: TrainStats) -> list[tuple[str, StageChange]]:
        """After a rollback: cull the restored live seeds that went non-finite in the failed epoch,
        when the blame is clear (the host's own parameters stayed finite) or the rollbacks repeat.

        A diverging host spreads NaN into every seed's gradients, so a non-finite seed alone does
        not prove the seed was the cause; a second rollback in a row settles it.
        """
        assert self.model is not None
        if not train.host_finite and self.governor.consecutive_rollbacks < 2:
            return []
        changes: list[tuple[str, StageChange]] = []
        for slot in self.model.ordered_slots():
            name = slot.slot_id.name
            grad = train.seed_grad_norm.get(name)
            diverged = not train.seed_finite.get(name, True) or (grad is not None and not math.isfinite(grad))
            if diverged and slot.lifecycle.is_live:
                changes += self._log_changes(name, [slot.cull("governor: seed diverged")])
                self.seed_optimizers.pop(name, None)
        return changes

    def _record_healthy(self, train_loss: float) -> None:
        assert self.model is not None
        counters = {
            "seeds_germinated": self.seeds_germinated,
            "last_germination_epoch": self.tracker.last_germination_epoch,
        }
        self.governor.record_healthy(train_loss, self.model.state_dict(), self._optimizer_states(), counters)

    def _observe(self, measured: EpochMeasurements, val: ValidationStats) -> TrainingSignals:
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
            self.config.max_seeds,
        )

    # ----------------------------------------------------------------- helpers
    def _make_optimizer(self, params, lr: float) -> torch.optim.Optimizer:
        opt = torch.optim.AdamW(params, lr=lr, weight_decay=self.config.task.weight_decay)
        for group in opt.param_groups:
            group["base_lr"] = lr
        return opt

    def _optimizer_states(self) -> dict[str, dict]:
        states = {"host": self.host_optimizer.state_dict()}
        states.update({f"seed:{name}": opt.state_dict() for name, opt in self.seed_optimizers.items()})
        return states

    def _draw_seed(self) -> int:
        return int(torch.randint(0, 2**62, (1,), generator=self._rng))

    def _log_changes(self, slot: str, changes: list[StageChange]) -> list[tuple[str, StageChange]]:
        record = self._live_records.get(slot)
        for change in changes:
            if record is not None:
                record.stage_history.append((self.epoch, change.target.name))
            self.emit(
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

    def _sync_records_after_rollback(self) -> None:
        assert self.model is not None
        by_id = {r.seed_id: r for r in self.records}
        for slot in self.model.ordered_slots():
            name = slot.slot_id.name
            current = self._live_records.get(name)
            restored = by_id.get(slot.seed_id) if slot.seed_id is not None else None
            if current is not None and current is not restored:
                current.stage_history.append((self.epoch, ROLLED_BACK))
                del self._live_records[name]
            if restored is not None:
                if restored.final_stage != slot.stage.name:
                    restored.stage_history.append((self.epoch, slot.stage.name))
                self._live_records[name] = restored

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
