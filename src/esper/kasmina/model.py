"""MorphogeneticModel: a host with a SeedSlot after each of its segments."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence

import torch
from torch import nn

from esper.kasmina.hosts import Host
from esper.kasmina.slot import SeedSlot
from esper.leyline import GateThresholds, SlotId


class MorphogeneticModel(nn.Module):
    """Host segments interleaved with seed slots: seg0 -> slot0 -> seg1 -> slot1 -> ... -> head.

    The counterfactual is a forward argument: `alpha_overrides={"mid": 0.0}` runs the model as
    if the `mid` seed were absent, without mutating any module, so it is safe under threads,
    torch.compile and DDP.
    """

    def __init__(self, host: Host, thresholds: GateThresholds | None = None) -> None:
        super().__init__()
        self.host = host
        self.slot_ids: tuple[SlotId, ...] = host.slot_ids
        thresholds = thresholds or GateThresholds()
        self.slots = nn.ModuleDict(
            {
                sid.name: SeedSlot(sid, dim, host.topology, thresholds)
                for sid, dim in zip(host.slot_ids, host.slot_dims, strict=True)
            }
        )

    @property
    def topology(self):
        return self.host.topology

    def slot(self, name: str) -> SeedSlot:
        if name not in self.slots:
            raise ValueError(f"unknown slot {name!r}; this host's slots are: {' '.join(s.name for s in self.slot_ids)}")
        return self.slots[name]  # type: ignore[return-value]

    def ordered_slots(self) -> Iterator[SeedSlot]:
        """Slots in host order (never dict order)."""
        for sid in self.slot_ids:
            yield self.slots[sid.name]  # type: ignore[misc]

    # ----------------------------------------------------------------- forward passes
    def forward(self, x: torch.Tensor, alpha_overrides: Mapping[str, float] | None = None) -> torch.Tensor:
        overrides = self._check_overrides(alpha_overrides)
        return self._run_from(0, self.host.segments[0](x), overrides)

    def forward_with_ablations(
        self, x: torch.Tensor, ablate: Sequence[str]
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The normal output and, for each slot in `ablate`, the output with that slot's alpha at 0.

        The host activations entering an ablated slot are computed once by the normal pass and
        reused: each ablation only reruns the network from its slot onward, through the same
        `_run_from` as `forward`, so it equals `forward(x, {slot: 0.0})` exactly.
        """
        index = {sid.name: sid.index for sid in self.slot_ids}
        for name in ablate:
            self.slot(name)
        captured: dict[int, torch.Tensor] = {}
        capture_at = {index[name] for name in ablate}
        out = self._run_from(0, self.host.segments[0](x), {}, capture_at, captured)
        ablated = {name: self._run_from(index[name], captured[index[name]], {name: 0.0}) for name in ablate}
        return out, ablated

    def _run_from(
        self,
        start: int,
        h: torch.Tensor,
        overrides: Mapping[str, float],
        capture_at: set[int] | None = None,
        captured: dict[int, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Run from the input of slot `start` to the output; optionally keep slot inputs."""
        segments = self.host.segments
        for sid in self.slot_ids[start:]:
            if capture_at and sid.index in capture_at and captured is not None:
                captured[sid.index] = h
            h = self.slots[sid.name](h, overrides.get(sid.name))
            h = segments[sid.index + 1](h)
        return h

    def _check_overrides(self, overrides: Mapping[str, float] | None) -> Mapping[str, float]:
        if not overrides:
            return {}
        for name, alpha in overrides.items():
            self.slot(name)
            if not 0.0 <= alpha <= 1.0:
                raise ValueError(f"alpha override for slot {name!r} must be in [0, 1], got {alpha}")
        return overrides

    # ----------------------------------------------------------------- parameters
    def host_parameters(self) -> Iterable[nn.Parameter]:
        return self.host.parameters()

    def host_param_count(self) -> int:
        return sum(p.numel() for p in self.host.parameters())

    def seed_param_count(self) -> int:
        return sum(slot.param_count() for slot in self.ordered_slots())

    def blended_slots(self) -> tuple[str, ...]:
        """Slots whose seed currently contributes to the output (alpha > 0), in host order."""
        return tuple(s.slot_id.name for s in self.ordered_slots() if s.seed is not None and s.alpha > 0.0)
