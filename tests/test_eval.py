"""`esper eval`: controllers compared paired on held-out seeds, and its one-line refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import esper.runs.eval_run as eval_run
from conftest import tiny_shapes_data, tiny_shapes_task
from esper.runs.eval_run import ControllerSpec, pairs
from esper.scripts.cli import main
from esper.simic.checkpoint import policy_only, policy_sha256
from esper.tolaria import TASKS
from esper.tolaria.compute import width_for_train_gflops
from test_cli import check_usage_error, plateau_task

FAST = ["--max-epochs", "2", "--workers", "0"]


@pytest.fixture
def tiny_shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(TASKS, "shapes", tiny_shapes_task())


@pytest.fixture(scope="module")
def policy_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny `esper ppo` run on seeds 5 and 6; its last checkpoint."""
    run_dir = tmp_path_factory.mktemp("ppo") / "run"
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(TASKS, "shapes", tiny_shapes_task())
        argv = ["ppo", "--episodes", "2", "--n-envs", "2", "--max-epochs", "2", "--seed", "5", "--quiet"]
        assert main([*argv, "--run-dir", str(run_dir)]) == 0
    return sorted((run_dir / "checkpoints").glob("round-*.pt"))[-1]


def test_a_ppo_checkpoint_records_the_seeds_it_trained_on(policy_checkpoint: Path) -> None:
    payload = torch.load(policy_checkpoint, weights_only=True)
    assert payload["training_seeds"] == [5, 6]


@pytest.mark.slow
def test_eval_writes_one_entry_per_seed_and_paired_differences(
    tiny_shapes, workdir: Path, tmp_path: Path, capsys
) -> None:
    run_dir = tmp_path / "eval"
    argv = [
        "eval",
        "--controllers",
        "static",
        "random",
        "heuristic",
        "--seeds",
        "3:5",
        *FAST,
        "--run-dir",
        str(run_dir),
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "test accuracy % (95% CI)" in out and "random - static" in out
    report = json.loads((run_dir / "eval.json").read_text())
    assert report["seeds"] == [3, 4]
    assert report["cpu_capability"] == torch.backends.cpu.get_cpu_capability()  # which draw of the kernels
    assert set(report["controllers"]) == {"static", "random", "heuristic"}
    for values in report["controllers"].values():
        assert {"test_accuracy", "val_accuracy", "seed_params", "seconds"} <= set(values)
        assert all(len(v) == 2 for v in values.values())
    assert report["controllers"]["static"]["seed_params"] == [0, 0]
    assert report["controllers"]["static"]["grown_seeds"] == [[], []]
    for episode in report["controllers"]["random"]["grown_seeds"]:
        for record in episode:
            assert record["slot"] in ("early", "mid", "late") and record["stage_history"][0][1] == "GERMINATED"
    static, random = report["controllers"]["static"], report["controllers"]["random"]
    difference = report["paired"]["random - static"]["mean"]
    assert difference == pytest.approx(sum(random["test_accuracy"]) / 2 - sum(static["test_accuracy"]) / 2)
    assert (run_dir / "config.json").exists()
    board = EventAccumulator(str(run_dir / "tensorboard"))
    board.Reload()
    curve = board.Scalars("eval/random/test_accuracy")
    assert [e.step for e in curve] == [3, 4]
    assert [e.value for e in curve] == pytest.approx(random["test_accuracy"])


def test_every_controller_sees_the_same_host_and_data_for_a_seed(tiny_shapes, workdir: Path, tmp_path: Path) -> None:
    """With no germination allowed, random and heuristic can only wait: they must then train
    exactly the host static trains, on exactly its data order."""
    run_dir = tmp_path / "eval"
    controllers = ["static", "random", "heuristic"]
    argv = ["eval", "--controllers", *controllers, "--seeds", "0:2", "--max-germinations", "0", *FAST]
    assert main([*argv, "--run-dir", str(run_dir)]) == 0
    report = json.loads((run_dir / "eval.json").read_text())
    accuracies = [report["controllers"][name]["test_accuracy"] for name in controllers]
    assert accuracies[0] == accuracies[1] == accuracies[2]
    assert accuracies[0][0] != accuracies[0][1]  # the seeds differ, so the pairing is not vacuous


@pytest.mark.slow
def test_matched_is_a_static_host_near_the_growing_controllers_size(tiny_shapes, workdir: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "eval"
    argv = ["eval", "--controllers", "random", "matched", "--seeds", "0:2", "--max-epochs", "4", "--workers", "0"]
    assert main([*argv, "--run-dir", str(run_dir)]) == 0
    report = json.loads((run_dir / "eval.json").read_text())
    random, matched = report["controllers"]["random"], report["controllers"]["matched"]
    grown = sum(h + s for h, s in zip(random["host_params"], random["seed_params"], strict=True)) / 2
    assert matched["seed_params"] == [0, 0]
    assert report["matched_width"] == TASKS["shapes"].width_for_params(round(grown))
    assert report["nearest_static_width"] == {"random": report["matched_width"]}  # the only grower


def test_the_table_names_a_grower_sized_apart_from_matched() -> None:
    """`matched` is sized on every grower's mean: one that ends nearer another static width is
    named, so a reader does not take its pair with `matched` for a pair with its own size."""
    row = {
        "test_accuracy": [70.0],
        "seed_params": [0],
        "host_params": [18_626],
        "train_gflops": [1.0],
        "seconds": [1.0],
    }
    report = {
        "seeds": [0],
        "matched_width": 10,
        "nearest_static_width": {"heuristic": 10, "policy:shapes": 11},
        "controllers": {"matched": row, "heuristic": row, "policy:shapes": row},
        "test_accuracy": {
            name: {"mean": 70.0, "ci95": [None, None]} for name in ("matched", "heuristic", "policy:shapes")
        },
        "paired": {},
        "diagnostics": {},
    }
    lines = eval_run.table(report).splitlines()
    assert (
        lines[-1]
        == "matched (width 10) is sized on the growers' mean final size; by its own: policy:shapes nearest width 11"
    )
    report["nearest_static_width"]["policy:shapes"] = 10
    assert "sized on" not in eval_run.table(report)


@pytest.mark.slow
def test_compute_is_the_static_host_whose_run_costs_what_growth_cost(
    tiny_shapes, workdir: Path, tmp_path: Path, capsys
) -> None:
    """Training FLOPs per seed in eval.json and the table; naive growth grows once on schedule;
    `compute` is the static width whose whole run's FLOPs are nearest the growing ones' mean."""
    run_dir = tmp_path / "eval"
    argv = ["eval", "--controllers", "static", "naive:widen_100@0", "compute", "--seeds", "0:2", "--max-epochs", "4"]
    assert main([*argv, "--workers", "0", "--run-dir", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "train GFLOPs" in out and "compute: a static host of width" in out
    report = json.loads((run_dir / "eval.json").read_text())
    static, naive, compute = (report["controllers"][k] for k in ("static", "naive:widen_100@0", "compute"))
    assert all(g > 0 for g in static["train_gflops"]) and len(naive["train_gflops"]) == 2
    assert all(n > s for n, s in zip(naive["train_gflops"], static["train_gflops"], strict=True))
    assert [len(seeds) for seeds in naive["grown_seeds"]] == [3, 3]  # once in each slot
    assert {s["blueprint"] for seeds in naive["grown_seeds"] for s in seeds} == {"widen_100"}
    target = sum(naive["train_gflops"]) / 2
    data = tiny_shapes_data()
    assert report["compute_width"] == width_for_train_gflops(TASKS["shapes"], data, 4, target)
    assert compute["seed_params"] == [0, 0]
    assert "compute - static" in report["paired"] and "naive:widen_100@0 - compute" in report["paired"]


@pytest.mark.slow
def test_a_policy_controller_runs_on_seeds_it_never_trained_on(
    tiny_shapes, policy_checkpoint: Path, workdir: Path, tmp_path: Path
) -> None:
    run_dir = tmp_path / "eval"
    argv = ["eval", "--controllers", "static", f"policy:{policy_checkpoint}", "--seeds", "7:9", *FAST]
    assert main([*argv, "--run-dir", str(run_dir)]) == 0
    report = json.loads((run_dir / "eval.json").read_text())
    assert len(report["controllers"][f"policy:{policy_checkpoint}"]["test_accuracy"]) == 2
    assert f"policy:{policy_checkpoint} - static" in report["paired"]


def test_a_policy_s_hash_is_of_its_tensors_not_of_its_file(policy_checkpoint: Path, tmp_path: Path) -> None:
    """The checkpoint and its cut-down copy (what ships) are one policy; a changed weight is another."""
    cut = tmp_path / "cut.pt"
    torch.save(policy_only(torch.load(policy_checkpoint, weights_only=True)), cut)
    assert cut.read_bytes() != policy_checkpoint.read_bytes()
    assert policy_sha256(cut) == policy_sha256(policy_checkpoint)
    payload = torch.load(cut, weights_only=True)
    mean = payload["learner"]["obs_norm"]["mean"]
    mean[0] += 1.0
    torch.save(payload, cut)
    assert policy_sha256(cut) != policy_sha256(policy_checkpoint)


def test_resume_refuses_a_policy_file_that_changed_since_its_episodes_were_saved(
    tiny_shapes, policy_checkpoint: Path, workdir: Path, tmp_path: Path, capsys
) -> None:
    """The saved episodes record the hash of the policy they played (`policy_sha256`: its tensors,
    not the file's bytes); a resume with another policy under the same name would pair two
    policies' episodes, so it is refused and nothing is written. The same policy resumes, re-saved
    or not, and eval.json records the hash the episodes played."""
    policy = tmp_path / "policy.pt"
    policy.write_bytes(policy_checkpoint.read_bytes())
    run_dir = tmp_path / "eval"
    argv = ["eval", "--controllers", "static", f"policy:{policy}", "--seeds", "7:8", *FAST, "--run-dir", str(run_dir)]
    assert main(argv) == 0
    saved = json.loads((run_dir / "episodes.jsonl").read_text().splitlines()[-1])
    digest = policy_sha256(policy)
    assert saved["policy_sha256"] == digest
    payload = torch.load(policy, weights_only=True)
    payload["learner"]["episodes_done"] += 1  # the same policy saved again with other metadata
    torch.save(payload, policy)
    assert main([*argv, "--resume", "last"]) == 0
    weights = payload["learner"]["policy"]
    weights[next(iter(weights))] += 0.5  # another policy under the same path
    torch.save(payload, policy)
    before = (run_dir / "eval.json").read_bytes()
    capsys.readouterr()
    check_usage_error(capsys, [*argv, "--resume", "last"], "is not the one its saved episodes played", "new --run-dir")
    assert (run_dir / "eval.json").read_bytes() == before
    assert json.loads(before)["policy_sha256"] == {f"policy:{policy}": digest}


def test_a_policy_file_replaced_while_the_eval_runs_stops_it(
    tiny_shapes, policy_checkpoint: Path, workdir: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    """Each episode loads the policy from its path, so a file replaced mid-run (a new policy
    shipped under the same name) would give episodes of two policies: the eval stops at the first
    episode of the other one, in one line, exit 1, with the episodes before it saved and not that one."""
    import esper.runs.eval_run as evaluate

    policy = tmp_path / "policy.pt"
    policy.write_bytes(policy_checkpoint.read_bytes())
    real = evaluate.episode_result

    def replaced_after_the_first(job):
        if job.rng_seed == 8:
            payload = torch.load(policy, weights_only=True)
            weights = payload["learner"]["policy"]
            weights[next(iter(weights))] += 0.5
            torch.save(payload, policy)
        return real(job)

    monkeypatch.setattr(evaluate, "episode_result", replaced_after_the_first)
    run_dir = tmp_path / "eval"
    argv = ["eval", "--controllers", f"policy:{policy}", "--seeds", "7:9", *FAST, "--run-dir", str(run_dir)]
    capsys.readouterr()
    assert main(argv) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("esper: error: ")
    assert "changed while the eval ran" in err[0] and "at seed 8" in err[0] and "new --run-dir" in err[0]
    saved = [json.loads(line) for line in (run_dir / "episodes.jsonl").read_text().splitlines()]
    assert [r["seed"] for r in saved] == [7]
    assert not (run_dir / "eval.json").exists()


def test_eval_refuses_the_seeds_a_policy_trained_on(
    tiny_shapes, policy_checkpoint: Path, workdir: Path, capsys
) -> None:
    argv = ["eval", "--controllers", "static", f"policy:{policy_checkpoint}", "--seeds", "6:8", *FAST]
    line = check_usage_error(capsys, argv, "trained on seed 6; evaluate on seeds it never trained on", "--seeds")
    assert "more of these" not in line, "seed 7 is not one of its training seeds"
    argv = ["eval", "--controllers", "static", f"policy:{policy_checkpoint}", "--seeds", "4:8", *FAST]
    check_usage_error(capsys, argv, "trained on seed 5 (and 1 more of these)")
    assert not Path("runs").exists()


WIDTH_1 = ("--host.width", "1")
EARLY = ("--slots", "early")


@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        (["--controllers", "static", "greedy", "--seeds", "0:2"], ["'greedy'", "static matched compute heuristic"]),
        (["--controllers", "static", "policy", "--seeds", "0:2"], ["'policy'", "policy:PATH"]),
        (["--controllers", "static", "random", "--seeds", "4:4"], ["'4:4'", "empty"]),
        (["--controllers", "static", "random", "--seeds", "four"], ["'four'", "A:B"]),
        (["--controllers", "static", "random"], ["--seeds A:B is required"]),
        (["--controllers", "static", "policy:missing.pt", "--seeds", "0:2"], ["missing.pt", "does not exist"]),
        (["--controllers", "static", "matched", "--seeds", "0:2"], ["matched needs a growing controller"]),
        (["--controllers", "static", "static", "--seeds", "0:2"], ["twice"]),
        (["--controllers", "static", "compute", "--seeds", "0:2"], ["compute needs a growing controller"]),
        (["--controllers", "static", "naive:widen_50", "--seeds", "0:2"], ["naive:widen_50", "BLUEPRINT@EPOCH"]),
        (["--controllers", "static", "naive:widen_50@x", "--seeds", "0:2"], ["naive:widen_50@x", "epoch >= 0"]),
        (["--controllers", "naive:bogus@3", "--seeds", "0:2"], ["naive:bogus@3", "'bogus'", "widen_50"]),
        (
            ["--controllers", "naive:widen_25@3", "--seeds", "0:2", "--host.width", "1"],
            ["naive:widen_25@3", "slot 'early'", "less than one unit"],
        ),
        (["--controllers", "naive:middle=widen_25@1", "--seeds", "0:2"], ["'middle'", "early mid late"]),
        (
            ["--controllers", "naive:late=widen_25@1", "--seeds", "0:2", "--slots", "early"],
            ["'late' is not enabled", "choose from: early"],
        ),
        (["--controllers", "naive:mid=widen_25@1,mid=widen_50@2", "--seeds", "0:2"], ["names a slot twice"]),
        (["--controllers", "naive:widen_25@1,mid=widen_50@2", "--seeds", "0:2"], ["name a slot in every entry"]),
        (["--controllers", "naive:=widen_25@1", "--seeds", "0:2"], ["naive:=widen_25@1", "SLOT=BLUEPRINT@EPOCH"]),
        (["--controllers", "schedule:widen_50", "--seeds", "0:2"], ["schedule:widen_50", "BLUEPRINT@EPOCH"]),
        (["--controllers", "schedule:middle=widen_25@1", "--seeds", "0:2"], ["'middle'", "early mid late"]),
        (["--controllers", "schedule", "--seeds", "0:2"], ["'schedule'", "schedule:SLOT=BLUEPRINT@EPOCH"]),
        (
            ["--controllers", "naive:mid=widen_25@1,early=widen_25@3", "--seeds", "0:2", "--host.width", "1"],
            ["naive:mid=widen_25@1,early=widen_25@3", "slot 'early'", "less than one unit"],
        ),
        (
            ["--controllers", "heuristic", "--seeds", "0:2", "--heuristic.blueprint_order", "[nope]"],
            ["'nope'", "conv_heavy"],
        ),
        (
            ["--controllers", "heuristic", "--seeds", "0:2", "--heuristic.slot_blueprints", "[early]"],
            ["--heuristic.slot_blueprints", "'early' is not SLOT=BLUEPRINT"],
        ),
        (
            ["--controllers", "heuristic", "--seeds", "0:2", "--heuristic.slot_blueprints", "[early=nope]"],
            ["slot_blueprints early=nope", "'nope'", "widen_50"],
        ),
        (
            [
                "--controllers",
                "heuristic",
                "--seeds",
                "0:2",
                "--heuristic.slot_blueprints",
                "[early=widen_25]",
                *WIDTH_1,
            ],
            ["slot_blueprints early=widen_25", "less than one unit"],
        ),
        (
            ["--controllers", "heuristic", "--seeds", "0:2", "--heuristic.slot_blueprints", "[late=widen_25]", *EARLY],
            ["--heuristic.slot_blueprints", "'late' is not a slot this run enables"],
        ),
    ],
)
def test_bad_eval_input_is_one_line_with_exit_code_2(tiny_shapes, workdir: Path, capsys, argv, fragments) -> None:
    check_usage_error(capsys, ["eval", *argv, *FAST], *fragments)
    assert not Path("runs").exists()


def test_a_bad_heuristic_file_is_named_once_in_its_error(tiny_shapes, workdir: Path, tmp_path: Path, capsys) -> None:
    knobs = tmp_path / "knobs.toml"
    knobs.write_text("[heuristic]\nfoo = 1\n")
    line = check_usage_error(capsys, ["eval", "--controllers", f"heuristic:{knobs}", "--seeds", "0:2", *FAST], "foo")
    assert line.count(f"heuristic:{knobs}") == 1, line


def test_a_missing_heuristic_file_is_named_as_given_not_as_a_config(tiny_shapes, workdir: Path, capsys) -> None:
    """It was reported as `--config 'nope.toml' cannot be read`, a flag the user never gave."""
    line = check_usage_error(capsys, ["eval", "--controllers", "heuristic:nope.toml", "--seeds", "0:2", *FAST])
    assert line.startswith("esper: error: heuristic:nope.toml cannot be read") and "--config" not in line, line


def test_a_width_blueprint_of_the_order_is_checked_where_a_heuristic_runs_on_its_slots(
    tiny_shapes, workdir: Path, tmp_path: Path, capsys
) -> None:
    """`widen_25` of width 2 is half a unit in `early` and at least one in `mid` and `late`: the
    order's width blueprints are checked on the enabled slots, for a heuristic that runs (a
    heuristic file's own order included), and not for controllers that never read the order."""
    order = ["--heuristic.blueprint_order", "[widen_25, conv_heavy]", "--host.width", "2", "--seeds", "0:2"]
    check_usage_error(
        capsys, ["eval", "--controllers", "heuristic", *order, *FAST], "--heuristic.blueprint_order widen_25"
    )
    knobs = tmp_path / "knobs.toml"
    knobs.write_text('[heuristic]\nblueprint_order = ["widen_25"]\n')
    argv = ["eval", "--controllers", f"heuristic:{knobs}", "--host.width", "2", "--seeds", "0:2", *FAST]
    check_usage_error(capsys, argv, f"heuristic:{knobs} blueprint_order widen_25", "slot 'early'")
    assert not Path("runs").exists()
    assert main(["eval", "--controllers", "static", "random", *order, *FAST, "--run-dir", "runs/other"]) == 0
    assert (
        main(["eval", "--controllers", "heuristic", *order, "--slots", "mid", "late", *FAST, "--run-dir", "runs/s"])
        == 0
    )


def test_a_checkpoint_of_another_task_is_refused(policy_checkpoint: Path, workdir: Path, capsys) -> None:
    argv = ["eval", "--task", "pydoc", "--controllers", "static", f"policy:{policy_checkpoint}", "--seeds", "9:11"]
    check_usage_error(capsys, [*argv, *FAST], "trained on task 'shapes'", "'pydoc'")


def test_a_learned_controller_is_compared_with_every_baseline() -> None:
    specs = tuple(
        ControllerSpec(name, kind)
        for name, kind in [("static", "static"), ("heuristic", "heuristic"), ("policy:a", "policy")]
    )
    assert pairs(specs) == [("heuristic", "static"), ("policy:a", "static"), ("policy:a", "heuristic")]


def test_a_heuristic_file_holds_the_schedule_by_name_and_the_order_as_a_list(tmp_path: Path) -> None:
    """TOML has no enums or tuples: the file's plain values become the knobs' types (a string
    schedule reached the controller's decisions before)."""
    from esper.leyline import BlendSchedule
    from esper.runs.common import UsageError
    from esper.runs.eval_run import heuristic_from_file
    from esper.tamiyo import HeuristicConfig

    good = tmp_path / "h.toml"
    good.write_text('[heuristic]\nschedule = "SIGMOID"\nblueprint_order = ["norm", "depthwise"]\n')
    config = heuristic_from_file(str(good), HeuristicConfig(warmup_epochs=9))
    assert config.schedule is BlendSchedule.SIGMOID and config.blueprint_order == ("norm", "depthwise")
    assert config.warmup_epochs == 9
    bad = tmp_path / "bad.toml"
    bad.write_text('[heuristic]\nschedule = "CUBIC"\n')
    with pytest.raises(UsageError, match="'CUBIC'; choose from: LINEAR SIGMOID"):
        heuristic_from_file(str(bad), HeuristicConfig())


def test_one_controller_alone_is_measured_with_no_paired_block(
    tiny_shapes, workdir: Path, tmp_path: Path, capsys
) -> None:
    """A single controller is an estimate on held-out seeds (the table crashed on it before)."""
    assert main(["eval", "--controllers", "random", "--seeds", "0:2", *FAST, "--run-dir", str(tmp_path / "e")]) == 0
    out = capsys.readouterr().out
    assert "random" in out and "paired" not in out
    assert json.loads((tmp_path / "e" / "eval.json").read_text())["paired"] == {}


def test_one_seed_is_measured_with_no_interval(tiny_shapes, workdir: Path, tmp_path: Path, capsys) -> None:
    """A one-seed eval (a quick look) has no spread: eval.json holds null for the interval and
    the std (writing NaN crashed the run after its episodes had all finished)."""
    argv = ["eval", "--controllers", "static", "random", "--seeds", "3:4", *FAST, "--run-dir", str(tmp_path / "e")]
    assert main(argv) == 0
    assert "(one seed)" in capsys.readouterr().out
    report = json.loads((tmp_path / "e" / "eval.json").read_text())
    assert report["test_accuracy"]["random"]["ci95"] == [None, None]
    assert report["paired"]["random - static"]["std"] is None


@pytest.mark.slow
def test_blueprints_restricts_what_the_heuristic_and_random_grow(workdir: Path, tmp_path: Path, monkeypatch) -> None:
    """`eval --blueprints` was accepted and ignored: every controller chose from its own set."""
    monkeypatch.setitem(TASKS, "shapes", plateau_task(tiny_shapes_task()))  # the heuristic grows at once
    run_dir = tmp_path / "eval"
    argv = ["eval", "--controllers", "heuristic", "random", "--seeds", "0:2", "--blueprints", "depthwise"]
    argv += ["--heuristic.warmup_epochs", "2"]  # the heuristic grows in 12 epochs
    assert main([*argv, "--max-epochs", "12", "--workers", "0", "--run-dir", str(run_dir)]) == 0
    report = json.loads((run_dir / "eval.json").read_text())
    for name in ("heuristic", "random"):
        grown = [record["blueprint"] for episode in report["controllers"][name]["grown_seeds"] for record in episode]
        assert grown and set(grown) == {"depthwise"}, (name, grown)


@pytest.mark.parametrize("widths", [{"matched": 9, "compute": 9}, {"matched": 9, "compute": 10}])
def test_compute_at_matched_width_takes_its_episodes(widths: dict[str, int], monkeypatch, capsys) -> None:
    """A static host of one width and seed is one run: the eval of seeds 200..219 ran width 9
    twice, once as `matched` and once as `compute`."""
    ran: list[list[str]] = []

    def fake_run_all(run, pool, specs, widths, stop) -> list[dict]:
        ran.append([s.name for s in specs])
        return [{"controller": s.name, "seed": seed, "test_accuracy": float(seed)} for s in specs for seed in (0, 1)]

    monkeypatch.setattr(eval_run, "run_all", fake_run_all)
    specs = [ControllerSpec("matched", "matched"), ControllerSpec("compute", "compute")]
    results = eval_run.run_sized(None, None, specs, widths, None)
    shared = widths["matched"] == widths["compute"]
    assert ran == ([["matched"]] if shared else [["matched", "compute"]])
    every = [(name, seed) for name in ("compute", "matched") for seed in (0, 1)]
    assert sorted((r["controller"], r["seed"]) for r in results) == every
    assert ("the episodes of matched" in capsys.readouterr().out) is shared


@pytest.mark.parametrize("command", ["eval", "grow"])
def test_naive_growth_need_fit_only_the_slots_it_may_use(tiny_shapes, workdir: Path, command: str) -> None:
    """At width 2 `widen_25` fits `mid` and `late` but not `early`: restricted to those two by
    `--slots`, naive growth is a valid controller (it was refused, naming `early`)."""
    from esper.runs.grow_run import resolve_growth
    from esper.scripts.cli import build_parser

    controller = ["--controllers", "naive:widen_25@1", "--seeds", "0:1"] if command == "eval" else []
    controller = controller or ["--controller", "naive:widen_25@1"]
    argv = [command, *controller, "--host.width", "2", "--max-epochs", "2"]
    args, rest = build_parser().parse_known_args([*argv, "--slots", "mid", "late"])
    run = eval_run.resolve_eval(args, rest) if command == "eval" else resolve_growth(args, rest)
    assert run is not None
    args, rest = build_parser().parse_known_args(argv)
    with pytest.raises(eval_run.UsageError, match="slot 'early'"):
        eval_run.resolve_eval(args, rest) if command == "eval" else resolve_growth(args, rest)


def test_a_naive_schedule_grows_each_named_slot_with_its_blueprint_from_its_epoch(
    tiny_shapes, workdir: Path, tmp_path: Path
) -> None:
    """`naive:SLOT=BLUEPRINT@EPOCH,...`: each named slot grows its own blueprint, not before its own
    epoch, and a slot the schedule leaves out never grows."""
    run_dir = tmp_path / "eval"
    schedule = "naive:late=widen_25@1,mid=widen_50@2"
    argv = ["eval", "--controllers", schedule, "--seeds", "0:1", "--max-epochs", "4", "--workers", "0"]
    assert main([*argv, "--run-dir", str(run_dir)]) == 0
    (grown,) = json.loads((run_dir / "eval.json").read_text())["controllers"][schedule]["grown_seeds"]
    first = {s["slot"]: (s["blueprint"], s["stage_history"][0]) for s in grown}
    # a decision at epoch e is recorded at e + 1, as for naive:BLUEPRINT@EPOCH
    assert first == {"mid": ("widen_50", [3, "GERMINATED"]), "late": ("widen_25", [2, "GERMINATED"])}


def test_a_schedule_keeps_every_seed_it_grows_and_counts_as_a_grower(
    tiny_shapes, workdir: Path, tmp_path: Path
) -> None:
    """`schedule:` grows as `naive:` does and keeps every seed, however little it helps (here under
    gates that cull every other grower's); it is a growing controller, so `matched` is sized on it."""
    run_dir = tmp_path / "eval"
    schedule = "schedule:early=widen_50@1,late=widen_25@1"
    argv = ["eval", "--controllers", schedule, "matched", "--seeds", "0:2", "--max-epochs", "7", "--workers", "0"]
    cull_all = ["--gates.probation_cull_contribution", "1000", "--gates.fossilize_min_contribution", "1000"]
    assert main([*argv, *cull_all, "--run-dir", str(run_dir)]) == 0  # gates that would cull every seed
    report = json.loads((run_dir / "eval.json").read_text())
    grown = report["controllers"][schedule]["grown_seeds"]
    assert [sorted((s["slot"], s["blueprint"], s["final_stage"]) for s in seeds) for seeds in grown] == [
        [("early", "widen_50", "FOSSILIZED"), ("late", "widen_25", "FOSSILIZED")]
    ] * 2
    assert report["controllers"]["matched"]["seed_params"] == [0, 0] and f"{schedule} - matched" in report["paired"]


def test_a_bad_pin_from_the_config_file_names_the_file(tiny_shapes, workdir: Path, tmp_path: Path, capsys) -> None:
    """The plain heuristic's pins read from `--config` are the file's, not a `--heuristic.` flag's."""
    config = tmp_path / "run.toml"
    config.write_text('[heuristic]\nslot_blueprints = ["late=widen_25"]\n')
    argv = ["eval", "--controllers", "heuristic", "--seeds", "0:2", "--config", str(config), *EARLY, *FAST]
    line = check_usage_error(capsys, argv, f"--config {str(config)!r}: heuristic.slot", "'late' is not a slot")
    assert "--heuristic." not in line
    assert not Path("runs").exists()
