"""An optional Weights & Biases backend (`--track`; `pip install 'esper[wandb]'`).

It logs what a dashboard compares across runs: each PPO round's row against `global_step`, and
for other runs each episode's end (final test and selection accuracy, seed parameters) against
the episode. The per-epoch curves stay in TensorBoard and the run directory. `WANDB_MODE=offline`
keeps everything on disk (`RUN/wandb/`), to sync later with `wandb sync`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from esper.nissa.telemetry import ROUND_METRICS, Event

INSTALL_HINT = "pip install 'esper[wandb]'"


def wandb_available() -> bool:
    try:
        import wandb  # noqa: F401
    except ImportError:
        return False
    return True


class WandbBackend:
    def __init__(self, run_dir: Path, config: dict[str, Any], project: str) -> None:
        import wandb

        self._run = wandb.init(project=project, name=run_dir.name, dir=str(run_dir), config=config)

    def write(self, event: Event) -> None:
        if event.kind == ROUND_METRICS:
            self._run.log({k: v for k, v in event.data.items() if "/" in k}, step=int(event.data["global_step"]))
        elif event.kind == "episode_end":
            d = event.data
            row = {f"host/{k}": d[k] for k in ("final_test_accuracy", "final_val_accuracy", "seed_params")}
            self._run.log(row, step=event.episode)

    def close(self) -> None:
        self._run.finish()
