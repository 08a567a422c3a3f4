"""The network an episode grew, as a file a researcher can load for inference.

A grown network is the host with every seed it holds at the end of its episode (fossilized, and
any still blending, at their alpha), with BatchNorm statistics recomputed on the training
images exactly as the episode's test measurement computed them. The file holds plain tensors,
ints and strings, so `torch.load(..., weights_only=True)` reads it; the task name and host
width say how to rebuild the host, and each slot's extra state says which seed to rebuild in it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from esper.kasmina import MorphogeneticModel
from esper.kasmina.model import BatchNormStats
from esper.tolaria.tasks import get_task

GROWN_FORMAT = "esper-grown-network-3"
"""Written into every grown-network file, and checked when one is loaded. Version 2: merged width
seeds (each widenable segment's width and each slot's `merged_params` in the state dict).
Version 3: CNN width seeds widen a whole block and the next layer's input (the classifier's
width and each live width seed's build site in the state dict)."""


def grown_payload(
    model: MorphogeneticModel,
    task_name: str,
    host_width: int,
    batchnorm_stats: BatchNormStats,
    amp: str | None,
    record: dict[str, Any],
) -> dict[str, Any]:
    """The file's contents: the model's state on the CPU with `batchnorm_stats` written into its
    BatchNorm buffers (the statistics the test measurement used), and how to rebuild it.

    `record` holds what the episode measured (test and selection accuracy, parameters, seed),
    so a loaded network can be checked against its run."""
    state = {
        name: value.detach().to("cpu", copy=True) if isinstance(value, torch.Tensor) else value
        for name, value in model.state_dict().items()
    }
    for name, tensor in batchnorm_stats.items():
        if name not in state:
            raise KeyError(f"BatchNorm statistic {name!r} is not a buffer of the model")
        state[name] = tensor.detach().to("cpu", dtype=state[name].dtype, copy=True)
    return {
        "format": GROWN_FORMAT,
        "task": task_name,
        "host_width": host_width,
        "amp": amp,
        "record": dict(record),
        "state_dict": state,
    }


def read_grown(path: str | Path) -> dict[str, Any]:
    """The file's contents, checked; a file that is not a grown network is a `ValueError` naming it."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no grown-network file at {str(path)!r}")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise ValueError(f"{str(path)!r} is not a grown-network file ({type(exc).__name__})") from exc
    if not isinstance(payload, dict) or payload.get("format") != GROWN_FORMAT:
        found = payload.get("format") if isinstance(payload, dict) else type(payload).__name__
        raise ValueError(f"{str(path)!r} is not a grown-network file (format {found!r}, expected {GROWN_FORMAT!r})")
    return payload


def load_grown(path: str | Path, device: str | torch.device = "cpu", plain: bool = False) -> torch.nn.Module:
    """The grown network in `path`, rebuilt and in eval mode, for inference.

    Its plain forward (`model(x)` under `torch.no_grad()`) gives the test accuracy the run
    recorded, exactly, on the device and precision the run used (a run with `--amp` measured under
    autocast; run the loaded model under the same `torch.autocast` to reproduce it). The
    lifecycle travels with it but nothing drives it: no seed changes stage after loading.

    With `plain`, the host network alone (`model.host`): standard layers only, wider where width
    seeds merged into it, the same as a static host of those widths. A network that still holds a
    residual seed module (which a plain host has no place for) is then a `ValueError` naming it.
    """
    payload = read_grown(path)
    task = get_task(payload["task"])
    model = MorphogeneticModel(task.build_host(payload["host_width"]))
    model.load_state_dict(payload["state_dict"])
    model = model.to(torch.device(device)).eval()
    if not plain:
        return model
    held = [f"{s.slot_id.name} ({s.blueprint})" for s in model.ordered_slots() if s.seed is not None]
    if held:
        raise ValueError(
            f"{str(path)!r} holds seed modules a plain host cannot: {', '.join(held)}; load it without plain"
        )
    return model.host
