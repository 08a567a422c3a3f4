"""experiments/growth-frontier/frontier.py: the static front, grown points against it, and its refusals."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from conftest import EXPERIMENTS, load_benchmark
from esper.tolaria import get_task

frontier = load_benchmark("frontier", EXPERIMENTS / "growth-frontier")
PINNED = EXPERIMENTS / "growth-frontier/heuristic_shapes_w10_pinned.toml"


def rows(arm: str, width: int, params: int, gflops: float, accuracies: list[float]) -> list[dict]:
    return [
        {"code": "test", "arm": arm, "start_width": width, "seed": seed, "test_accuracy": acc,
         "test_bits_per_byte": 4.0 - acc / 100, "params": params, "train_gflops": gflops, "kept": []}
        for seed, acc in enumerate(accuracies)
    ]  # fmt: skip


def test_the_front_interpolates_in_log_size_and_is_flat_beyond_its_ends() -> None:
    xs, ys = [100.0, 400.0], [50.0, 70.0]
    assert frontier.interpolate(xs, ys, 200.0) == pytest.approx(60.0)
    assert frontier.interpolate(xs, ys, 10.0) == 50.0 and frontier.interpolate(xs, ys, 1e6) == 70.0


def test_a_grown_point_is_measured_against_the_front_and_paired_with_its_nearest_statics() -> None:
    task = get_task("shapes")
    data = (
        rows("static", 4, 100, 10.0, [50.0, 52.0, 54.0])
        + rows("static", 8, 400, 40.0, [70.0, 72.0, 74.0])
        + rows("naive", 4, 200, 15.0, [63.0, 64.0, 65.0])
    )
    arms = [frontier.Arm("static", 4), frontier.Arm("static", 8), frontier.Arm("naive", 4)]
    summary = frontier.summarise(task, data, arms, [4, 8], [0, 1, 2])
    grown = summary["grown"]["naive@4"]
    assert grown["gain_over_front_at_params"] == pytest.approx(64.0 - 62.0)  # 200 is halfway in log size
    front_at_cost = 52.0 + 20.0 * math.log(15 / 10) / math.log(4)
    assert grown["gain_over_front_at_train_gflops"] == pytest.approx(64.0 - front_at_cost)
    assert grown["nearest_static_by_params"] == 4  # 200/100 and 400/200: a tie goes to the smaller
    assert grown["paired_gain_vs_nearest_by_params"]["mean"] == pytest.approx(12.0)
    assert grown["train_gflops_over_nearest_by_params"] == pytest.approx(1.5)
    assert [p["width"] for p in summary["static"]] == [4, 8] and summary["static"][0]["sd"] == pytest.approx(2.0)


def test_on_text_the_front_is_in_bits_per_byte_and_lower_is_better() -> None:
    task = get_task("pydoc")
    data = rows("static", 32, 100, 10.0, [50.0, 52.0]) + rows("static", 64, 400, 40.0, [70.0, 72.0])
    data += rows("naive", 32, 400, 40.0, [80.0, 82.0])  # more accurate, so fewer bits per byte
    arms = [frontier.Arm("static", 32), frontier.Arm("static", 64), frontier.Arm("naive", 32)]
    grown = frontier.summarise(task, data, arms, [32, 64], [0, 1])["grown"]["naive@32"]
    assert grown["gain_over_front_at_params"] == pytest.approx(0.1)
    assert grown["paired_gain_vs_nearest_by_params"]["mean"] == pytest.approx(0.1)


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--task", "bogus"], "'bogus'"),
        (["--task", "cifar10"], "embedded"),
        (["--seeds", "3:4"], "at least 2 seeds"),
        (["--widths", "4"], "at least two widths"),
        (["--widths", "a:b"], "expected A:B"),
        (["--arms", "greedy"], "'greedy'"),
        (["--arms", "naive~blend_epochs=0"], "blend_epochs must be >= 1"),
        (["--arms", "naive~blend=2"], "unknown gate threshold 'blend'"),
        (["--arms", "naive~blend_epochs=two"], "takes a number"),
        (["--start-widths", "0"], ">= 1"),
        (["--arms", "heuristic:nope.toml"], "heuristic:nope.toml cannot be read"),
        (["--arms", f"heuristic:{PINNED}~compute_budget=0.5"], "compute_budget must be >= 1"),
        (["--arms", f"heuristic:{PINNED}", "--start-widths", "1"], "slot_blueprints early=widen_50"),
    ],
)
def test_bad_input_is_one_line_with_exit_code_2(argv: list[str], fragment: str, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    assert frontier.main([*argv, "--out-dir", str(out)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("frontier: error:") and fragment in err[0]
    assert not out.exists()


@pytest.mark.slow
def test_a_small_frontier_runs_and_continues_where_it_stopped(tmp_path: Path, capsys) -> None:
    out = tmp_path / "front"
    argv = ["--seeds", "0:2", "--widths", "2:4", "--start-widths", "2", "--arms", "naive", "--max-epochs", "1"]
    assert frontier.main([*argv, "--workers", "2", "--out-dir", str(out)]) == 0
    summary = json.loads((out / "frontier_seeds0-2.json").read_text())
    assert [p["width"] for p in summary["static"]] == [2, 3] and set(summary["grown"]) == {"naive@2"}
    assert (out / "frontier_seeds0-2.png").stat().st_size > 0
    lines = (out / "episodes.jsonl").read_text().splitlines()
    assert len(lines) == 6
    assert frontier.main([*argv, "--workers", "1", "--out-dir", str(out)]) == 0  # nothing left to run
    assert (out / "episodes.jsonl").read_text().splitlines() == lines
    assert "0 to run" in capsys.readouterr().err


def test_an_arm_runs_under_the_gate_thresholds_its_name_carries() -> None:
    task = frontier.get_task("shapes")
    fast = frontier.job(task, frontier.Arm("naive~min_training_epochs=1,blend_epochs=2", 8), 200, 40)
    plain = frontier.job(task, frontier.Arm("naive", 8), 200, 40)
    assert (fast.env_fields["thresholds"].min_training_epochs, fast.env_fields["thresholds"].blend_epochs) == (1, 2)
    assert plain.env_fields["thresholds"] == frontier.GateThresholds(keep_reading="accuracy")  # its held episodes'
    assert fast.spec == plain.spec
    by_loss = frontier.job(task, frontier.Arm("heuristic~keep_reading=loss", 8), 200, 40)
    assert by_loss.env_fields["thresholds"] == frontier.GateThresholds(keep_reading="loss")
    with pytest.raises(frontier.UsageError, match="keep_reading 'fresh': choose from accuracy loss"):
        frontier.job(task, frontier.Arm("naive~keep_reading=fresh", 8), 200, 40)


def test_the_first_recipe_trains_without_the_warm_up_its_held_episodes_never_had() -> None:
    task = frontier.get_task("shapes")
    assert task.warmup_for(40) == 3  # the task's own since 2026-11-28
    first = frontier.RECIPES["2026-11-27"]
    for name in ("static", "naive", "heuristic", "heuristic+width", "policy:shapes"):
        job = frontier.job(task, frontier.Arm(name, 8), 200, 40, first)
        assert frontier.EnvConfig(task=task, **job.env_fields).episode_lr_warmup_epochs == 0, name


def test_the_default_recipe_trains_as_esper_eval_does_today(tmp_path: Path, capsys) -> None:
    """The task's warm-up and Esper's gates (the loss reading), in a folder of its own; C_J joins
    the shapes arms; a folder holding episodes of the other recipe is refused, not mixed in."""
    task, recipe = frontier.get_task("shapes"), frontier.RECIPES["default"]
    job = frontier.job(task, frontier.Arm("naive~blend_epochs=2", 8), 200, 40, recipe)
    env = frontier.EnvConfig(task=task, **job.env_fields)
    assert (env.episode_lr_warmup_epochs, env.thresholds) == (3, frontier.GateThresholds(blend_epochs=2))
    names = [(a.name, a.width) for a in frontier.default_arms(task, recipe, [8, 4])]
    assert (frontier.PINNED_ARM, 8) in names and names[-2:] == [(frontier.PINNED_ARM, 4), (frontier.HALF_WIDTH_ARM, 4)]
    assert frontier.HALF_WIDTH_ARM not in {a.name for a in frontier.default_arms(task, recipe, [8])}
    for other_task, other_recipe in ((task, frontier.RECIPES["2026-11-27"]), (frontier.get_task("pydoc"), recipe)):
        others = {a.name for a in frontier.default_arms(other_task, other_recipe, [8, 4])}
        assert not others & {frontier.PINNED_ARM, frontier.HALF_WIDTH_ARM}
    assert frontier.main(["--seeds", "0:2", "--out-dir", str(tmp_path / "none"), "--arms", "x"]) == 2
    capsys.readouterr()
    held = rows("static", 2, 100, 10.0, [50.0, 51.0])  # no recipe recorded: the first one's
    (tmp_path / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in held))
    before = (tmp_path / "episodes.jsonl").read_text()
    assert frontier.main(["--seeds", "0:2", "--widths", "2:4", "--arms", "naive", "--out-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "2 held episodes" in err[0] and "'2026-11-27', not 'default'" in err[0], err
    assert (tmp_path / "episodes.jsonl").read_text() == before
    row = frontier.row_of(frontier.Arm("static", 2), {"seed": 0, "test_accuracy": 1.0, "test_loss": 1.0,
        "host_params": 1, "seed_params": 0, "train_gflops": 1.0, "measure_gflops": 0.1, "seconds": 1.0,
        "grown_seeds": []}, "test", None, recipe)  # fmt: skip
    assert frontier.held_recipe(row) == "default" and frontier.held_recipe(held[0]) == "2026-11-27"


def test_a_heuristic_arm_records_its_knobs_and_runs_with_them() -> None:
    task = frontier.get_task("shapes")
    plain, width = frontier.arm_heuristic(task, "heuristic"), frontier.arm_heuristic(task, "heuristic+width")
    assert frontier.arm_heuristic(task, "naive") is None and frontier.arm_heuristic(task, "static") is None
    assert width.blueprint_order[:2] == frontier.WIDTH_FIRST and plain.blueprint_order[:1] != ("widen_25",)
    assert frontier.job(task, frontier.Arm("heuristic+width", 8), 200, 40).heuristic == width
    result = {"seed": 0, "test_accuracy": 60.0, "test_loss": 1.0, "host_params": 10, "seed_params": 0,
              "train_gflops": 1.0, "measure_gflops": 0.1, "seconds": 1.0, "grown_seeds": []}  # fmt: skip
    row = frontier.row_of(frontier.Arm("heuristic+width", 8), result, "test", width)
    assert row["heuristic"]["blueprint_order"][:2] == list(frontier.WIDTH_FIRST)
    assert frontier.row_of(frontier.Arm("static", 8), result, "test", None)["heuristic"] is None


def test_a_knobs_file_arm_runs_its_file_over_the_tuned_knobs_under_the_gates_it_carries() -> None:
    """`heuristic:FILE~GATES` puts a grower of `esper eval` (C_J) on the front as that eval ran it."""
    task = frontier.get_task("shapes")
    name = f"heuristic:{PINNED}~compute_budget=1.54,probation_cull_contribution=-0.5"
    knobs = frontier.arm_heuristic(task, name)
    assert knobs == frontier.heuristic_from_file(str(PINNED), frontier.tuned_heuristic("shapes"))
    assert knobs.slot_blueprints and knobs != frontier.tuned_heuristic("shapes")
    job = frontier.job(task, frontier.Arm(name, 8), 200, 40)
    assert (job.spec.kind, job.heuristic, job.blueprints) == ("heuristic", knobs, None)
    gates = job.env_fields["thresholds"]
    assert (gates.compute_budget, gates.probation_cull_contribution, gates.keep_reading) == (1.54, -0.5, "accuracy")
    assert frontier.gate_thresholds(f"heuristic:{PINNED}~compute_budget=none").compute_budget is None
    assert frontier.arm_label(name) == "heuristic:heuristic_shapes_w10_pinned (gates changed)"


def test_the_width_arm_names_each_width_blueprint_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A heuristic tuned with width blueprints already leading keeps one of each in the width arm."""
    tuned = frontier.HeuristicConfig(blueprint_order=("widen_50", "conv_heavy", "widen_25"))
    monkeypatch.setattr(frontier, "residual_heuristic", lambda task: tuned)
    width = frontier.arm_heuristic(frontier.get_task("shapes"), "heuristic+width")
    assert width.blueprint_order == ("widen_25", "widen_50", "conv_heavy")


def test_the_shapes_heuristic_arms_keep_the_residual_search_s_knobs() -> None:
    """The `shapes` default became the width search's winner; the frontier's heuristic arms keep
    the residual search's knobs (its held episodes ran with them), and pydoc's its tuned ones."""
    residual = json.loads((frontier.RESULTS.parents[2] / "tools/results/tune_heuristic_shapes.json").read_text())
    shapes = frontier.arm_heuristic(frontier.get_task("shapes"), "heuristic")
    assert shapes == frontier.HeuristicConfig().with_knobs(residual["best_knobs"])
    assert shapes != frontier.tuned_heuristic("shapes"), "the shapes default moved on"
    assert frontier.arm_heuristic(frontier.get_task("pydoc"), "heuristic") == frontier.tuned_heuristic("pydoc")


def test_held_heuristic_episodes_of_other_knobs_are_refused(tmp_path: Path, capsys) -> None:
    """A heuristic tuned again must not be paired with its old knobs' episodes: one line, exit 2."""
    task = frontier.get_task("shapes")
    today = frontier.jsonable(frontier.arm_heuristic(task, "heuristic"))
    held = rows("heuristic", 8, 200, 15.0, [63.0, 64.0])
    held[0]["heuristic"] = today
    held[1]["heuristic"] = dict(today, warmup_epochs=today["warmup_epochs"] + 1)
    log = tmp_path / "episodes.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in held))
    frontier.check_held_arms(task, held[:1], [frontier.Arm("heuristic", 8)], log)  # today's knobs: reused
    before = log.read_text()
    argv = ["--seeds", "0:2", "--widths", "2:4", "--start-widths", "8", "--arms", "heuristic", "--recipe", "2026-11-27"]
    assert frontier.main([*argv, "--out-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "1 held episodes of arm 'heuristic'" in err[0] and "other heuristic knobs" in err[0]
    assert log.read_text() == before and sorted(p.name for p in tmp_path.iterdir()) == ["episodes.jsonl"]


def test_held_policy_episodes_of_another_policy_are_refused(tmp_path: Path, capsys) -> None:
    """A policy shipped again under the same name must not be paired with the old one's episodes
    (the frontier took v12's held `policy:shapes` rows for v23w's): one line, exit 2."""
    task = frontier.get_task("shapes")
    today = frontier.policy_sha256(frontier.trained_policy_path("shapes"))
    held = rows("policy:shapes", 8, 200, 15.0, [63.0, 64.0, 65.0])
    held[0]["policy_sha256"] = today
    held[1]["policy_sha256"] = "0" * 64
    frontier.check_held_arms(task, held[:1], [frontier.Arm("policy:shapes", 8)], tmp_path)  # today's: reused
    for other in (held[1], held[2]):  # another policy's, and one that recorded none
        with pytest.raises(frontier.UsageError, match=r"1 held episodes of arm 'policy:shapes' .* another policy"):
            frontier.check_held_arms(task, [held[0], other], [frontier.Arm("policy:shapes", 8)], tmp_path)
    gated = frontier.Arm("policy:shapes~blend_epochs=1", 8)  # an arm with gates loads the same policy
    frontier.check_held_arms(task, [dict(held[0], arm=gated.name)], [gated], tmp_path)
    log = tmp_path / "episodes.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in held))
    before = log.read_text()
    argv = ["--seeds", "0:2", "--widths", "2:4", "--start-widths", "8", "--arms", "policy:shapes"]
    argv += ["--recipe", "2026-11-27"]
    assert frontier.main([*argv, "--out-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "2 held episodes of arm 'policy:shapes'" in err[0] and "move them aside" in err[0]
    assert log.read_text() == before and sorted(p.name for p in tmp_path.iterdir()) == ["episodes.jsonl"]


def test_a_policy_arm_records_the_hash_of_the_policy_that_played() -> None:
    result = {"seed": 0, "test_accuracy": 60.0, "test_loss": 1.0, "host_params": 10, "seed_params": 0,
              "train_gflops": 1.0, "measure_gflops": 0.1, "seconds": 1.0, "grown_seeds": [],
              "policy_sha256": "ab"}  # fmt: skip
    row = frontier.row_of(frontier.Arm("policy:shapes", 8), result, "test", None)
    assert row["policy_sha256"] == "ab"
    assert (row["torch"], row["cpu_capability"]) == (
        frontier.torch.__version__,
        frontier.torch.backends.cpu.get_cpu_capability(),
    )
    del result["policy_sha256"]  # a controller with no policy records none
    assert "policy_sha256" not in frontier.row_of(frontier.Arm("naive", 8), result, "test", None)


@pytest.mark.parametrize("task_name", ["shapes", "pydoc"])
def test_the_committed_records_are_ones_the_frontier_reuses_today(task_name: str) -> None:
    """From a fresh clone, `frontier.py --task pydoc` refused its own held episodes: their
    heuristic rows had no knobs. A tuned heuristic that changes, or a policy shipped again, fails
    here too: move the rows aside and run them again (the growth-frontier README says how)."""
    task = get_task(task_name)
    log = frontier.RESULTS / task_name / "episodes.jsonl"
    held = [json.loads(line) for line in log.read_text().splitlines()]
    names = ["heuristic", "heuristic+width"] + (["policy:shapes"] if task_name == "shapes" else [])
    arms = [frontier.Arm(name, task.host_width) for name in names]
    frontier.check_held_arms(task, held, arms, log)
    assert any(r["arm"] == "heuristic" for r in held)


@pytest.mark.parametrize(("task_name", "starts", "seeds"), [("shapes", (8, 4), 10), ("pydoc", (64,), 5)])
def test_the_default_recipe_s_committed_records_are_ones_the_frontier_reuses_today(
    task_name: str, starts: tuple[int, ...], seeds: int
) -> None:
    """Their every arm, C_J's and C_M's knobs files and the shipped policy included, as the acceptance
    commands run them."""
    task, recipe = get_task(task_name), frontier.RECIPES["default"]
    log = frontier.RESULTS / task_name / recipe.folder / "episodes.jsonl"
    held = [json.loads(line) for line in log.read_text().splitlines()]
    arms = frontier.default_arms(task, recipe, list(starts))
    frontier.check_held_arms(task, held, arms, log, recipe)
    done = {(r["arm"], r["start_width"], r["seed"]) for r in held}
    assert all((a.name, a.width, s) in done for a in arms for s in range(200, 200 + seeds))


repeat_held = load_benchmark("repeat_held", EXPERIMENTS / "growth-frontier")


def test_a_repeated_episode_is_the_same_only_if_every_compared_value_is() -> None:
    held = rows("naive", 4, 200, 15.0, [63.0])[0]
    assert repeat_held.compared(held, dict(held, code="new"))["same"]
    assert not repeat_held.compared(held, dict(held, train_gflops=15.5))["same"]
    assert not repeat_held.compared(held, dict(held, test_accuracy=63.01))["same"]


def test_repeat_held_refuses_an_episode_it_does_not_hold(tmp_path: Path, capsys) -> None:
    held = rows("static", 4, 100, 10.0, [50.0])
    (tmp_path / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in held))
    assert repeat_held.main(["--arms", "static", "naive", "--seed", "0", "--out-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'naive'" in err[0] and "seed 0" in err[0]
    assert repeat_held.main(["--out-dir", str(tmp_path / "none")]) == 2
    assert [p.name for p in tmp_path.iterdir()] == ["episodes.jsonl"]  # nothing written


def test_repeat_held_refuses_held_heuristic_episodes_of_other_knobs(tmp_path: Path, capsys) -> None:
    held = rows("heuristic", 4, 100, 10.0, [50.0])  # no knobs recorded: not today's
    (tmp_path / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in held))
    argv = ["--arms", "heuristic", "--seed", "0", "--recipe", "2026-11-27", "--out-dir", str(tmp_path)]
    assert repeat_held.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "other heuristic knobs" in err[0]


flops_per_param = load_benchmark("flops_per_param", EXPERIMENTS / "growth-frontier")


def test_a_static_host_and_a_width_seed_cost_what_their_layers_hand_count() -> None:
    """The plain network of a grown host counts as the task's host does, and a width seed's FLOPs
    per parameter follow its block's resolution: 2 (forward) + 4 (backward: input and weight
    gradients) FLOPs per weight per position, except the first convolution, whose input takes no
    gradient. `early` works on 16x16 maps, `late` on 4x4 (a 3x3 convolution, padding 1)."""
    assert flops_per_param.params((8, 16, 32)) == get_task("shapes").host_params(8)
    conv = 9 * 3 * 8 * 256 * 4 + sum(9 * a * b * p * 6 for a, b, p in [(8, 8, 256), (8, 16, 64), (16, 16, 64)])
    conv += sum(9 * a * b * 16 * 6 for a, b in [(16, 32), (32, 32)])
    assert flops_per_param.train_flops_per_sample((8, 16, 32)) == conv + 32 * 10 * 6
    # late widen_25 (32 -> 40): 8 more out channels of 16 -> 32 and 8 more of both sides of 32 -> 32 at 4x4,
    # two BatchNorms' weight and bias for them, and 8 more inputs of the classifier
    added = 9 * 16 * 8 + 9 * (40 * 40 - 32 * 32)
    assert flops_per_param.params((8, 16, 40)) - flops_per_param.params((8, 16, 32)) == added + 2 * 2 * 8 + 8 * 10
    extra = flops_per_param.train_flops_per_sample((8, 16, 40)) - flops_per_param.train_flops_per_sample((8, 16, 32))
    assert extra == added * 16 * 6 + 8 * 10 * 6


import_eval = load_benchmark("import_eval_episodes", EXPERIMENTS / "growth-frontier")


def eval_records(tmp_path: Path, host_params: int) -> tuple[Path, Path]:
    evaluation = tmp_path / "eval.json"
    machine = {"torch": "2.13.0+cpu", "cpu_capability": "AVX512", "cpu": "elsewhere"}
    evaluation.write_text(json.dumps({"max_epochs": 40, "policy_sha256": {"policy:shapes": "0" * 64}, **machine}))
    episodes = tmp_path / "episodes.jsonl"
    result = {"controller": "compute", "test_accuracy": 70.0, "test_loss": 0.8, "host_params": host_params,
              "seed_params": 0, "train_gflops": 2323.0, "measure_gflops": 300.0, "seconds": 100.0,
              "grown_seeds": []}  # fmt: skip
    episodes.write_text("".join(json.dumps(dict(result, seed=s)) + "\n" for s in (200, 201)))
    return evaluation, episodes


def test_an_eval_s_episodes_become_frontier_rows_on_the_machine_they_ran(tmp_path: Path, capsys) -> None:
    """An eval's `compute` host (static width 10) becomes `static@10`; a second import of the
    same seeds, a seed the eval lacks, a host of another width and another policy are refused."""
    evaluation, episodes = eval_records(tmp_path, get_task("shapes").host_params(10))
    out = tmp_path / "front"
    argv = [str(evaluation), str(episodes), "--controller", "compute", "--arm", "static", "--start-width", "10",
            "--code", "abc1234", "--seeds", "200:202", "--out-dir", str(out)]  # fmt: skip
    assert import_eval.main(argv) == 0
    rows = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert [(r["arm"], r["start_width"], r["seed"], r["code"], r["recipe"]) for r in rows] == [
        ("static", 10, 200, "abc1234", "default"),
        ("static", 10, 201, "abc1234", "default"),
    ]
    assert rows[0]["cpu"] == "elsewhere" and rows[0]["imported_from"] == "eval.json"
    before = (out / "episodes.jsonl").read_text()
    capsys.readouterr()
    for change, fragment in (
        ({}, "already holds static@10 on seeds [200, 201]"),
        ({"--seeds": "200:203"}, "no episode of seed 202"),
        ({"--start-width": "9"}, "not a static host of width 9"),
        ({"--arm": "policy:shapes", "--controller": "policy:shapes"}, "no episode of seed 200"),
    ):
        given = list(argv)
        for flag, value in change.items():
            given[given.index(flag) + 1] = value
        assert import_eval.main(given) == 2
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and fragment in err[0], (change, err)
    assert (out / "episodes.jsonl").read_text() == before


def test_a_policy_s_episodes_are_imported_only_if_today_s_policy_played_them(tmp_path: Path, capsys) -> None:
    evaluation, episodes = eval_records(tmp_path, 1)
    episodes.write_text(episodes.read_text().replace('"compute"', '"policy:shapes"'))
    argv = [str(evaluation), str(episodes), "--controller", "policy:shapes", "--arm", "policy:shapes",
            "--start-width", "8", "--code", "x", "--seeds", "200:202", "--out-dir", str(tmp_path / "f")]  # fmt: skip
    assert import_eval.main(argv) == 2
    assert "another policy than today's policy:shapes" in capsys.readouterr().err
    today = frontier.policy_sha256(frontier.trained_policy_path("shapes"))
    evaluation.write_text(evaluation.read_text().replace("0" * 64, today))
    assert import_eval.main(argv) == 0
    row = json.loads((tmp_path / "f" / "episodes.jsonl").read_text().splitlines()[0])
    assert row["policy_sha256"] == today
