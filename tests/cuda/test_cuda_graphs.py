"""CUDA graphs of the training step and the measurement (`esper.tolaria.graphs`): the same
episode as the eager path, bitwise under deterministic cuDNN. Skipped without CUDA."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1]))
from conftest import EVERYTHING_KEPT, make_env, scripted_episode, tiny_shapes_task, tiny_text_task
from esper.leyline import Decision, LifecycleOp
from esper.simic import morphogenetic_envs as menvs
from esper.tolaria import EnvConfig

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

CUDA = torch.device("cuda:0")


@pytest.fixture(autouse=True)
def deterministic_cudnn():
    before = torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    yield
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = before


def episode(graphs: bool, amp: str | None = None, epochs: int = 12):
    """An episode that germinates, trains, blends and fossilizes a seed: every kind of re-capture."""
    env = make_env(max_epochs=epochs, device=CUDA, cuda_graphs=graphs, amp=amp)
    env.reset(0)
    signals = []
    for epoch in range(epochs):
        decision = Decision(LifecycleOp.GERMINATE, "mid", "conv_light") if epoch == 1 else Decision.wait()
        result = env.step(decision)
        signals.append(result.signals)
    torch.cuda.synchronize()
    return env, signals


def max_difference(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max((x.double() - y.double()).abs().max().item() for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("amp", [None, "bf16"])
def test_a_graphed_episode_equals_the_eager_one_bitwise(amp: str | None) -> None:
    graphed, graphed_signals = episode(True, amp)
    eager, eager_signals = episode(False, amp)
    assert graphed.passes.training_graph.captures >= 3  # the host, the seed training, blending
    assert graphed.passes.measurement_graph.captures >= 1
    a, b = list(graphed.model.state_dict().values()), list(eager.model.state_dict().values())
    tensors = [(x, y) for x, y in zip(a, b, strict=True) if torch.is_tensor(x)]
    diff = max_difference([x for x, _ in tensors], [y for _, y in tensors])
    assert diff == 0.0, f"the graphed episode's weights differ from the eager one's by up to {diff}"
    for g, e in zip(graphed_signals, eager_signals, strict=True):
        assert (g.train_loss, g.val_loss, g.val_accuracy) == (e.train_loss, e.val_loss, e.val_accuracy)
        assert [s.contribution for s in g.slots] == [s.contribution for s in e.slots]


def test_graphed_envs_of_one_process_equal_their_eager_twins() -> None:
    """Four envs on their own streams, fed the shared batches by `MorphogeneticEnvs`."""
    results = []
    for graphs in (True, False):
        task = tiny_shapes_task()
        config = menvs.TrainerConfig(episodes=4, n_envs=4, rng_seed=3)
        env_config = EnvConfig(task, CUDA, 4, task.slot_names, max_germinations=2, cuda_graphs=graphs)
        envs, _ = menvs.build_trainer(config, env_config, task.load_data(None), [CUDA], CUDA)
        envs.begin_round()
        ids = list(range(4))
        decisions = [Decision(LifecycleOp.GERMINATE, "early", "conv_light"), *[Decision.wait()] * 3]
        for _ in range(3):
            steps = envs.train_epoch(ids, decisions)
            decisions = [Decision.wait()] * 4
        params = [p.detach().clone() for p in envs.envs[0].model.parameters()]
        results.append(([s.signals.val_loss for s in steps], params))
    (graphed_losses, graphed_params), (eager_losses, eager_params) = results
    assert graphed_losses == eager_losses
    assert max_difference(graphed_params, eager_params) == 0.0


def test_a_rollback_under_graphs_restores_and_recaptures() -> None:
    env = make_env(max_epochs=6, device=CUDA)
    env.reset(0)
    env.step(Decision(LifecycleOp.GERMINATE, "mid", "conv_light"))
    env.step(Decision.wait())  # replayed; its state is the one kept
    kept = [p.detach().clone() for p in env.model.parameters()]
    with torch.no_grad():
        for p in env.model.parameters():
            p.add_(1.0)
    env.keeper.restore()
    assert max_difference(kept, [p.detach() for p in env.model.parameters()]) == 0.0
    captures = env.passes.training_graph.captures
    env.step(Decision.wait())  # new optimizers: captured again
    assert env.passes.training_graph.captures == captures + 1


@pytest.mark.parametrize("scenario", ["width", "cull", "panic"])
def test_merges_culls_and_rollbacks_replay_as_the_eager_episode(scenario: str) -> None:
    """The paths the CPU tests replay by re-running (tests/test_graphs.py), as real graphs."""
    runs = []
    for graphs in (True, False):
        env = make_env(max_epochs=9, device=CUDA, cuda_graphs=graphs, thresholds=EVERYTHING_KEPT)
        seen = scripted_episode(env, scenario)
        torch.cuda.synchronize()
        runs.append((seen, [p.detach().clone() for p in env.model.parameters()]))
    (graphed_seen, graphed_params), (eager_seen, eager_params) = runs
    assert graphed_seen == eager_seen
    assert max_difference(graphed_params, eager_params) == 0.0


def test_the_transformer_task_replays_as_the_eager_episode_within_float_rounding() -> None:
    """The embedding's backward adds with atomics on CUDA, so two eager runs already differ in
    the last bits: graphed and eager agree to within that."""
    runs = []
    for graphs in (True, False):
        env = make_env(tiny_text_task(), max_epochs=9, device=CUDA, cuda_graphs=graphs, thresholds=EVERYTHING_KEPT)
        seen = scripted_episode(env, "text")
        torch.cuda.synchronize()
        runs.append(([s.val_loss for s, _ in seen], [p.detach().clone() for p in env.model.parameters()]))
    (graphed_losses, graphed_params), (eager_losses, eager_params) = runs
    assert graphed_losses == pytest.approx(eager_losses, rel=1e-4)
    assert max_difference(graphed_params, eager_params) < 1e-3
