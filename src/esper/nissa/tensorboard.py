"""A TensorBoard backend: the run's events as scalars and text in `RUN/tensorboard/`.

What goes where (`tensorboard --logdir runs` shows each run directory as one run):

- PPO rounds (`round_metrics` events): every metric under its CleanRL name (`charts/SPS`,
  `charts/episodic_return`, `losses/approx_kl`, `losses/old_approx_kl`, ...), plus the reward
  parts (`rewards/*`) and the op mix (`charts/op_*`), against `global_step`.
- Each episode's host (`epoch` events): `episode_NNNN/host/{train,val}_{accuracy,loss}` per
  epoch, and for each slot `episode_NNNN/slot_NAME/{alpha,stage,contribution}` (stage as its
  number, contribution where it was measured).
- Episode ends: `host/final_test_accuracy`, `host/final_val_accuracy` and `host/seed_params`
  against the episode number.
- Lifecycle events (`stage_change`, `governor_rollback`): text under `lifecycle/episode_NNNN`.
- `esper eval` (`eval_result` events): `eval/CONTROLLER/{test_accuracy,val_accuracy,seed_params}`
  against the seed.
- The resolved configuration: the HParams tab, and a text table as CleanRL writes it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from esper.leyline import SeedStage
from esper.nissa.telemetry import ROUND_METRICS, Event

EVAL_RESULT = "eval_result"
"""One controller's episode on one seed in `esper eval`."""
FINAL_METRICS = ("host/final_test_accuracy", "host/final_val_accuracy", "charts/final_test_accuracy")
"""Scalars the HParams tab shows beside the configuration."""


def flat_config(config: dict[str, Any], prefix: str = "") -> dict[str, float | int | str | bool]:
    """Nested settings as `group.knob` keys with scalar values (lists and None as text)."""
    flat: dict[str, float | int | str | bool] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flat_config(value, f"{name}."))
        elif isinstance(value, bool | int | float | str):
            flat[name] = value
        else:
            flat[name] = json.dumps(value)
    return flat


class TensorBoardBackend:
    """Writes through `torch.utils.tensorboard.SummaryWriter` (the `tensorboard` package)."""

    def __init__(self, log_dir: Path, config: dict[str, Any]) -> None:
        from torch.utils.tensorboard import SummaryWriter
        from torch.utils.tensorboard.summary import hparams

        self._writer = SummaryWriter(log_dir=str(log_dir))
        flat = flat_config(config)
        table = "\n".join(f"|{k}|{v}|" for k, v in flat.items())
        self._writer.add_text("hyperparameters", f"|param|value|\n|-|-|\n{table}")
        # The HParams tab, in this run's own event file (`add_hparams` would open a second run in
        # a sub-folder), with the final accuracies as its metric columns.
        experiment, session_start, session_end = hparams(flat, dict.fromkeys(FINAL_METRICS, 0.0))
        file_writer = self._writer._get_file_writer()
        for summary in (experiment, session_start, session_end):
            file_writer.add_summary(summary)

    def write(self, event: Event) -> None:
        """Every point carries the event's own time, so a board rebuilt from the files of record
        (at a resume) keeps the run's wall-clock axis instead of stamping it all with the rebuild."""
        d, when = event.data, event.time
        if event.kind == ROUND_METRICS:
            step = int(d["global_step"])
            for name, value in d.items():
                if "/" in name:
                    self._writer.add_scalar(name, value, step, walltime=when)
        elif event.kind == "epoch":
            self._epoch(event)
        elif event.kind == EVAL_RESULT:
            for name in ("test_accuracy", "val_accuracy", "seed_params"):
                self._writer.add_scalar(f"eval/{d['controller']}/{name}", d[name], event.episode, walltime=when)
        elif event.kind == "episode_end":
            for name in ("final_test_accuracy", "final_val_accuracy", "seed_params"):
                self._writer.add_scalar(f"host/{name}", d[name], event.episode, walltime=when)
        elif event.kind == "stage_change":
            text = f"epoch {event.epoch}: {d['slot']} {d['seed_id']} {d['source']} -> {d['target']} ({d['reason']})"
            self._writer.add_text(f"lifecycle/episode_{event.episode:04d}", text, event.epoch, walltime=when)
        elif event.kind == "governor_rollback":
            text = f"epoch {event.epoch}: governor rollback ({d['reason']})"
            self._writer.add_text(f"lifecycle/episode_{event.episode:04d}", text, event.epoch, walltime=when)

    def _epoch(self, event: Event) -> None:
        d, where, step, when = event.data, f"episode_{event.episode:04d}", event.epoch, event.time
        for name in ("train_accuracy", "val_accuracy", "train_loss", "val_loss"):
            self._writer.add_scalar(f"{where}/host/{name}", d[name], step, walltime=when)
        for slot in d["slots"]:
            prefix = f"{where}/slot_{slot['slot']}"
            self._writer.add_scalar(f"{prefix}/alpha", slot["alpha"], step, walltime=when)
            self._writer.add_scalar(f"{prefix}/stage", int(SeedStage[slot["stage"]]), step, walltime=when)
            if slot["contribution"] is not None:
                self._writer.add_scalar(f"{prefix}/contribution", slot["contribution"], step, walltime=when)

    def close(self) -> None:
        self._writer.close()
