"""Does the PPO core learn? Esper's own PPO (recurrent policy, factored sampler, rollout buffer,
GAE, update) trained on a standard Gymnasium task whose solved return is known.

Why: the morphogenetic envs have no known optimum, so a trainer that fails to improve there
could be the task or the learner. Classic control separates the two, with one set of defaults:
- CartPole-v1: maximum return 500; CleanRL's PPO reaches about 490 in 500k steps. Goal:
  `final_mean_return` >= 475.
- Acrobot-v1: -1 per step until the goal, cut at 500 steps; a uniformly random policy reaches
  the goal in about 5% of episodes, CleanRL's `ppo.py` reports -86 in 500k steps. Goal: >= -100.
`final_mean_return` is the mean of the last 20 completed training episodes, sampled from the
stochastic policy.

Hyperparameters: `esper.simic.gymnasium_envs.default_ppo` (learning rate 1e-3 and entropy bonus 0.01,
both decayed linearly to 0 over the run, 4 epochs of 4 minibatches, no KL early stop, advantages not
normalized), 8 envs x 128 steps a round, 64 hidden units in separate actor and critic trunks,
observations normalized and rewards scaled by the running spread of the discounted return
(`train_gym`'s defaults). Prints one JSON object; progress goes to stderr.

Usage: python experiments/ppo-core/ppo_gym.py [--env CartPole-v1] [--steps 500000] [--seed 0]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time

import gymnasium
import torch

from esper.runs.common import torch_build
from esper.simic.gymnasium_envs import FINAL_WINDOW, ActionCodec, default_ppo, observation_dim, train_gym


def progress(every: int):
    """A per-round callback that writes one line to stderr every `every` rounds."""

    def report(row: dict[str, float]) -> None:
        if int(row["round"]) % every == 0:
            print(
                f"round {int(row['round'])} step {int(row['global_step'])} "
                f"recent return {row['charts/recent_return']:.1f} SPS {row['charts/SPS']:.0f}",
                file=sys.stderr,
            )

    return report


def finite_or_none(x: float) -> float | None:
    """JSON has no NaN: a run that completed no episode reports null."""
    return round(x, 2) if math.isfinite(x) else None


def fail(message: str) -> None:
    print(f"ppo_gym: {message}", file=sys.stderr)
    sys.exit(2)


def check_spaces(env_id: str) -> None:
    """Refuse, in one line, an env whose spaces `train_gym` does not take (before any training)."""
    env = gymnasium.make(env_id)
    try:
        ActionCodec.for_space(env.action_space)
        observation_dim(env.observation_space)
    except ValueError as error:
        fail(f"{env_id}: {error}")
    finally:
        env.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--steps", type=int, default=500_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--n-envs", type=int, default=8)
    parser.add_argument("--n-steps", type=int, default=128)
    parser.add_argument("--progress-every", type=int, default=25, help="rounds between progress lines")
    args = parser.parse_args()
    if args.env not in gymnasium.registry:
        fail(f"unknown Gymnasium env {args.env!r}")
    check_spaces(args.env)
    rounds = math.ceil(args.steps / (args.n_envs * args.n_steps))
    ppo = default_ppo(rounds)
    start = time.perf_counter()
    result = train_gym(
        args.env,
        args.steps,
        n_envs=args.n_envs,
        n_steps=args.n_steps,
        ppo=ppo,
        rng_seed=args.seed,
        on_round=progress(args.progress_every),
    )
    seconds = time.perf_counter() - start
    print(
        json.dumps(
            {
                "env": args.env,
                "final_mean_return": finite_or_none(result.final_mean_return),
                "final_window": FINAL_WINDOW,
                "episodes": len(result.episode_returns),
                "steps": result.global_step,
                "rounds": len(result.rounds),
                "seconds": round(seconds, 1),
                "seed": args.seed,
                "n_envs": args.n_envs,
                "n_steps": args.n_steps,
                "ppo": dataclasses.asdict(ppo),
                "threads": torch.get_num_threads(),
                **torch_build(),
                "gymnasium": gymnasium.__version__,
            }
        )
    )


if __name__ == "__main__":
    main()
