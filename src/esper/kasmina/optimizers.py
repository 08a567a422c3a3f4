"""The optimizers of a morphogenetic model and their learning-rate schedule.

One AdamW for the host and one per seed: a seed is created and destroyed mid-run, and its
optimizer (with its moments) comes and goes with it, while the host's moments are never reset by
a seed's arrival. A width seed merged into the host hands its moments to the host's AdamW
(`merge_seed`). All follow one cosine schedule over the episode, and each seed warms up from its
germination as the host did from epoch 1 (`seed_warmup_factor`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import torch
from torch import nn

from esper.kasmina.slot import SeedSlot
from esper.kasmina.width import ParamMerge, fitted


def cosine_lr_factor(epoch: int, max_epochs: int, lr_warmup_epochs: int = 0) -> float:
    """Learning-rate multiplier for 1-based `epoch`: a linear ramp over the first `lr_warmup_epochs`
    (epoch k of W at k / (W + 1)), then 1, decaying on a half cosine over the epochs left.

    Every optimizer (host and seeds alike) follows the episode's clock, so a seed germinated late
    trains at the same, lower rate as the host around it, and the final accuracy of an episode is
    not the noise of a large last step. The ramp is per epoch, as the whole schedule is: a step
    of the rate within an epoch would change what one epoch of a seed's training means.
    """
    if not 0 <= lr_warmup_epochs < max_epochs:
        raise ValueError(f"lr_warmup_epochs must be >= 0 and below max_epochs {max_epochs}, got {lr_warmup_epochs}")
    if epoch <= lr_warmup_epochs:
        return epoch / (lr_warmup_epochs + 1)
    return 0.5 * (1.0 + math.cos(math.pi * (epoch - 1 - lr_warmup_epochs) / (max_epochs - lr_warmup_epochs)))


def seed_warmup_factor(seed_epoch: int, lr_warmup_epochs: int) -> float:
    """Learning-rate multiplier, on top of the episode's schedule, for a seed in the 1-based
    `seed_epoch` of its life (1: the epoch it was germinated in): the host's ramp, k / (W + 1),
    over its first W epochs, then 1.

    A seed arrives with fresh Adam moments, whose first updates are the largest, at whatever rate
    the episode has reached, long after the host's own warm-up. On shapes at host_lr 6e-3 with a
    3-epoch warm-up (seeds 150..159), this ramp moved naive width growth up by 0.54 points of test
    accuracy; the grown runs' spread stayed, and it is the width-8 host's own
    (experiments/lr-warmup). Without a warm-up (W = 0) the factor is 1, as before.
    """
    if seed_epoch < 1:
        raise ValueError(f"seed_epoch is 1-based, got {seed_epoch}")
    return seed_epoch / (lr_warmup_epochs + 1) if seed_epoch <= lr_warmup_epochs else 1.0


def _scale_lr(opt: torch.optim.Optimizer, factor: float) -> None:
    for group in opt.param_groups:
        group["lr"] = group["base_lr"] * factor


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

    def merge_seed(self, slot: str, merges: Sequence[ParamMerge]) -> None:
        """A width seed of `slot` was merged into the host (`MorphogeneticModel.merge_width_seed`):
        each replaced host parameter's place in the host AdamW goes to its merged parameter, whose
        moments are the host's followed by the seed's, and the seed's optimizer is dropped.

        The seed's moments are carried, not reset. Adam divides its moments by (1 - beta^t) for its
        own step count t, and the merged tensor steps on with the host's count, so the seed's first
        and second moments are rescaled by (1 - beta^t_host) / (1 - beta^t_seed): at the merge each
        new entry's bias-corrected moments, and so its next update, are what they were in the
        seed's AdamW. (Later updates follow the host's clock: a seed younger than the host would
        have weighted new gradients a little more. The new entries also take the host's learning
        rate.) A seed output weight scaled by alpha in the merge has gradients 1/alpha times the
        seed's: its moments are divided by alpha and alpha squared. An entry that had no state
        yet (no gradient), or that pads a seed to a neighbour merged before it, starts at zero
        moments.
        """
        seed_opt = self.seeds.pop(slot)
        beta1, beta2 = self.host.param_groups[0]["betas"]
        for merge in merges:
            host_state = self.host.state.pop(merge.old, None)
            self._replace_param(merge.old, merge.new)
            if host_state is None:
                continue  # the host has not stepped yet: the merged entry starts fresh
            step = host_state["step"]
            seed_state = seed_opt.state.get(merge.seed)
            moments = {}
            for key, beta, power in (("exp_avg", beta1, 1), ("exp_avg_sq", beta2, 2)):
                if seed_state is None:
                    carried = torch.zeros_like(merge.seed)
                else:
                    rescale = (1 - beta ** float(step)) / (1 - beta ** float(seed_state["step"]))
                    carried = seed_state[key] * (rescale / merge.scale**power)
                carried = fitted(carried, host_state[key].shape, merge.dim)
                moments[key] = torch.cat([host_state[key], carried], merge.dim)
            self.host.state[merge.new] = {"step": step, **moments}

    def drop_seed(self, slot: str) -> None:
        self.seeds.pop(slot, None)

    def drop_missing(self, slots: Iterable[SeedSlot]) -> None:
        """Drop the optimizers of slots whose seed is gone (culled by a gate)."""
        for slot in slots:
            if slot.seed is None:
                self.drop_seed(slot.slot_id.name)

    def all(self) -> list[torch.optim.Optimizer]:
        return [self.host, *self.seeds.values()]

    def set_epoch(
        self, epoch: int, max_epochs: int, lr_warmup_epochs: int = 0, seed_epochs: Mapping[str, int] | None = None
    ) -> None:
        """Every learning rate at its base times the schedule's factor for 1-based `epoch`; each
        seed's also times its own warm-up factor for `seed_epochs[slot]`, the 1-based epoch of its
        life (a seed not named there is past its warm-up)."""
        factor = cosine_lr_factor(epoch, max_epochs, lr_warmup_epochs)
        seed_epochs = seed_epochs or {}
        _scale_lr(self.host, factor)
        for name, opt in self.seeds.items():
            ramp = seed_warmup_factor(seed_epochs[name], lr_warmup_epochs) if name in seed_epochs else 1.0
            _scale_lr(opt, factor * ramp)

    def state_dict(self) -> dict[str, dict]:
        states = {"host": self.host.state_dict()}
        states.update({f"seed:{name}": opt.state_dict() for name, opt in self.seeds.items()})
        return states

    def load_state_dict(
        self, states: dict[str, dict], host_parameters: Iterable[nn.Parameter], slots: Iterable[SeedSlot]
    ) -> None:
        """Restore the optimizers of a model whose host and `slots` are as they are now (already
        restored): the host's over its parameters now (a merge may have replaced them), and one
        per seed the slots hold, each with its saved state."""
        self.host = self._adamw(host_parameters, self.host.param_groups[0]["base_lr"])
        self.host.load_state_dict(states["host"])
        self.seeds = {}
        for slot in slots:
            if slot.seed is not None:
                name = slot.slot_id.name
                self.add_seed(name, slot.seed.parameters())
                self.seeds[name].load_state_dict(states[f"seed:{name}"])

    def _replace_param(self, old: nn.Parameter, new: nn.Parameter) -> None:
        for group in self.host.param_groups:
            group["params"] = [new if p is old else p for p in group["params"]]

    def _adamw(self, params: Iterable[nn.Parameter], lr: float) -> torch.optim.Optimizer:
        opt = torch.optim.AdamW(params, lr=lr, weight_decay=self.weight_decay, fused=self.fused)
        for group in opt.param_groups:
            group["base_lr"] = lr
        return opt
