"""The CUDA-graph path's CPU-testable parts: what re-captures a graph (its signature) and the
running sums a graph writes across epochs. Replay itself is tested in tests/cuda/test_graphs.py."""

from __future__ import annotations

import pytest
import torch

from conftest import EVERYTHING_KEPT, make_env, scripted_episode
from esper.leyline import BlendSchedule, Decision, LifecycleOp, SeedStage
from esper.tolaria import graphs
from esper.tolaria.graphs import signature
from esper.tolaria.training import EpochSums, TrainingEpoch


def current_signature(env):
    return signature(env.model, env.optimizers.all())


def test_the_signature_holds_over_waiting_epochs_and_the_learning_rate_schedule() -> None:
    env = make_env(max_epochs=5)
    env.reset(0)
    env.step(Decision.wait())
    before = current_signature(env)
    lrs = [g["lr"] for g in env.optimizers.host.param_groups]
    env.step(Decision.wait())
    assert [g["lr"] for g in env.optimizers.host.param_groups] != lrs  # the cosine schedule moved
    assert current_signature(env) == before


def test_every_change_of_the_forward_changes_the_signature() -> None:
    """Germination, the start of blending, each blending epoch's alpha: each re-captures."""
    env = make_env(max_epochs=14)
    env.reset(0)
    states, signatures = [], []
    env.step(Decision(LifecycleOp.GERMINATE, "mid", "conv_light"))
    for _ in range(12):
        state, now = graphs.slot_forward_state(env.model.slot("mid")), current_signature(env)
        if states and state != states[-1]:
            assert now != signatures[-1], f"{states[-1]} -> {state} kept the signature"
        states.append(state)
        signatures.append(now)
        if env.episode_over:
            break
        env.step(Decision.wait())
    assert ("seed", False, "isolated") in states
    assert len({state for state in states if state[-1] != "isolated"}) >= 3  # blending alphas, then 1


def test_a_rollback_that_rebuilds_the_optimizers_changes_the_signature() -> None:
    env = make_env(max_epochs=4)
    env.reset(0)
    env.step(Decision(LifecycleOp.GERMINATE, "mid", "conv_light"))
    before = current_signature(env)
    env.keeper.restore()
    assert current_signature(env) != before


def test_a_training_epoch_zeroes_and_reuses_the_sums_it_is_given() -> None:
    env = make_env(max_epochs=3)
    env.reset(0)
    sums = EpochSums.zeros(0, torch.device("cpu"))
    sums.loss.fill_(5.0)
    sums.correct.fill_(7)
    epoch = TrainingEpoch(env.model, env.optimizers.all(), sums=sums)
    assert epoch.sums is sums and float(sums.loss) == 0.0 and int(sums.correct) == 0
    x, y = next(env.passes.data.train_batches(env.config.task.batch_size, torch.Generator().manual_seed(0)))
    epoch.step(x, y)
    stats = epoch.finish()
    assert stats.loss == float(sums.loss) and epoch.n_steps == 1


def test_graphs_are_cuda_only_and_the_cpu_path_is_unchanged() -> None:
    """On the CPU the flag does nothing: the same episode, bitwise."""
    runs = []
    for cuda_graphs in (True, False):
        env = make_env(max_epochs=3, cuda_graphs=cuda_graphs)
        assert env.passes.training_graph is None and env.passes.measurement_graph is None
        env.reset(0)
        env.step(Decision(LifecycleOp.GERMINATE, "mid", "conv_light"))
        env.step(Decision.wait())
        runs.append([p.detach().clone() for p in env.model.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*runs, strict=True))


class ReplayedByRerunning:
    """A stand-in for a CUDA graph on the CPU, where nothing can be captured: its replay runs the
    captured work again. What it tests is the bookkeeping around replay: when a graph is
    re-captured, which running sums a replay writes, the step counts, the learning rates."""

    def __init__(self, work) -> None:
        self.work, self.outputs = work, None

    def replay(self) -> None:
        out = self.work()
        if self.outputs is not None:
            self.outputs[0].copy_(out[0])


def capture_on_cpu(work, stream):
    graph = ReplayedByRerunning(work)
    if work.__name__ == "measure":  # side-effect free: its output tensors are made now
        graph.outputs = work()
    return graph, graph.outputs


def graphed_on_cpu(env) -> None:
    env.passes.training_graph = graphs.TrainingGraph(None)
    env.passes.measurement_graph = graphs.MeasurementGraph(None)


def cpu_env(graphed: bool, task=None, **kwargs):
    """An env on the CPU, with the replay bookkeeping when `graphed`."""
    env = make_env(task, **kwargs)
    if graphed:
        graphed_on_cpu(env)
    return env


@pytest.mark.slow
def test_the_replay_bookkeeping_gives_the_eager_episode(monkeypatch) -> None:
    """A whole episode through the graph path's bookkeeping (warm-up, capture, replay, re-capture
    at each lifecycle change) equals the eager episode bitwise."""
    monkeypatch.setattr(graphs, "capture", capture_on_cpu)
    runs = []
    for graphed in (True, False):
        env = cpu_env(graphed, max_epochs=10)
        env.reset(0)
        signals = [env.step(Decision(LifecycleOp.GERMINATE, "mid", "conv_light")).signals]
        signals += [env.step(Decision.wait()).signals for _ in range(9)]
        runs.append((signals, [p.detach().clone() for p in env.model.parameters()], env))
    (graphed_signals, graphed_params, env), (eager_signals, eager_params, _) = runs
    assert graphed_signals == eager_signals
    assert all(torch.equal(a, b) for a, b in zip(graphed_params, eager_params, strict=True))
    assert 3 <= env.passes.training_graph.captures < 10  # the seed in training, blending, ...; some replayed
    assert env.passes.measurement_graph.captures >= 1


def test_a_replayed_epoch_counts_its_steps_and_writes_the_graphs_sums(monkeypatch) -> None:
    monkeypatch.setattr(graphs, "capture", capture_on_cpu)
    env = make_env(max_epochs=4)
    graphed_on_cpu(env)
    env.reset(0)
    env.step(Decision.wait())  # warm-up and capture
    graph = env.passes.training_graph
    sums = graph.sums
    env.step(Decision.wait())  # replayed throughout
    assert graph.sums is sums and graph.captures == 1
    assert env.signals.train_loss == pytest.approx(float(sums.loss) / 8)  # 400 images, batches of 50


@pytest.mark.slow
def test_envs_that_queue_their_measurements_together_equal_the_eager_envs(monkeypatch) -> None:
    """`MorphogeneticEnvs` launches every env's measurement before any env reads its own."""
    from conftest import tiny_shapes_task
    from esper.simic import morphogenetic_envs as menvs
    from esper.tolaria import EnvConfig

    monkeypatch.setattr(graphs, "capture", capture_on_cpu)
    results = []
    for graphed in (True, False):
        task = tiny_shapes_task()
        config = menvs.TrainerConfig(episodes=2, n_envs=2, rng_seed=3)
        env_config = EnvConfig(task, torch.device("cpu"), 4, task.slot_names, max_germinations=2)
        cpu = torch.device("cpu")
        envs, _ = menvs.build_trainer(config, env_config, task.load_data(None), [cpu], cpu)
        if graphed:
            for env in envs.all_envs:
                graphed_on_cpu(env)
        envs.begin_round()
        decisions = [Decision(LifecycleOp.GERMINATE, "early", "conv_light"), Decision.wait()]
        for _ in range(4):
            steps = envs.train_epoch([0, 1], decisions)
            decisions = [Decision.wait()] * 2
        results.append([s.signals for s in steps])
        if graphed:
            assert envs.envs[1].passes.measurement_graph.captures >= 1
    assert results[0] == results[1]


def test_a_launched_measurement_of_an_undone_step_is_not_read(monkeypatch) -> None:
    """A measurement queued before its step was undone (an exception in `end_step`) measured
    weights that no longer exist; the restore writes them back in place, so only the undo can say."""
    monkeypatch.setattr(graphs, "capture", capture_on_cpu)
    losses = []
    for graphed in (True, False):
        env = cpu_env(graphed, max_epochs=6)
        env.reset(0)
        env.step(Decision.wait())
        env.step(Decision.wait())  # the measurement graph is captured by now
        env.begin_step(Decision.wait())
        for x, y in env.passes.data.train_batches(env.config.task.batch_size, env._data_rng):
            env.train_batch(x, y)
        env.launch_measurement()
        env.abort_step()
        losses.append(env.step(Decision.wait()).signals.val_loss)
    assert losses[0] == losses[1]


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["width", "cull", "panic", "text"])
def test_merges_culls_rollbacks_and_transformers_replay_as_the_eager_episode(scenario: str, monkeypatch) -> None:
    from conftest import tiny_text_task

    monkeypatch.setattr(graphs, "capture", capture_on_cpu)
    runs = []
    for graphed in (True, False):
        task = tiny_text_task() if scenario == "text" else None
        env = cpu_env(graphed, task, max_epochs=9, thresholds=EVERYTHING_KEPT)
        seen = scripted_episode(env, scenario)
        runs.append((seen, [p.detach().clone() for p in env.model.parameters()]))
    (graphed_seen, graphed_params), (eager_seen, eager_params) = runs
    assert graphed_seen == eager_seen
    assert all(torch.equal(a, b) for a, b in zip(graphed_params, eager_params, strict=True))
    if scenario == "panic":
        assert any(panic is not None for _, panic in graphed_seen)


def test_stages_that_change_no_forward_keep_the_signature() -> None:
    """An empty slot's embargo and a kept seed's fossilization re-capture nothing."""
    env = make_env(max_epochs=4)
    env.reset(0)
    slot = env.model.slot("mid")
    before = graphs.slot_forward_state(slot)
    slot.lifecycle.load_state_dict({"stage": int(SeedStage.EMBARGOED), "epochs_in_stage": 0, "schedule": 0})
    assert graphs.slot_forward_state(slot) == before
    slot.lifecycle.load_state_dict({"stage": int(SeedStage.DORMANT), "epochs_in_stage": 0, "schedule": 0})
    slot.germinate("conv_light", "s", BlendSchedule.LINEAR)
    training = graphs.slot_forward_state(slot)
    slot.lifecycle.load_state_dict({"stage": int(SeedStage.PROBATIONARY), "epochs_in_stage": 1, "schedule": 0})
    kept = graphs.slot_forward_state(slot)
    slot.lifecycle.load_state_dict({"stage": int(SeedStage.FOSSILIZED), "epochs_in_stage": 0, "schedule": 0})
    assert graphs.slot_forward_state(slot) == kept != training
