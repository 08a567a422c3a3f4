"""MorphogeneticModel: a host with a SeedSlot after each of its segments."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence

import torch
from torch import nn
from torch.func import functional_call
from torch.nn.modules.batchnorm import _BatchNorm

from esper.kasmina.hosts import Host
from esper.kasmina.optimizers import ModelOptimizers
from esper.kasmina.slot import SeedJoin, SeedSlot
from esper.kasmina.width import Inflow, ParamMerge
from esper.leyline import GateThresholds, SeedStage, SlotId

SEGMENTS = "host.segments"
SLOTS = "slots"

BatchNormStats = Mapping[str, torch.Tensor]
"""Running statistics of some BatchNorm layers of a model, by qualified buffer name
(`host.segments.2.0.running_mean`, `slots.mid.seed.1.running_var`). A forward argument, like
the alpha overrides: a counterfactual arm is measured with the statistics of its own network,
and no module's buffers are written. (`torch.func.functional_call` swaps the given tensors into
the segment or slot for the duration of its call, so a module must not run in two threads at
once with different statistics.)"""


def _stats_by_part(stats: BatchNormStats | None) -> dict[str, dict[str, torch.Tensor]]:
    """Group qualified buffer names by the segment or slot they live in, with local names."""
    parts: dict[str, dict[str, torch.Tensor]] = {}
    for name, tensor in (stats or {}).items():
        depth = 3 if name.startswith(SEGMENTS + ".") else 2  # host.segments.N.rest or slots.NAME.rest
        pieces = name.split(".", depth)
        if len(pieces) <= depth:
            raise ValueError(f"{name!r} is not a buffer inside a host segment or a slot")
        parts.setdefault(".".join(pieces[:depth]), {})[pieces[depth]] = tensor
    return parts


class MorphogeneticModel(nn.Module):
    """Host segments interleaved with seed slots: seg0 -> slot0 -> seg1 -> slot1 -> ... -> head.

    The counterfactual is a forward argument: `alpha_overrides={"mid": 0.0}` runs the model as
    if the `mid` seed were absent, without mutating any module, so it is safe under threads,
    torch.compile and DDP. BatchNorm statistics are a forward argument too (`batchnorm_stats`): an
    ablated arm is measured with the statistics of its own network, not those collected with the
    seed in place.
    """

    def __init__(self, host: Host, thresholds: GateThresholds | None = None) -> None:
        super().__init__()
        self.host = host
        self.slot_ids: tuple[SlotId, ...] = host.slot_ids
        thresholds = thresholds or GateThresholds()
        self.slots = nn.ModuleDict(
            {
                sid.name: SeedSlot(sid, dim, host.topology, thresholds, host)
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
    def forward(
        self,
        x: torch.Tensor,
        alpha_overrides: Mapping[str, float] | None = None,
        batchnorm_stats: BatchNormStats | None = None,
    ) -> torch.Tensor:
        """`alpha_overrides` replaces slots' alphas; `batchnorm_stats` replaces the running
        statistics of the BatchNorm layers it names. Neither touches any module state."""
        overrides = self._check_overrides(alpha_overrides)
        return self._run_from(0, x, None, overrides, _stats_by_part(batchnorm_stats))

    def forward_with_ablations(
        self,
        x: torch.Tensor,
        ablate: Sequence[str],
        batchnorm_stats: BatchNormStats | None = None,
        ablated_batchnorm_stats: Mapping[str, BatchNormStats] | None = None,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The normal output and, for each slot in `ablate`, the output with that slot's alpha at 0.

        The host activations entering an ablated seed are computed once by the normal pass and
        reused: each ablation only reruns the network from where its seed joins (the slot for a
        residual seed, the segment before it for a width seed) onward, through the same
        `_run_from` as `forward`, so it equals
        `forward(x, {slot: 0.0}, ablated_batchnorm_stats[slot])` exactly (the prefix a slot's
        ablation shares runs with `batchnorm_stats`). Each ablated arm's BatchNorm layers
        downstream of its seed read that arm's own statistics, when given.
        """
        entry = {name: self._entry(name) for name in ablate}
        arm_stats = ablated_batchnorm_stats or {}
        captured: dict[int, tuple[torch.Tensor, Inflow | None]] = {}
        out = self._run_from(0, x, None, {}, _stats_by_part(batchnorm_stats), captured, set(entry.values()))
        ablated = {
            name: self._run_from(entry[name], *captured[entry[name]], {name: 0.0}, _stats_by_part(arm_stats.get(name)))
            for name in ablate
        }
        return out, ablated

    def _entry(self, slot: str) -> int:
        """Where slot `slot`'s seed joins the network, as a position of `_run_from`: 2i is the
        input of segment i, 2i + 1 the input of slot i."""
        s = self.slot(slot)
        return 2 * s.slot_id.index + (0 if s.holds_width_seed else 1)

    def _run_from(
        self,
        start: int,
        h: torch.Tensor,
        inflow: Inflow | None,
        overrides: Mapping[str, float],
        parts: Mapping[str, dict[str, torch.Tensor]],
        captured: dict[int, tuple[torch.Tensor, Inflow | None]] | None = None,
        capture_at: set[int] = frozenset(),  # type: ignore[assignment]
    ) -> torch.Tensor:
        """Run from position `start` (see `_entry`) to the output, with `inflow` into the next
        segment's first layer (a CNN width seed's new channels from the segment before); keep
        the inputs of the positions in `capture_at` in `captured`."""
        segments, n_slots = self.host.segments, len(self.slot_ids)
        for position in range(start, 2 * n_slots + 1):
            if captured is not None and position in capture_at:
                captured[position] = (h, inflow)
            index = position // 2
            if position % 2:
                name = self.slot_ids[index].name
                h = self._part(f"{SLOTS}.{name}", self.slots[name], parts, h, overrides.get(name))
                continue
            join = self._widening(index, overrides, parts) if index < n_slots else None
            extra: dict[str, object] = {} if join is None else {"widening": join}
            if inflow is not None:
                extra["inflow"] = inflow
            h = self._part(f"{SEGMENTS}.{index}", segments[index], parts, h, **extra)
            inflow = None if join is None else join.inflow
        return h

    def _widening(
        self, index: int, overrides: Mapping[str, float], parts: Mapping[str, dict[str, torch.Tensor]]
    ) -> SeedJoin | None:
        """The width seed of slot `index` as its segment's widening (None without one), with the
        seed's own BatchNorm statistics from `parts`, if given."""
        name = self.slot_ids[index].name
        slot: SeedSlot = self.slots[name]  # type: ignore[assignment]
        if not slot.holds_width_seed:
            return None
        seed_stats = {
            local.removeprefix("seed."): tensor
            for local, tensor in parts.get(f"{SLOTS}.{name}", {}).items()
            if local.startswith("seed.")
        }
        return slot.widening(overrides.get(name), seed_stats)

    @staticmethod
    def _part(
        prefix: str, module: nn.Module, parts: Mapping[str, dict[str, torch.Tensor]], *args, **kwargs
    ) -> torch.Tensor:
        """Call one segment or slot, with the BatchNorm statistics given for it, if any."""
        stats = parts.get(prefix)
        return module(*args, **kwargs) if not stats else functional_call(module, stats, args, kwargs)

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

    def configure_optimizers(self, host_lr: float, seed_lr: float, weight_decay: float) -> ModelOptimizers:
        """The host's AdamW, ready to take one per seed as seeds are germinated (as nanoGPT's
        `configure_optimizers` sits beside its model)."""
        device = next(self.parameters()).device
        return ModelOptimizers(self.host_parameters(), device, host_lr, seed_lr, weight_decay)

    def host_param_count(self) -> int:
        """The host's parameters as it was built: a merged width seed's stay counted as its
        slot's (`SeedSlot.param_count`), so a merge changes no count of growth."""
        merged = sum(s.merged_params for s in self.ordered_slots())
        return sum(p.numel() for p in self.host.parameters()) - merged

    def merge_width_seed(self, slot: str) -> list[ParamMerge]:
        """Merge the fossilized width seed of `slot` into the host's layer pair (outputs unchanged),
        and return the replaced host parameters for the optimizer to carry
        (`ModelOptimizers.merge_seed`)."""
        s = self.slot(slot)
        if not s.holds_width_seed or s.stage is not SeedStage.FOSSILIZED or not s.alpha > 0.0:
            raise ValueError(f"slot {slot!r} holds no fossilized width seed to merge")
        merges = self.host.merge_width(s.slot_id.index, s.seed, s.alpha)  # type: ignore[arg-type]
        s.absorb_merged(sum(m.new.numel() - m.old.numel() for m in merges))
        return merges

    def batchnorm_layers(self, after_slot: str | None = None) -> dict[str, _BatchNorm]:
        """BatchNorm layers with running statistics that an inference forward runs, by qualified
        name in forward order: the host's and those of blended seeds. With `after_slot`, only
        those downstream of where that slot's seed joins (for a width seed, from the segment
        before the slot on): the ones whose input changes when its seed is ablated."""
        first = 0 if after_slot is None else self._entry(after_slot)
        blended = set(self.blended_slots()) - {after_slot}
        n_slots = len(self.slot_ids)
        parts: list[tuple[str, nn.Module]] = []
        for position in range(first, 2 * n_slots + 1):
            index, at_segment = position // 2, position % 2 == 0
            if at_segment:
                parts.append((f"{SEGMENTS}.{index}", self.host.segments[index]))
            name = self.slot_ids[index].name if index < n_slots else None
            # a blended seed runs where it joins: a width seed inside its segment, a residual one at its slot
            if name in blended and self.slots[name].holds_width_seed == at_segment:
                parts.append((f"{SLOTS}.{name}", self.slots[name]))
        return {
            f"{prefix}.{name}": module
            for prefix, part in parts
            for name, module in part.named_modules()
            if isinstance(module, _BatchNorm) and module.track_running_stats
        }

    def blended_slots(self) -> tuple[str, ...]:
        """Slots whose seed currently contributes to the output (alpha > 0), in host order."""
        return tuple(s.slot_id.name for s in self.ordered_slots() if s.seed is not None and s.alpha > 0.0)
