"""Esper: morphogenetic neural networks.

A host network grows seed modules in named slots while it trains. Each seed moves through a
gated lifecycle; a controller decides when, where and what to grow.
"""

__version__ = "0.1.0"

import gymnasium

from esper.tolaria.grown import load_grown

gymnasium.register(id="esper/Morphogenetic-v0", entry_point="esper.simic.gymnasium_adapter:make_morphogenetic_env")

__all__ = ["__version__", "load_grown"]
