"""Esper: morphogenetic neural networks.

A host network grows seed modules in named slots while it trains. Each seed moves through a
gated lifecycle; a controller decides when, where and what to grow.
"""

__version__ = "0.1.0"

from esper.tolaria.grown import load_grown

__all__ = ["__version__", "load_grown"]
