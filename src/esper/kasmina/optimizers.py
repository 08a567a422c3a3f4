"""The optimizers of a morphogenetic model and their learning-rate schedule.

One AdamW for the host and one per seed: a seed is created and destroyed mid-run, and its
optimizer (with its moments) comes and goes with it, while the host's moments are never reset by
a seed's arrival. All follow one cosine schedule over the episode.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import nn

from esper.kasmina.slot import SeedSlot


def cosine_lr_factor(epoch: int, max_epochs: int) -> float:
    """Learning-rate multiplier for 1-based `epoch`: 1 at the first epoch, decaying on a half cosine.

    Every optimizer (host and seeds alike) follows the episode's clock, so a seed germinated late
    trains at the same, lower rate as the host around it, and the final accuracy of an episode is
    not the noise of a large last step.
    """
    return 0.5 * (1.0 + math.cos(math.pi * (epoch - 1) / max_epochs))


class ModelOptimizers:
    """The host's AdamW and one AdamW per seed, by slot name."""

    def __init__(
        self,
        host_parameters: Iterable[nn.Parameter],
        device: torch.device,
        host_lr: float,
        seed_lr: float,
        weight_decay: float,
    ) -> None:
        self.seed_lr, self.weight_decay = seed_lr, weight_decay
        # Fused on CUDA: one kernel per step, and GradScaler steps it without a host-device sync.
        self.fused = device.type == "cuda"
        self.host = self._adamw(host_parameters, host_lr)
        self.seeds: dict[str, torch.optim.Optimizer] = {}

    def add_seed(self, slot: str, params: Iterable[nn.Parameter]) -> None:
        self.seeds[slot] = self._adamw(params, self.seed_lr)

    def drop_seed(self, slot: str) -> None:
        self.seeds.pop(slot, None)

    def drop_missing(self, slots: Iterable[SeedSlot]) -> None:
        """Drop the optimizers of slots whose seed is gone (culled by a gate)."""
        for slot in slots:
            if slot.seed is None:
                self.drop_seed(slot.slot_id.name)

    def all(self) -> list[torch.optim.Optimizer]:
        return [self.host, *self.seeds.values()]

    def set_epoch(self, epoch: int, max_epochs: int) -> None:
        """Every learning rate at its base times the schedule's factor for 1-based `epoch`."""
        factor = cosine_lr_factor(epoch, max_epochs)
        for opt in self.all():
            for group in opt.param_groups:
                group["lr"] = group["base_lr"] * factor

    def state_dict(self) -> dict[str, dict]:
        states = {"host": self.host.state_dict()}
        states.update({f"seed:{name}": opt.state_dict() for name, opt in self.seeds.items()})
        return states

    def load_state_dict(self, states: dict[str, dict], slots: Iterable[SeedSlot]) -> None:
        """Restore the optimizers of a model's `slots` as they are now (their seeds already
        restored): one per seed they hold, each with its saved state."""
        self.host.load_state_dict(states["host"])
        self.seeds = {}
        for slot in slots:
            if slot.seed is not None:
                name = slot.slot_id.name
                self.add_seed(name, slot.seed.parameters())
                self.seeds[name].load_state_dict(states[f"seed:{name}"])

    def _adamw(self, params: Iterable[nn.Parameter], lr: float) -> torch.optim.Optimizer:
        opt = torch.optim.AdamW(params, lr=lr, weight_decay=self.weight_decay, fused=self.fused)
        for group in opt.param_groups:
            group["base_lr"] = lr
        return opt
