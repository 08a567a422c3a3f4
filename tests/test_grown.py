"""A grown network saved at the end of an episode loads for inference with the same test accuracy."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
import esper
from conftest import make_env, tiny_shapes_data, tiny_shapes_task
from esper.karn import write_torch_atomic
from esper.leyline import Decision, GateThresholds, LifecycleOp, SeedStage
from esper.scripts.cli import main
from esper.tolaria import TASKS
from esper.tolaria.grown import GROWN_FORMAT, read_grown


@torch.no_grad()
def plain_test_accuracy(model: torch.nn.Module) -> float:
    """What a user would write: the loaded module's forward over the test split."""
    correct = total = 0
    for x, y in tiny_shapes_data().test_batches(500):
        correct += int((model(x).argmax(dim=-1) == y).sum())
        total += y.numel()
    return 100.0 * correct / total


def grow_one_episode(germinate_at: dict[int, str]):
    env = make_env(max_epochs=6)
    env.reset(0)
    for epoch in range(env.config.max_epochs):
        slot = germinate_at.get(epoch)
        env.step(Decision(LifecycleOp.GERMINATE, slot, "conv_light") if slot else Decision.wait())
    return env


def test_a_grown_network_reloads_with_the_test_accuracy_of_its_episode(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setitem(TASKS, "shapes", tiny_shapes_task())
    env = grow_one_episode({0: "early", 1: "mid"})
    stages = {s.slot_id.name: s.stage for s in env.model.ordered_slots()}
    assert {stages["early"], stages["mid"]} & {SeedStage.BLENDING, SeedStage.PROBATIONARY, SeedStage.FOSSILIZED}
    test = env.evaluate_test()
    path = tmp_path / "grown.pt"
    write_torch_atomic(path, env.grown_network({"final_test_accuracy": test.accuracy}))

    model = esper.load_grown(path)
    assert not model.training
    assert plain_test_accuracy(model) == test.accuracy
    assert {s.slot_id.name: s.stage for s in model.ordered_slots()} == stages
    assert read_grown(path)["record"]["final_test_accuracy"] == test.accuracy


def test_a_network_with_residual_seeds_is_no_plain_host(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setitem(TASKS, "shapes", tiny_shapes_task())
    env = grow_one_episode({0: "early"})
    path = tmp_path / "grown.pt"
    write_torch_atomic(path, env.grown_network({}))
    with pytest.raises(ValueError, match=r"holds seed modules a plain host cannot: early \(conv_light\)"):
        esper.load_grown(path, plain=True)


def test_the_file_holds_the_statistics_the_test_used_not_the_running_average(tmp_path: Path, monkeypatch) -> None:
    """Without the recalibrated BatchNorm statistics the reloaded accuracy would differ: the
    saved buffers are not the module's running averages."""
    monkeypatch.setitem(TASKS, "shapes", tiny_shapes_task())
    env = grow_one_episode({0: "mid"})
    payload = env.grown_network({})
    running = env.model.state_dict()
    names = [n for n in payload["state_dict"] if n.endswith("running_mean")]
    assert names and any(not torch.equal(payload["state_dict"][n], running[n]) for n in names)


def test_a_heuristic_run_saves_each_episode_readable_by_the_group(
    tmp_path: Path, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(TASKS, "shapes", tiny_shapes_task())
    run_dir = tmp_path / "run"
    assert main(["heuristic", "--episodes", "2", "--run-dir", str(run_dir), "--quiet"]) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    for episode, accuracy in enumerate(summary["final_test_accuracy_per_episode"]):
        path = run_dir / "grown" / f"episode-{episode:04d}.pt"
        assert stat.S_IMODE(path.stat().st_mode) & 0o040, "group-readable"
        assert plain_test_accuracy(esper.load_grown(path)) == accuracy


def test_a_file_that_is_not_a_grown_network_is_refused_by_name(tmp_path: Path) -> None:
    other = tmp_path / "other.pt"
    torch.save({"format": "something-else"}, other)
    with pytest.raises(ValueError, match=rf"other.pt.*{GROWN_FORMAT}"):
        esper.load_grown(other)
    with pytest.raises(FileNotFoundError, match=r"missing\.pt"):
        esper.load_grown(tmp_path / "missing.pt")


def test_merged_width_seeds_reload_as_a_plain_host_with_the_episode_test_accuracy(tmp_path: Path, monkeypatch) -> None:
    """A fossilized width seed is merged into the host's tensors: the file reloads as a host of
    standard layers, wider where it grew, with the test accuracy its episode recorded."""
    monkeypatch.setitem(TASKS, "shapes", tiny_shapes_task())
    quick = GateThresholds(
        min_training_epochs=1, blend_epochs=1, fossilize_min_contribution=-100.0, probation_cull_contribution=-100.0
    )
    env = make_env(max_epochs=6, thresholds=quick)
    env.reset(0)
    env.step(Decision(LifecycleOp.GERMINATE, "mid", "widen_50"))
    while not env.episode_over:
        lifecycle = env.model.slot("mid").lifecycle
        probation = lifecycle.gate_fossilize(contribution=1.0).passed
        env.step(Decision(LifecycleOp.FOSSILIZE, "mid") if probation else Decision.wait())
    slot = env.model.slot("mid")
    assert slot.stage is SeedStage.FOSSILIZED and slot.seed is None
    mid = next(s for s in env.signals.slots if s.name == "mid")
    assert (mid.alpha, mid.param_count, mid.blueprint) == (1.0, slot.param_count(), "widen_50")
    test = env.evaluate_test()
    path = tmp_path / "grown.pt"
    write_torch_atomic(path, env.grown_network({"final_test_accuracy": test.accuracy}))

    model = esper.load_grown(path)
    assert plain_test_accuracy(model) == test.accuracy
    host = esper.load_grown(path, plain=True)
    assert plain_test_accuracy(host) == test.accuracy  # the host alone: nothing else is left
    # width 4 host: mid's block had 8 hidden and 8 output channels; the late block reads the 4 new ones
    assert model.host.segments[1][0].out_channels == model.host.segments[1][3].out_channels == 8 + 4
    assert model.host.segments[2][0].in_channels == 8 + 4
    leaves = [m for m in host.modules() if not list(m.children())]
    assert {type(m) for m in leaves} <= {
        torch.nn.Conv2d, torch.nn.BatchNorm2d, torch.nn.ReLU, torch.nn.MaxPool2d,
        torch.nn.AdaptiveAvgPool2d, torch.nn.Flatten, torch.nn.Linear,
    }  # fmt: skip
    # conv_in 4 -> 4, conv_out 4 -> 8, conv_new 8 + 4 -> 4, two BatchNorms, next_in 4 -> 16
    assert model.slot("mid").param_count() == 9 * 4 * (4 + 8 + 8 + 4) + 4 * 4 + 9 * 4 * 16


def test_a_rollback_of_the_step_that_merged_puts_the_live_seed_back(monkeypatch) -> None:
    """The governor undoes the FOSSILIZE step whole: the narrower host, the live width seed and
    its own optimizer come back, and the merge happens again on the next FOSSILIZE."""
    quick = GateThresholds(
        min_training_epochs=1, blend_epochs=1, fossilize_min_contribution=-100.0, probation_cull_contribution=-100.0
    )
    env = make_env(max_epochs=8, thresholds=quick)
    env.reset(0)
    env.step(Decision(LifecycleOp.GERMINATE, "mid", "widen_50"))
    while not env.model.slot("mid").lifecycle.gate_fossilize(contribution=1.0).passed:
        env.step(Decision.wait())
    host_width = env.model.host.segments[1][0].out_channels
    monkeypatch.setattr(env.governor, "judge", lambda train_loss, val_loss: "forced panic")
    result = env.step(Decision(LifecycleOp.FOSSILIZE, "mid"))
    assert result.panic is not None
    slot = env.model.slot("mid")
    assert slot.stage is SeedStage.PROBATIONARY and slot.holds_width_seed
    assert env.model.host.segments[1][0].out_channels == host_width and list(env.optimizers.seeds) == ["mid"]
    host_params = [id(p) for group in env.optimizers.host.param_groups for p in group["params"]]
    assert host_params == [id(p) for p in env.model.host_parameters()]
    monkeypatch.undo()
    env.step(Decision(LifecycleOp.FOSSILIZE, "mid"))
    assert slot.seed is None and env.model.host.segments[1][0].out_channels == host_width + 4
    assert env.optimizers.seeds == {}
