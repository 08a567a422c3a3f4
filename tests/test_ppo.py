"""The PPO machinery: factored sampling, the rollout buffer, the update, and the vectorized trainer."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import tiny_shapes_task
from esper.leyline import LifecycleOp
from esper.simic import PPOConfig, RolloutBuffer, compute_gae, loop, ppo_update
from esper.simic import morphogenetic_envs as menvs
from esper.simic.buffer import RolloutStep
from esper.simic.checkpoint import learner_state, load_learner_state
from esper.simic.rewards import RewardConfig
from esper.tamiyo import ActionSpace, FactoredMasks, RecurrentPolicy, evaluate_factored, sample_factored
from esper.tolaria import EnvConfig


# --------------------------------------------------------------------------- sampling
@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**31), st.integers(1, 6))
def test_later_heads_are_sampled_under_the_mask_of_the_sampled_first_head(seed, n_rows) -> None:
    g = torch.Generator().manual_seed(seed)
    first = torch.rand(n_rows, 3, generator=g) > 0.4
    first[:, 0] = True
    conditional = torch.rand(n_rows, 3, 5, generator=g) > 0.5
    conditional[..., 0] = True
    masks = FactoredMasks(first, (conditional,), torch.ones(3, 2, dtype=torch.bool))
    logits = [torch.randn(n_rows, 3, generator=g), torch.randn(n_rows, 5, generator=g)]
    sample = sample_factored(logits, masks, g)
    rows = torch.arange(n_rows)
    assert first[rows, sample.actions[:, 0]].all()
    assert conditional[rows, sample.actions[:, 0], sample.actions[:, 1]].all()
    assert torch.equal(sample.masks[:, 3:], conditional[rows, sample.actions[:, 0]])
    log_probs, entropies = evaluate_factored(logits, sample.masks, sample.actions)
    assert torch.allclose(log_probs, sample.log_probs) and torch.allclose(entropies, sample.entropies)


def test_head_activity_follows_the_first_head() -> None:
    table = ActionSpace.head_active_table()
    masks = FactoredMasks(
        torch.tensor([[False, False, False, True]]),  # only CULL
        tuple(torch.ones(1, 4, n, dtype=torch.bool) for n in (3, 6, 2)),
        table,
    )
    sample = sample_factored([torch.zeros(1, n) for n in (4, 3, 6, 2)], masks)
    assert sample.actions[0, 0] == LifecycleOp.CULL
    assert sample.head_active.tolist() == [[True, True, False, False]]


# --------------------------------------------------------------------------- buffer
def filled_buffer(lengths: list[int], terminal: list[bool], T: int = 5) -> RolloutBuffer:
    n = len(lengths)
    state = (torch.randn(1, n, 4), torch.randn(1, n, 4))
    buf = RolloutBuffer(T, n, 3, (2,), state)
    for t in range(T):
        ids = [i for i in range(n) if t < lengths[i]]
        if not ids:
            break
        k = len(ids)
        buf.add(
            RolloutStep(
                envs=torch.tensor(ids),
                obs=torch.full((k, 3), float(t)),
                episode_start=torch.tensor([t == 0] * k),
                actions=torch.zeros(k, 1, dtype=torch.long),
                masks=torch.ones(k, 2, dtype=torch.bool),
                log_probs=torch.full((k, 1), -0.7),
                head_active=torch.ones(k, 1, dtype=torch.bool),
                values=torch.full((k,), 0.5),
                rewards=torch.ones(k),
                terminated=torch.tensor([terminal[i] and t == lengths[i] - 1 for i in ids]),
                truncated=torch.zeros(k, dtype=torch.bool),
            )
        )
    return buf


def test_a_short_segment_leaves_padding_that_never_reaches_a_minibatch() -> None:
    buf = filled_buffer([5, 2, 4], [True, True, True])
    assert buf.valid.sum(0).tolist() == [5, 2, 4]
    buf.compute_returns(torch.zeros(3), gamma=0.9, gae_lambda=0.95)
    seen = 0
    for mb in buf.minibatches(2, torch.Generator().manual_seed(0)):
        seen += mb.actions.shape[0]
        assert mb.valid.sum() == mb.actions.shape[0] == mb.returns.shape[0]
    assert seen == 11
    assert (buf.advantages[~buf.valid] == 0).all()


def test_minibatches_are_whole_sequences_with_their_initial_state() -> None:
    buf = filled_buffer([5, 5, 5, 5], [True] * 4)
    buf.compute_returns(torch.zeros(4), 0.9, 0.95)
    envs_seen = []
    for mb in buf.minibatches(2, torch.Generator().manual_seed(1)):
        assert mb.obs.shape[0] == 5  # every time step of each sequence
        for b in range(mb.obs.shape[1]):
            env = int(torch.nonzero((buf.initial_state[0][0] == mb.initial_state[0][0, b]).all(-1)))
            envs_seen.append(env)
    assert sorted(envs_seen) == [0, 1, 2, 3]


def test_segment_returns_equal_gae_per_env_with_terminal_and_cut_ends() -> None:
    buf = filled_buffer([3, 5], [True, False])  # env 1 is cut by the rollout's end
    last_values = torch.tensor([9.0, 2.0])
    buf.compute_returns(last_values, gamma=0.9, gae_lambda=0.8)
    for env, (n, terminal) in enumerate([(3, True), (5, False)]):
        rewards, values = torch.ones(n, 1), torch.full((n, 1), 0.5)
        next_values = torch.cat([values[1:], last_values[env].view(1, 1)])
        adv, ret = compute_gae(
            rewards,
            values,
            torch.tensor([[t == n - 1 and terminal] for t in range(n)]),
            torch.tensor([[t == n - 1 and not terminal] for t in range(n)]),
            next_values,
            0.9,
            0.8,
        )
        assert torch.allclose(buf.advantages[:n, env], adv[:, 0])
        assert torch.allclose(buf.returns[:n, env], ret[:, 0])


def test_adding_past_the_segment_end_or_twice_per_step_is_refused() -> None:
    buf = filled_buffer([5], [True])
    with pytest.raises(IndexError, match="segment full"):
        buf.add(RolloutStep(*[torch.zeros(1)] * 11))
    buf = filled_buffer([1, 1], [True, True])
    args = dict(
        obs=torch.zeros(2, 3),
        episode_start=torch.zeros(2, dtype=torch.bool),
        actions=torch.zeros(2, 1, dtype=torch.long),
        masks=torch.ones(2, 2, dtype=torch.bool),
        log_probs=torch.zeros(2, 1),
        head_active=torch.ones(2, 1, dtype=torch.bool),
        values=torch.zeros(2),
        rewards=torch.zeros(2),
        terminated=torch.zeros(2, dtype=torch.bool),
        truncated=torch.zeros(2, dtype=torch.bool),
    )
    with pytest.raises(ValueError, match="twice"):
        buf.add(RolloutStep(envs=torch.tensor([0, 0]), **args))


# --------------------------------------------------------------------------- update
def random_rollout(n_envs: int = 4, T: int = 6, seed: int = 0) -> tuple[RecurrentPolicy, RolloutBuffer]:
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    policy = RecurrentPolicy(5, (3, 2), hidden=16, lstm_hidden=16)
    state = policy.initial_state(n_envs)
    buf = RolloutBuffer(T, n_envs, 5, (3, 2), state)
    start = torch.ones(n_envs, dtype=torch.bool)
    for t in range(T):
        obs = torch.randn(n_envs, 5, generator=g)
        with torch.no_grad():
            logits, values, state = policy(obs[None], state, start[None])
        masks = FactoredMasks.unmasked(n_envs, (3, 2))
        sample = sample_factored([lg[0] for lg in logits], masks, g)
        buf.add(
            RolloutStep.of(
                torch.arange(n_envs),
                obs,
                start.clone(),
                sample,
                values[0],
                (sample.actions[:, 0] == 1).float(),
                torch.full((n_envs,), t == T - 1),
                torch.zeros(n_envs, dtype=torch.bool),
            )
        )
        start[:] = False
    buf.compute_returns(torch.zeros(n_envs), 0.99, 0.95)
    return policy, buf


def test_first_minibatch_replays_the_rollout_exactly() -> None:
    """Re-running each sequence from its stored initial state gives the rollout's log-probs."""
    policy, buf = random_rollout()
    for mb in buf.minibatches(2, torch.Generator().manual_seed(0)):
        evaluation = policy.evaluate(mb.obs, mb.initial_state, mb.episode_start, mb.valid, mb.masks, mb.actions)
        assert torch.allclose(evaluation.log_probs, mb.old_log_probs, atol=1e-6)
        assert torch.allclose(evaluation.values, mb.old_values, atol=1e-6)


def test_update_learns_the_rewarded_action_and_reports_finite_metrics() -> None:
    policy, buf = random_rollout(n_envs=8, T=8)
    opt = torch.optim.Adam(policy.parameters(), lr=3e-3)
    obs = buf.obs
    with torch.no_grad():
        logits, _, _ = policy(obs, buf.initial_state, buf.episode_start)
    before = torch.softmax(logits[0], -1)[..., 1].mean()
    stats = ppo_update(policy, opt, buf, PPOConfig(target_kl=None), 0.0, torch.Generator().manual_seed(0))
    metrics = stats.metrics(("a", "b"))
    assert all(math.isfinite(v) for v in metrics.values())
    assert stats.epochs_run == 4 and stats.minibatches_run == 16
    with torch.no_grad():
        logits, _, _ = policy(obs, buf.initial_state, buf.episode_start)
    p_rewarded = torch.softmax(logits[0], -1)[..., 1].mean()
    assert p_rewarded > before + 0.05


def test_kl_early_stop_halts_the_update() -> None:
    policy, buf = random_rollout(n_envs=8, T=8)
    opt = torch.optim.Adam(policy.parameters(), lr=0.05)
    stats = ppo_update(policy, opt, buf, PPOConfig(target_kl=1e-6), 0.0, torch.Generator().manual_seed(0))
    assert stats.stopped_early and stats.minibatches_run < 16


def test_schedule_anneals_over_a_fixed_horizon() -> None:
    ppo = PPOConfig(ent_coef=0.02, ent_coef_final=0.0, anneal_rounds=10, anneal_lr=True, learning_rate=1.0)
    assert ppo.schedule(0) == (1.0, 0.02)
    assert ppo.schedule(5) == pytest.approx((0.5, 0.01))
    assert ppo.schedule(50) == (0.0, 0.0)


# --------------------------------------------------------------------------- morphogenetic envs in the loop
def make_trainer(
    n_envs: int = 2, max_epochs: int = 3, rng_seed: int = 0, reward: RewardConfig | None = None
) -> tuple[menvs.MorphogeneticEnvs, loop.Learner]:
    task = tiny_shapes_task()
    reward = reward or RewardConfig()
    config = menvs.TrainerConfig(episodes=4 * n_envs, n_envs=n_envs, rng_seed=rng_seed, hidden=16, reward=reward)
    env_config = EnvConfig(task, torch.device("cpu"), max_epochs, ("early", "mid", "late"), max_germinations=3)
    cpu = torch.device("cpu")
    return menvs.build_trainer(config, env_config, task.load_data(None), [cpu], cpu)


def collect(
    envs: menvs.MorphogeneticEnvs, learner: loop.Learner, before_train=None
) -> tuple[loop.Rollout, list[tuple[list[int], torch.Tensor]]]:
    """One round's rollout, step by step through the loop; returns it and, for every step, the
    envs that acted and the observation the policy acted on (read from the policy's own call)."""
    acted_on = []
    act = learner.policy.act

    def spy(obs, *args, **kwargs):
        acted_on.append((ids, obs.clone()))
        return act(obs, *args, **kwargs)

    learner.policy.act = spy
    rollout = loop.begin_rollout(learner, envs)
    epoch = 0
    try:
        while ids := envs.acting():
            epoch += 1
            if before_train is not None:
                before_train(envs, epoch)
            loop.collect_step(learner, envs, rollout, ids)
    finally:
        del learner.policy.act
    return rollout, acted_on


def test_buffer_stores_the_normalized_observation_the_policy_acted_on() -> None:
    envs, learner = make_trainer()
    menvs.run_round(envs, learner)  # the normalizer has statistics from the first round
    rollout, acted_on = collect(envs, learner)
    for t, (ids, obs) in enumerate(acted_on):
        assert torch.equal(rollout.buffer.obs[t, ids], obs)
    raw = envs.spaces.layout.featurize(envs.signals[0])
    assert not torch.allclose(learner.obs_norm.normalize(raw), raw)  # normalization did something
    assert rollout.buffer.episode_start[0].all() and not rollout.buffer.episode_start[1:].any()
    assert rollout.buffer.terminated[-1].all()  # the time limit is a true terminal


def test_a_governor_panic_in_one_env_leaves_the_others_data_unchanged() -> None:
    def poison_env0(envs: menvs.MorphogeneticEnvs, epoch: int) -> None:
        if epoch == 2:
            env = envs.envs[0]
            original = env.train_batch

            def poisoned(x, y):
                with torch.no_grad():
                    next(env.model.host.parameters()).fill_(float("nan"))
                env.train_batch = original
                return original(x, y)

            env.train_batch = poisoned

    clean_envs, clean_learner = make_trainer(n_envs=2, max_epochs=4)
    clean, _ = collect(clean_envs, clean_learner)
    envs, learner = make_trainer(n_envs=2, max_epochs=4)
    panicked, _ = collect(envs, learner, before_train=poison_env0)

    assert envs.panics == 1
    assert panicked.buffer.valid[:, 0].tolist() == [True, True, False, False]
    assert bool(panicked.buffer.terminated[1, 0])
    assert float(panicked.buffer.rewards[1, 0]) <= -envs.reward.config.panic_penalty + 1.0
    # Env 1 saw exactly what it saw without the panic next door. (The observation normalizer is
    # shared, so raw features are compared: they come from env 1's own signals.)
    for field in ("actions", "rewards", "terminated", "valid", "masks"):
        assert torch.equal(getattr(panicked.buffer, field)[:, 1], getattr(clean.buffer, field)[:, 1]), field
    # the policy acts on a batch of one env after the panic, of two without it: a matrix product
    # of another shape may round differently (it did with one CPU thread), by far less than 1e-5
    torch.testing.assert_close(panicked.buffer.log_probs[:, 1], clean.buffer.log_probs[:, 1], rtol=0, atol=1e-5)
    assert envs.signals[1] == clean_envs.signals[1]


@pytest.mark.slow
def test_a_static_baseline_runs_a_round_on_one_seed_beside_its_static_twin() -> None:
    """The envs of a round share one seed and one static twin, which never reaches the buffer;
    each env's accuracy and baseline rewards telescope to its gain over the twin; the seeds
    recorded are the seeds run."""
    reward = RewardConfig(static_baseline=True)
    envs, learner = make_trainer(n_envs=3, max_epochs=3, rng_seed=50, reward=reward)
    seen = []
    for env in (*envs.all_envs, envs.twin):
        env.reset = lambda seed, ep, _reset=env.reset: (seen.append(seed), _reset(seed, ep))[1]
    rollout, _ = collect(envs, learner)
    assert seen == [50, 50, 50, 50] and rollout.buffer.rewards.shape[1] == 3
    assert envs.twin not in envs.envs
    parts = envs.reward_parts  # step-major: each step's acting envs in order
    for i in range(3):
        mine = parts[i::3]
        gain = sum(p.accuracy + p.static_baseline for p in mine)
        expected = reward.accuracy_weight * (envs.signals[i].val_accuracy - envs.twin_signals.val_accuracy)
        assert gain == pytest.approx(expected, abs=1e-9)
    envs, learner = make_trainer(n_envs=3, max_epochs=2, rng_seed=50, reward=reward)
    menvs.run_round(envs, learner)
    menvs.run_round(envs, learner)
    assert envs.trained_rng_seeds == [50, 50, 50, 53, 53, 53]
    row = menvs.run_round(envs, learner)
    assert "charts/static_twin_val_accuracy" in row and "rewards/static_baseline" in row


def test_lstm_state_starts_at_zero_every_round() -> None:
    envs, learner = make_trainer()
    rollout = loop.begin_rollout(learner, envs)
    assert all((s == 0).all() for s in learner.lstm) and learner.episode_start.all()
    assert all((s == 0).all() for s in rollout.buffer.initial_state)
    menvs.run_round(envs, learner)
    assert any((s != 0).any() for s in learner.lstm)  # the episodes moved it
    rollout = loop.begin_rollout(learner, envs)
    assert all((s == 0).all() for s in learner.lstm) and learner.episode_start.all()
    assert all((s == 0).all() for s in rollout.buffer.initial_state)


def test_a_round_updates_the_policy_and_counts_episodes() -> None:
    envs, learner = make_trainer(n_envs=2, max_epochs=2)
    before = [p.clone() for p in learner.policy.parameters()]
    row = menvs.run_round(envs, learner)
    assert learner.round == 1 and learner.episodes_done == 2 and learner.global_step == 4
    assert any(not torch.equal(a, b) for a, b in zip(before, learner.policy.parameters(), strict=True))
    assert all(math.isfinite(v) for v in row.values())
    assert sum(row[f"charts/op_{op.name.lower()}"] for op in LifecycleOp) == pytest.approx(1.0)
    for name in (
        "losses/policy_loss",
        "losses/value_loss",
        "losses/entropy",
        "losses/approx_kl",
        "losses/clipfrac",
        "losses/explained_variance",
        "charts/episodic_return",
        "charts/SPS",
        "losses/entropy_op",
        "losses/entropy_slot",
        "losses/entropy_blueprint",
        "losses/entropy_schedule",
    ):
        assert name in row


def test_learner_state_round_trips_exactly() -> None:
    envs, learner = make_trainer(n_envs=2, max_epochs=2)
    menvs.run_round(envs, learner)
    state = learner_state(learner)
    _, other = make_trainer(n_envs=2, max_epochs=2, rng_seed=5)
    load_learner_state(other, state)
    for a, b in zip(learner.policy.state_dict().values(), other.policy.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert torch.equal(learner.sample_generator.get_state(), other.sample_generator.get_state())
    assert other.round == 1 and other.episodes_done == 2
    assert torch.equal(other.obs_norm.mean, learner.obs_norm.mean)


def test_trainer_config_checks_its_inputs() -> None:
    with pytest.raises(ValueError, match="n_envs must be >= 1, got 0"):
        menvs.TrainerConfig(episodes=4, n_envs=0)
    assert menvs.TrainerConfig(episodes=9, n_envs=4).total_rounds == 3
    assert dataclasses.asdict(menvs.TrainerConfig(episodes=1, n_envs=1))["reward"]["mode"] == "dense"


def test_envs_are_spread_round_robin_over_the_devices() -> None:
    devices = [torch.device("cuda", 0), torch.device("cuda", 1)]
    assert menvs.assign_devices(5, devices) == [devices[0], devices[1], devices[0], devices[1], devices[0]]
    assert menvs.assign_devices(2, [torch.device("cpu")]) == [torch.device("cpu")] * 2
    with pytest.raises(ValueError, match="at least one device"):
        menvs.assign_devices(2, [])


def test_advantages_are_normalised_over_the_whole_round() -> None:
    """Not per minibatch: a minibatch may be one env's episode, whose own mean would be erased."""
    from esper.simic.distributed import SINGLE_PROCESS
    from esper.simic.update import advantage_statistics

    buf = filled_buffer([5, 2, 4], [True, True, True])
    buf.compute_returns(torch.zeros(3), gamma=0.9, gae_lambda=0.95)
    mean, std = advantage_statistics(buf, SINGLE_PROCESS)
    valid = buf.advantages[buf.valid]
    assert torch.isclose(mean, valid.mean()) and torch.isclose(std, valid.std() + 1e-8)
