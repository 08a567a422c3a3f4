"""The run summary of a run of episodes."""

from __future__ import annotations

from collections.abc import Sequence
from statistics import fmean
from typing import Any

from esper.tolaria.episode import EpisodeOutcome


def episode_summary(
    task: str,
    controller: str,
    slot_names: Sequence[str],
    outcomes: Sequence[EpisodeOutcome],
    splits: dict[str, int],
    config: dict[str, Any],
) -> dict[str, Any]:
    """Summary of a run of one or more episodes.

    `final_test_accuracy` (the test split, read only after each episode), `final_val_accuracy`
    (the selection split every decision read) and `seed_params` are means over episodes (exact
    for one episode); `splits` gives the size of each split; `slots` lists, for each slot in
    host order, every seed it held in any episode.
    """
    if not outcomes:
        raise ValueError("a summary needs at least one finished episode")
    slots: dict[str, list[dict[str, Any]]] = {name: [] for name in slot_names}
    for outcome in outcomes:
        for record in outcome.records:
            slots[record.slot].append({"episode": outcome.episode, **record.to_json()})
    return {
        "task": task,
        "controller": controller,
        "episodes": len(outcomes),
        "splits": splits,
        "final_test_accuracy": fmean(o.final_test_accuracy for o in outcomes),
        "final_test_accuracy_per_episode": [o.final_test_accuracy for o in outcomes],
        "final_val_accuracy": fmean(o.final_val_accuracy for o in outcomes),
        "final_val_accuracy_per_episode": [o.final_val_accuracy for o in outcomes],
        "host_params": outcomes[0].host_params,
        "seed_params": fmean(o.seed_params for o in outcomes),
        "seed_params_per_episode": [o.seed_params for o in outcomes],
        "rollbacks": sum(o.rollbacks for o in outcomes),
        "seconds": sum(o.seconds for o in outcomes),
        "slots": slots,
        "episode_results": [o.to_json() for o in outcomes],
        "config": config,
    }
