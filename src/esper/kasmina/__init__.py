"""Kasmina: the morphogenetic model.

Hosts (CNN, GPT-style transformer) cut into segments with named slots between them; blueprints
(the seed modules a slot can grow); the seed lifecycle of each slot as a pure state machine;
alpha blending; gradient isolation; and `MorphogeneticModel`, whose forward takes per-slot alpha
overrides so the counterfactual never mutates module state.
"""

from esper.kasmina.blueprints import BLUEPRINTS, Blueprint, Topology, blueprint_names, get_blueprint
from esper.kasmina.hosts import CNNHost, Host, TransformerHost
from esper.kasmina.lifecycle import GateInputs, GateRefused, GateResult, SlotLifecycle, StageChange
from esper.kasmina.model import MorphogeneticModel
from esper.kasmina.slot import SeedSlot

__all__ = [
    "BLUEPRINTS",
    "Blueprint",
    "CNNHost",
    "GateInputs",
    "GateRefused",
    "GateResult",
    "Host",
    "MorphogeneticModel",
    "SeedSlot",
    "SlotLifecycle",
    "StageChange",
    "Topology",
    "TransformerHost",
    "blueprint_names",
    "get_blueprint",
]
