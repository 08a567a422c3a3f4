"""Checkpoints, and everything about them: their schema, the learner and RNG state they hold,
writing them atomically, reading them with `weights_only=True`, and the checks a resume needs
(complete, compatible with the run's spaces, not behind a later checkpoint of its run).

A checkpoint is a plain dict of tensors, numbers, strings, lists and dicts (everything
`torch.load(weights_only=True)` accepts, so loading one never runs pickled code):

- `learner`: policy, optimizer, observation normalizer, every rank's RNG states, counters;
- `settings`: the command-line settings of the run, as given;
- `trainer`: the resolved trainer configuration (hyperparameters of PPO and the reward);
- `knobs`: every knob group of the run, as plain values (a resumed run's defaults);
- `spaces`: the observation layout and action heads the policy is shaped for;
- `training_seeds`: every RNG seed an episode of the run trained on;
- `run_dir`: where the run writes.
"""

from __future__ import annotations

import hashlib
import pickle
import zipfile
from pathlib import Path
from typing import Any

import torch

from esper.karn import write_torch_atomic
from esper.simic.distributed import SINGLE_PROCESS, DistContext
from esper.simic.loop import Learner

CHECKPOINT_FORMAT = 3
"""2: the reward is the dense form of the stated objective (issue 8); a format-1 checkpoint's
reward settings no longer exist, and its policy learned from inflated counterfactuals.
3: the policy has separate actor and critic trunks, and the checkpoint records the RNG seeds
the run trained on (`training_seeds`), which evaluation refuses."""


class CheckpointError(ValueError):
    """A checkpoint is missing, unreadable, corrupt, or does not fit the current configuration."""


REQUIRED_KEYS: dict[str, tuple[str, ...]] = {
    "learner": ("policy", "optimizer", "obs_norm", "rng_ranks", "round", "episodes_done", "global_step"),
    "settings": (),
    "trainer": ("hidden", "reward", "ppo"),
    "knobs": (),
    "spaces": ("observation_layout", "action_heads"),
    "training_seeds": (),
    "run_dir": (),
}
"""What a resume reads, by section: a checkpoint missing any of it is refused."""

ACTING_OPTIONAL_TRAINER_KEYS = ("observe_budget",)
"""Trainer settings that shape the policy's observation where a run set them (absent from
checkpoints before 2026-11-28): a policy file (`policy_only`) keeps them, or it cannot load."""

POLICY_KEYS: dict[str, tuple[str, ...]] = {
    "learner": ("policy", "obs_norm"),
    "settings": ("task",),
    "trainer": ("hidden",),
    "knobs": (),
    "spaces": ("observation_layout", "action_heads"),
    "training_seeds": (),
}
"""What acting reads (`PolicyController.from_checkpoint`): a checkpoint, or a policy file that
`policy_only` cut down from one."""


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    """Write atomically: a crash leaves either the old file or the new one, never half of one."""
    write_torch_atomic(path, {"format": CHECKPOINT_FORMAT, **payload})


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Read a checkpoint onto the CPU; any problem is a `CheckpointError` naming the file."""
    if not path.is_file():
        raise CheckpointError(f"checkpoint {str(path)!r} does not exist or is not a file")
    if not zipfile.is_zipfile(path):  # torch's own message for this suggests weights_only=False
        raise CheckpointError(
            f"checkpoint {str(path)!r} is corrupt or unreadable: not the zip archive torch.save writes"
        )
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise CheckpointError(
            f"checkpoint {str(path)!r} is corrupt or unreadable: it holds Python objects other than tensors and "
            "plain data, which Esper does not load (loading them can run code)"
        ) from exc
    except Exception as exc:  # torch raises many types for a damaged file
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"checkpoint {str(path)!r} is corrupt or unreadable: {first_line}") from exc
    if not isinstance(payload, dict) or "format" not in payload:
        raise CheckpointError(f"checkpoint {str(path)!r} is not an Esper checkpoint (format {CHECKPOINT_FORMAT})")
    if payload["format"] != CHECKPOINT_FORMAT:
        raise CheckpointError(
            f"checkpoint {str(path)!r} has format {payload['format']!r}, this Esper reads format {CHECKPOINT_FORMAT} "
            "(written by an older version: train a new one)"
        )
    return payload


def read_checkpoint(path: Path, required: dict[str, tuple[str, ...]] = REQUIRED_KEYS) -> dict[str, Any]:
    """A checkpoint to resume from (or, with `POLICY_KEYS`, to act with): loaded, and complete
    (a `CheckpointError` otherwise)."""
    payload = load_checkpoint(path)
    for key, inner in required.items():
        value = payload.get(key)
        missing = [k for k in inner if not isinstance(value, dict) or k not in value]
        if value is None or missing:
            what = f"{key}.{missing[0]}" if missing and value is not None else key
            raise CheckpointError(f"checkpoint {str(path)!r} lacks {what!r}: it was not written by `esper ppo`")
    return payload


def policy_sha256(path: Path) -> str:
    """Which policy a checkpoint holds: the sha256 of its network's weights and its observation
    normaliser's state, not of the file's bytes. Why: `policy:shapes` names whatever ships at the
    time and a checkpoint path can be written again, so evals record this to tell policies apart;
    and one policy saved twice (a full checkpoint, then `policy_only` with other metadata) is
    still one policy. The run's slots, blueprints and gates, which also shape how it acts, are
    not in it: a name whose runs differ in those differs in the eval's settings too."""
    return payload_policy_sha256(read_checkpoint(path, POLICY_KEYS))


def payload_policy_sha256(payload: dict[str, Any]) -> str:
    """`policy_sha256` of a checkpoint already read: a controller hashes the policy it loaded, so
    the hash an episode records is that of the policy that played it, from one read of the file."""
    learner = payload["learner"]
    digest = hashlib.sha256()
    for part in POLICY_KEYS["learner"]:
        for key, value in sorted(learner[part].items()):
            if isinstance(value, torch.Tensor):
                digest.update(f"{part}.{key}:{value.dtype}:{tuple(value.shape)}:".encode())
                digest.update(value.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
            else:
                digest.update(f"{part}.{key}={value!r};".encode())
    return digest.hexdigest()


def policy_only(payload: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint cut down to what acting reads (`POLICY_KEYS`): the policy and its observation
    statistics, the run's settings, knobs, spaces and training seeds, without the optimizer and
    RNG states a resume needs (a third of the size), and the clonings it had. Evaluation reads it as
    it reads the checkpoint; `esper ppo --init-policy` starts a new run from it."""
    cut = {key: payload[key] for key in ("format", *POLICY_KEYS)}
    if "clonings" in payload:
        cut["clonings"] = payload["clonings"]
    cut["learner"] = {key: payload["learner"][key] for key in POLICY_KEYS["learner"]}
    acting = (*POLICY_KEYS["trainer"], *ACTING_OPTIONAL_TRAINER_KEYS)
    cut["trainer"] = {key: value for key, value in payload["trainer"].items() if key in acting}
    return cut


def latest_checkpoint(run_dir: Path) -> tuple[Path | None, list[tuple[Path, str]]]:
    """The newest checkpoint of `run_dir` that reads as complete (None if there is none), and the
    newer ones skipped because they did not, each with the reason: a kill or a full disk can damage
    at most the file being written, so the one before it is the last complete round."""
    skipped: list[tuple[Path, str]] = []
    for path in sorted((run_dir / "checkpoints").glob("round-*.pt"), key=checkpoint_round, reverse=True):
        if checkpoint_round(path) < 0:
            continue
        try:
            read_checkpoint(path)
        except CheckpointError as exc:
            skipped.append((path, str(exc)))
            continue
        return path, skipped
    return None, skipped


def check_resumable(
    path: Path, payload: dict[str, Any], episodes: int, spaces: dict[str, Any], finished_ok: bool = False
) -> None:
    """The run has episodes left to go (or none, if `finished_ok`: a run resumed only to write its
    summary), and the policy fits the spaces this run builds."""
    done = int(payload["learner"]["episodes_done"])
    if episodes < done or (episodes == done and not finished_ok):
        raise CheckpointError(f"--episodes {episodes} is already reached: the checkpoint has {done} episodes done")
    check_compatible(path, payload["spaces"], spaces)


def checkpoint_path(run_dir: Path, round_index: int) -> Path:
    return run_dir / "checkpoints" / f"round-{round_index:04d}.pt"


def checkpoint_round(path: Path) -> int:
    """The round a checkpoint file is named for (-1 for a name not of that form)."""
    try:
        return int(path.stem.removeprefix("round-"))
    except ValueError:
        return -1


def later_checkpoints(run_dir: Path, round_index: int) -> list[str]:
    """Names of the checkpoints of `run_dir` from rounds after `round_index`."""
    return sorted(p.name for p in (run_dir / "checkpoints").glob("round-*.pt") if checkpoint_round(p) > round_index)


def check_compatible(path: Path, saved: dict[str, Any], current: dict[str, Any]) -> None:
    """The saved observation layout and action space must equal the current ones."""
    for key in current:
        if saved.get(key) != current[key]:
            raise CheckpointError(
                f"checkpoint {str(path)!r} does not fit this run's {key.replace('_', ' ')}: "
                + _difference(saved.get(key), current[key])
            )


def _difference(saved: object, current: object) -> str:
    """Where two values first differ: for lists, the first differing entry and the lengths."""
    if isinstance(saved, list) and isinstance(current, list):
        for i, (a, b) in enumerate(zip(saved, current, strict=False)):
            if a != b:
                return f"entry {i} is {a!r} in the checkpoint and {b!r} here ({len(saved)} vs {len(current)} entries)"
        return f"the checkpoint has {len(saved)} entries, this run {len(current)}"
    return f"saved {_short(saved)}, this run has {_short(current)}"


def _short(value: object, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def checkpoint_payload(
    learner: Learner,
    settings: dict[str, Any],
    trainer: dict[str, Any],
    knobs: dict[str, Any],
    spaces: dict[str, Any],
    training_seeds: list[int],
    run_dir: Path,
    ctx: DistContext = SINGLE_PROCESS,
) -> dict[str, Any]:
    """The checkpoint of a run as of now (a collective under `torchrun`: every rank calls it)."""
    return {
        "learner": learner_state(learner, ctx),
        "settings": settings,
        "trainer": trainer,
        "knobs": knobs,
        "spaces": spaces,
        "training_seeds": list(training_seeds),
        "run_dir": str(run_dir),
    }


def rng_state(learner: Learner) -> dict[str, torch.Tensor]:
    return {
        "torch": torch.get_rng_state(),
        "sample": learner.sample_generator.get_state(),
        "update": learner.update_generator.get_state(),
        "data": learner.data_generator.get_state(),
    }


def learner_state(learner: Learner, ctx: DistContext = SINGLE_PROCESS) -> dict:
    """Everything needed to continue exactly: weights, optimizer, normalizer, counters, and the
    RNG states of every rank (a collective under `torchrun`: every rank must call it)."""
    ranks = [rng_state(learner)]
    if ctx.enabled:
        ranks = [None] * ctx.world_size
        torch.distributed.all_gather_object(ranks, rng_state(learner))
    return {
        "policy": learner.policy.state_dict(),
        "optimizer": learner.optimizer.state_dict(),
        "obs_norm": learner.obs_norm.state_dict(),
        "rng_ranks": ranks,
        "round": learner.round,
        "episodes_done": learner.episodes_done,
        "global_step": learner.global_step,
    }


def load_learner_state(learner: Learner, state: dict, ctx: DistContext = SINGLE_PROCESS) -> None:
    """Restore a learner. Each rank takes its own RNG states; resuming with another number of
    ranks reuses them modulo the saved count (the run goes on, but not bit for bit)."""
    learner.policy.load_state_dict(state["policy"])
    learner.optimizer.load_state_dict(state["optimizer"])
    learner.obs_norm.load_state_dict(state["obs_norm"])
    ranks = state["rng_ranks"]
    rng = ranks[ctx.rank % len(ranks)]
    torch.set_rng_state(rng["torch"])
    learner.sample_generator.set_state(rng["sample"])
    learner.update_generator.set_state(rng["update"])
    learner.data_generator.set_state(rng["data"])
    learner.round, learner.episodes_done = int(state["round"]), int(state["episodes_done"])
    learner.global_step = int(state["global_step"])
