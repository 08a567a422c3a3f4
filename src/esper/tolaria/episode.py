"""Running one episode of an env with a controller."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from esper.kasmina import StageChange
from esper.leyline import Decision, TrainingSignals
from esper.nissa import Event
from esper.tolaria.environment import MorphogeneticEnv
from esper.tolaria.seeds import SeedRecord


class Controller(Protocol):
    def reset(self) -> None: ...
    def decide(self, signals: TrainingSignals) -> Decision: ...
    def record_step(self, decision: Decision, changes: Sequence[tuple[str, StageChange]]) -> None: ...


@dataclass(frozen=True)
class EpisodeOutcome:
    episode: int
    rng_seed: int
    final_val_accuracy: float
    """On the selection split, which every decision of the episode read."""
    final_val_loss: float
    final_test_accuracy: float
    """On the test split, read once after the last step: no decision saw it."""
    final_test_loss: float
    host_params: int
    seed_params: int
    records: tuple[SeedRecord, ...]
    rollbacks: int
    seconds: float
    train_gflops: float
    """Forward and backward of host and seeds, epoch by epoch as trained (`esper.tolaria.compute`)."""
    measure_gflops: float
    """The calibration and selection passes with their counterfactual arms, counted apart."""

    @classmethod
    def from_json(cls, data: dict) -> EpisodeOutcome:
        """The outcome `to_json` wrote (a resumed heuristic run reads its finished episodes back)."""
        return cls(
            episode=int(data["episode"]),
            rng_seed=int(data["rng_seed"]),
            final_val_accuracy=float(data["final_val_accuracy"]),
            final_val_loss=float(data["final_val_loss"]),
            final_test_accuracy=float(data["final_test_accuracy"]),
            final_test_loss=float(data["final_test_loss"]),
            host_params=int(data["host_params"]),
            seed_params=int(data["seed_params"]),
            records=tuple(SeedRecord.from_json(r) for r in data["seeds"]),
            rollbacks=int(data["rollbacks"]),
            seconds=float(data["seconds"]),
            train_gflops=float(data["train_gflops"]),
            measure_gflops=float(data["measure_gflops"]),
        )

    def to_json(self) -> dict[str, object]:
        return {
            "episode": self.episode,
            "rng_seed": self.rng_seed,
            "final_val_accuracy": self.final_val_accuracy,
            "final_val_loss": self.final_val_loss,
            "final_test_accuracy": self.final_test_accuracy,
            "final_test_loss": self.final_test_loss,
            "host_params": self.host_params,
            "seed_params": self.seed_params,
            "rollbacks": self.rollbacks,
            "seconds": self.seconds,
            "train_gflops": self.train_gflops,
            "measure_gflops": self.measure_gflops,
            "seeds": [r.to_json() for r in self.records],
        }


def run_episode(
    env: MorphogeneticEnv,
    controller: Controller,
    rng_seed: int,
    episode: int,
    on_step: Callable[[], None] | None = None,
) -> EpisodeOutcome:
    """One whole episode; `on_step` is called after each step (a progress bar)."""
    signals = env.reset(rng_seed, episode)
    controller.reset()
    done = False
    while not done:
        decision = controller.decide(signals)
        result = env.step(decision)
        controller.record_step(decision, result.changes)
        signals, done = result.signals, result.done
        if on_step is not None:
            on_step()
    test = env.evaluate_test()
    outcome = EpisodeOutcome(
        episode=episode,
        rng_seed=rng_seed,
        final_val_accuracy=signals.val_accuracy,
        final_val_loss=signals.val_loss,
        final_test_accuracy=test.accuracy,
        final_test_loss=test.loss,
        host_params=signals.host_params,
        seed_params=signals.seed_params,
        records=tuple(env.seeds.records),
        rollbacks=env.governor.rollbacks,
        seconds=env.episode_seconds(),
        train_gflops=env.compute.train_gflops,
        measure_gflops=env.compute.measure_gflops,
    )
    env.events.emit(
        Event(
            "episode_end",
            episode,
            signals.epoch,
            {
                "final_val_accuracy": outcome.final_val_accuracy,
                "final_test_accuracy": outcome.final_test_accuracy,
                "host_params": outcome.host_params,
                "seed_params": outcome.seed_params,
                "seconds": outcome.seconds,
                "train_gflops": outcome.train_gflops,
            },
        )
    )
    return outcome
