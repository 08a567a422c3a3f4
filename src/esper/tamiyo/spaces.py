"""What a learned controller is shaped for: its observation layout and its action space.

Both follow from a host's topology and slot names (and the blueprints a run allows), which a task
declares without building its host; this is the one place they are derived.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from esper.kasmina.blueprints import Topology, blueprint_names
from esper.tamiyo.actions import HEADS, ActionSpace
from esper.tamiyo.features import ObservationLayout


@dataclass(frozen=True)
class PolicySpaces:
    layout: ObservationLayout
    actions: ActionSpace

    @staticmethod
    def derive(
        topology: Topology,
        slot_names: Sequence[str],
        blueprints: Sequence[str] | None = None,
        observe_budget: bool = False,
    ) -> PolicySpaces:
        """The spaces of a policy for a host's slots; `blueprints` narrows the blueprint head, and
        the width blueprints among them join the head and the observation's blueprint one-hot;
        `observe_budget` adds the compute budget's block for the head's blueprints."""
        slots = tuple(slot_names)
        actions = ActionSpace(topology, slots, blueprints)
        width = tuple(b for b in actions.blueprints if b not in blueprint_names(topology))
        budget = actions.choosable_blueprints if observe_budget else ()
        return PolicySpaces(ObservationLayout(topology, slots, width, budget), actions)

    def signature(self) -> dict:
        """What a policy's weights are shaped for, as plain data: a checkpoint records it, and a
        run that resumes or loads the policy must have the same."""
        return {
            "observation_layout": list(self.layout.feature_names()),
            "action_heads": {name: size for name, size in zip(HEADS, self.actions.head_sizes, strict=True)},
            "blueprints": list(self.actions.blueprints),
        }
