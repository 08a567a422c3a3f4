"""torch.compile of the host's training forward: what recompiles, and that steady state does not."""

from __future__ import annotations

import math

import pytest
import torch

from conftest import make_env
from esper.leyline import Decision, LifecycleOp


class CountingBackend:
    """A dynamo backend that runs the captured graph eagerly and counts compilations."""

    def __init__(self) -> None:
        self.compilations = 0

    def __call__(self, graph_module: torch.fx.GraphModule, example_inputs):
        self.compilations += 1
        return graph_module.forward


@pytest.mark.slow
def test_steady_state_epochs_do_not_recompile_and_growth_does() -> None:
    torch._dynamo.reset()
    backend = CountingBackend()
    env = make_env(max_epochs=8, compile_backend=backend)
    env.reset(0)
    env.step(Decision.wait())
    first = backend.compilations
    assert first >= 1
    for _ in range(2):
        result = env.step(Decision.wait())
        assert math.isfinite(result.signals.train_loss)
    assert backend.compilations == first  # same graph: no lifecycle change
    env.step(Decision(LifecycleOp.GERMINATE, "mid", "conv_light"))
    assert backend.compilations > first  # a new module in the graph
    grown = backend.compilations
    env.step(Decision.wait())  # the seed trains in isolation: same stage, same graph
    assert backend.compilations == grown


def test_a_new_episode_of_the_same_host_reuses_the_graph() -> None:
    torch._dynamo.reset()
    backend = CountingBackend()
    env = make_env(max_epochs=2, compile_backend=backend)
    env.reset(0)
    env.step(Decision.wait())
    count = backend.compilations
    env.reset(1)
    env.step(Decision.wait())
    assert backend.compilations == count


def test_compiled_training_matches_eager() -> None:
    torch._dynamo.reset()
    eager, compiled = make_env(max_epochs=2), make_env(max_epochs=2, compile_backend=CountingBackend())
    eager.reset(0)
    compiled.reset(0)
    a, b = eager.step(Decision.wait()), compiled.step(Decision.wait())
    assert math.isclose(a.signals.train_loss, b.signals.train_loss, rel_tol=1e-5)
