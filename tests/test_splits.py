"""The three splits: no decision reads the test split, and growth never changes the data order."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from conftest import make_env, tiny_shapes_data, tiny_shapes_task
from esper.leyline import BlendSchedule, Decision, LifecycleOp, TrainingSignals
from esper.simic import loop
from esper.simic import morphogenetic_envs as menvs
from esper.tamiyo import HeuristicConfig, HeuristicController
from esper.tolaria import EnvConfig
from esper.tolaria.datasets import ImageData
from esper.tolaria.episode import run_episode


def with_garbage_test_split(data: ImageData) -> ImageData:
    """The same data, but a test split of loud noise with shuffled labels."""
    g = torch.Generator().manual_seed(123)
    noise = 50.0 * torch.randn(data.test_x.shape, generator=g)
    labels = data.test_y[torch.randperm(data.test_y.numel(), generator=g)]
    return dataclasses.replace(data, test_x=noise, test_y=labels)


class RecordingHeuristic(HeuristicController):
    """The heuristic, writing down every decision and everything it was shown."""

    def reset(self) -> None:
        super().reset()
        self.seen: list[tuple[Decision, TrainingSignals]] = getattr(self, "seen", [])

    def decide(self, signals: TrainingSignals) -> Decision:
        decision = super().decide(signals)
        self.seen.append((decision, signals))
        return decision


def heuristic_episode(data: ImageData):
    task = dataclasses.replace(tiny_shapes_task(), load_data=lambda _: data)
    env = make_env(task, max_epochs=12)
    eager = HeuristicConfig(warmup_epochs=1, plateau_patience=0, germination_cooldown=1)
    controller = RecordingHeuristic(task.topology, ("early", "mid", "late"), config=eager)
    outcome = run_episode(env, controller, rng_seed=3, episode=0)
    return outcome, controller.seen


@pytest.mark.slow
def test_a_garbage_test_split_changes_no_decision_of_the_heuristic() -> None:
    data = tiny_shapes_data()
    outcome, seen = heuristic_episode(data)
    garbage_outcome, garbage_seen = heuristic_episode(with_garbage_test_split(data))
    assert [d for d, _ in seen] == [d for d, _ in garbage_seen]
    assert [s for _, s in seen] == [s for _, s in garbage_seen]  # every signal, every slot, equal
    assert any(d.op is LifecycleOp.GERMINATE for d, _ in seen)  # the episode did decide things
    assert outcome.final_val_accuracy == garbage_outcome.final_val_accuracy
    assert outcome.records == garbage_outcome.records
    assert outcome.final_test_accuracy != garbage_outcome.final_test_accuracy  # it was read, to report


def ppo_round(data: ImageData) -> tuple[dict[str, float], dict[str, torch.Tensor], torch.Tensor]:
    task = dataclasses.replace(tiny_shapes_task(), load_data=lambda _: data)
    config = menvs.TrainerConfig(episodes=2, n_envs=2, rng_seed=1)
    env_config = EnvConfig(task, torch.device("cpu"), 4, ("early", "mid", "late"), max_germinations=6)
    envs, learner = menvs.build_trainer(config, env_config, data, [torch.device("cpu")], torch.device("cpu"))
    rollout = loop.collect(learner, envs, config.ppo)
    actions = rollout.buffer.actions.clone()
    done = loop.update(learner, rollout, config.ppo)
    learner.episodes_done += envs.n_envs
    return envs.round_metrics(done), learner.policy.state_dict(), actions


def test_a_garbage_test_split_changes_nothing_a_ppo_round_learns() -> None:
    data = tiny_shapes_data()
    row, policy, actions = ppo_round(data)
    garbage_row, garbage_policy, garbage_actions = ppo_round(with_garbage_test_split(data))
    assert torch.equal(actions, garbage_actions)
    assert all(torch.equal(policy[k], garbage_policy[k]) for k in policy)
    reported = {"charts/final_test_accuracy", *menvs.TIMING_METRICS}
    assert {k: v for k, v in row.items() if k not in reported} == {
        k: v for k, v in garbage_row.items() if k not in reported
    }
    assert row["charts/final_test_accuracy"] != garbage_row["charts/final_test_accuracy"]


def test_the_test_split_is_read_only_once_an_episode_is_over() -> None:
    env = make_env(max_epochs=2)
    env.reset(0)
    with pytest.raises(RuntimeError, match="only once an episode is over"):
        env.evaluate_test()
    env.step(Decision.wait())
    env.step(Decision.wait())
    assert 0.0 <= env.evaluate_test().accuracy <= 100.0


def test_growing_a_seed_never_changes_the_batches_or_the_host() -> None:
    """The data order and the initialisation come from separate generators, so a grown run and a
    static run of the same seed start from the same host and see the same batches."""

    def batches_seen(decisions: list[Decision]) -> tuple[list[torch.Tensor], dict[str, torch.Tensor]]:
        env = make_env(max_epochs=len(decisions))
        env.reset(7)
        state = env.model.host.state_dict()  # tensors, and each block's width (its extra state)
        initial = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in state.items()}
        seen: list[torch.Tensor] = []
        original = env.train_batch

        def record(x, y):
            seen.append(x.clone())
            return original(x, y)

        env.train_batch = record
        for decision in decisions:
            env.step(decision)
        return seen, initial

    grow = Decision(LifecycleOp.GERMINATE, "mid", "conv_heavy", BlendSchedule.LINEAR)
    static, static_host = batches_seen([Decision.wait()] * 4)
    grown, grown_host = batches_seen([Decision.wait(), grow, Decision.wait(), Decision.wait()])
    assert len(static) == len(grown) > 0
    assert all(torch.equal(a, b) for a, b in zip(static, grown, strict=True))
    tensors = [k for k, v in static_host.items() if isinstance(v, torch.Tensor)]
    assert tensors and all(torch.equal(static_host[k], grown_host[k]) for k in tensors)
    assert all(static_host[k] == grown_host[k] for k in static_host if k not in tensors)
