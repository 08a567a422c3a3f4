"""`experiments/keep-cull-reading/counterfactual_retest.py`: a probationary seed measured again on fresh images."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import EXPERIMENTS, load_benchmark, tiny_shapes_task
from esper.leyline.constants import LOSS_READING_POINTS_PER_NAT
from esper.runs.eval_run import episode_jobs, episode_result
from esper.scripts.cli import main
from esper.tolaria import TASKS
from test_cli import plateau_task


def load_script():
    return load_benchmark("counterfactual_retest", EXPERIMENTS / "keep-cull-reading")


def reading(epochs_on_probation: int, selection: float, retest: float) -> dict:
    return {"epochs_on_probation": epochs_on_probation, "selection": selection, "retest": retest}


@pytest.mark.slow
def test_retest_readings_leave_the_episode_as_eval_runs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(TASKS, "shapes", plateau_task(tiny_shapes_task()))  # the heuristic grows at once
    module = load_script()
    run = module.eval_run(["heuristic"], "3:4", 12)
    (job,) = episode_jobs(run, list(run.controllers), {})
    replayed = module.replay(job, 500)
    assert replayed["test_accuracy"] == episode_result(job)["test_accuracy"]
    readings = replayed["readings"]
    assert readings and {r["epochs_on_probation"] for r in readings} >= {0}
    for r in readings:
        assert r["controller"] == "heuristic" and r["seed"] == 3 and r["slot"] in ("early", "mid", "late")
        assert -100.0 <= r["retest"] <= 100.0
        assert r["retest"] * 5 == pytest.approx(round(r["retest"] * 5))  # 500 images: steps of 0.2 points
        # the accuracy reading, though the gates decide on the loss reading: 200 images, steps of 0.5
        assert r["selection"] * 2 == pytest.approx(round(r["selection"] * 2))
        assert isinstance(r["selection_loss"], float) and isinstance(r["retest_loss"], float)


def test_agreement_counts_signs_and_spread() -> None:
    rows = [reading(0, -0.3, 0.4), reading(0, 0.2, 0.1), reading(0, 0.5, -0.2), reading(1, -0.1, -0.5)]
    out = load_script().agreement(rows)
    assert out["n"] == 4
    assert out["sign_agreement"] == 0.5
    assert out["selection_at_or_below_0"] == 2 and out["of_those_retest_above_0"] == 1
    assert out["selection_above_0"] == 2 and out["of_those_retest_at_or_below_0"] == 1
    assert out["retest_at_or_below_0"] == 2
    assert out["selection_mean"] == pytest.approx(0.075) and out["retest_mean"] == pytest.approx(-0.05)
    assert load_script().agreement([]) == {"n": 0}


def test_first_readings_are_those_with_no_epoch_on_probation() -> None:
    rows = [reading(0, 0.1, 0.2), reading(1, 0.3, 0.3), reading(0, -0.2, 0.0)]
    assert load_script().first_readings(rows) == [rows[0], rows[2]]


def test_check_against_counts_what_it_compared_and_names_what_differs() -> None:
    held = {("heuristic", 7): 60.0, ("heuristic", 8): 61.5}
    episodes = [
        {"controller": "heuristic", "seed": 7, "test_accuracy": 60.0},
        {"controller": "heuristic", "seed": 8, "test_accuracy": 61.0},
        {"controller": "policy:x", "seed": 7, "test_accuracy": 1.0},  # not in the file: not compared
    ]
    assert load_script().check_against(episodes, held) == {"compared": 2, "differ": ["heuristic seed 8"]}


def test_keep_cull_auc_is_the_diagnostic_s_under_either_label() -> None:
    rows = [
        {**reading(0, -0.2, 0.3), "keep_score": -0.5},
        {**reading(0, 0.4, 0.5), "keep_score": 0.0},
        {**reading(1, 0.6, -0.1), "keep_score": 0.9},
    ]
    module = load_script()
    assert module.keep_cull_auc(rows, "selection") == {"auc": 1.0, "helpful": 2, "harmful": 1}
    assert module.keep_cull_auc(rows, "retest") == {"auc": 0.0, "helpful": 2, "harmful": 1}


def test_the_dead_zone_leaves_out_readings_too_close_to_call() -> None:
    rows = [
        {**reading(0, -0.2, 0.1), "keep_score": -0.5},  # retest within 0.3 of zero: no label
        {**reading(0, 0.4, 0.5), "keep_score": 0.0},
        {**reading(1, 0.6, -0.4), "keep_score": 0.9},
    ]
    assert load_script().keep_cull_auc(rows, "retest", 0.3) == {"auc": 0.0, "helpful": 1, "harmful": 1}


def test_the_loss_reading_is_put_in_points_and_compared_with_the_accuracy_reading() -> None:
    """Retest accuracy is exactly 2 points per nat of retest loss here, so the slope is 2 and a
    selection loss reading 0.1 nat off reads 0.2 points off."""
    rows = [
        {**reading(0, 0.5, 1.0), "selection_loss": 0.6, "retest_loss": 0.5},
        {**reading(0, -0.5, 0.0), "selection_loss": 0.1, "retest_loss": 0.0},
        {**reading(0, 1.5, 2.0), "selection_loss": 0.9, "retest_loss": 1.0},
        {**reading(0, 0.0, 0.4), "selection_loss": 0.3, "retest_loss": 0.2},
    ]
    out = load_script().loss_reading(rows)
    assert out["n"] == 4 and out["points_per_nat"] == pytest.approx(2.0)
    assert out["selection_minus_retest_sd_points"] == pytest.approx(0.2)  # gaps of 0.2, 0.2, -0.2, 0.2 points
    assert out["accuracy_selection_minus_retest_sd_points"] == pytest.approx(0.05)  # -0.5, -0.5, -0.5, -0.4
    assert load_script().loss_reading(rows[:2]) == {"n": 2}


def test_pool_summarises_runs_on_disjoint_seeds_and_refuses_a_shared_seed(tmp_path, capsys) -> None:
    def run(path, seeds, rows, retest_images=20_000):
        readings = [{**r, "controller": "heuristic"} for r in rows]
        sizes = {"selection_images": 2000, "retest_images": retest_images}
        path.write_text(json.dumps({"seeds": seeds, "readings": readings, **sizes, "torch": "2.13.0+cpu"}))
        return str(path)

    a = run(tmp_path / "a.json", [1, 2], [reading(0, -0.3, 0.4)])
    b = run(tmp_path / "b.json", [3], [reading(0, 0.2, 0.1), reading(1, 0.5, 0.6)])
    module = load_script()
    assert module.main(["--pool", a, b]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["seeds"] == [1, 2, 3] and out["retest_images"] == 20_000
    assert out["builds"] == [{"torch": "2.13.0+cpu", "cpu_capability": None}] * 2
    assert out["summary"]["heuristic"]["first_readings"]["n"] == 2
    assert out["summary"]["heuristic"]["all_readings"]["n"] == 3
    for other, fragment in (
        (run(tmp_path / "c.json", [2], [reading(0, 0.1, 0.1)]), "share seeds [2]"),
        (run(tmp_path / "d.json", [4], [reading(0, 0.1, 0.1)], retest_images=5000), "differ in retest_images"),
        (str(tmp_path / "missing.json"), "missing.json"),
    ):
        assert module.main(["--pool", a, other]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and fragment in err, err


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--controllers", "bogus"], "unknown controller 'bogus'"),
        (["--controllers", "static"], "none of them grows seeds"),
        (["--seeds", "5:5"], "empty range"),
        (["--retest-images", "10"], "--retest-images 10"),
        (["--out", "/nonexistent-folder/x.json"], "--out"),
        (["--keep-reading", "fresh"], "keep_reading 'fresh': choose from accuracy loss"),
    ],
)
def test_bad_input_is_one_line_with_exit_code_2(argv, fragment, capsys) -> None:
    assert load_script().main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and fragment in err, err


def test_the_episodes_decide_on_the_reading_asked_for() -> None:
    """The records before 2026-11-27 replay as they ran only with the accuracy reading deciding."""
    module = load_script()
    assert module.eval_run(["heuristic"], "150:151", 2).env.thresholds.keep_reading == "loss"
    assert module.eval_run(["heuristic"], "150:151", 2, "accuracy").env.thresholds.keep_reading == "accuracy"


def test_the_episodes_train_without_a_warm_up_as_the_records_did() -> None:
    assert load_script().eval_run(["heuristic"], "150:151", None).env.episode_lr_warmup_epochs == 0


def test_check_against_refuses_a_file_without_these_episodes_before_the_run(tmp_path, capsys) -> None:
    path = tmp_path / "eval.json"
    path.write_text(json.dumps({"seeds": [1], "controllers": {"heuristic": {"test_accuracy": [50.0]}}}))
    argv = ["--controllers", "heuristic", "--seeds", "150:151", "--check-against", str(path)]
    assert load_script().main(argv) == 2
    assert "holds none of these controllers' episodes" in capsys.readouterr().err


@pytest.mark.slow
def test_a_policy_s_replay_keeps_its_episode_and_joins_its_keep_scores(workdir, monkeypatch) -> None:
    """A policy cloned from the heuristic (which grows at once here) replayed: the same episode as
    eval's, the same policy hash, and each reading carries the keep score eval records for it."""
    monkeypatch.setitem(TASKS, "shapes", plateau_task(tiny_shapes_task()))
    argv = ["ppo", "--episodes", "1", "--n-envs", "1", "--max-epochs", "12", "--seed", "5", "--clone-episodes", "2"]
    argv += ["--heuristic.warmup_epochs", "2"]  # the teacher grows in 12 epochs
    # and keeps a seed to clone only on the accuracy reading, on this tiny task; eval plays on the loss reading
    argv += ["--gates.keep_reading", "accuracy"]
    assert main([*argv, "--clone-steps", "60", "--run-dir", "run", "--quiet"]) == 0
    checkpoint = sorted(Path("run/checkpoints").glob("round-*.pt"))[-1]
    module = load_script()
    run = module.eval_run([f"policy:{checkpoint}"], "20:21", 12)
    (job,) = episode_jobs(run, list(run.controllers), {})
    replayed, played = module.replay(job, 500), episode_result(job)
    assert replayed["test_accuracy"] == played["test_accuracy"]
    recorded = played["diagnostics"]["keep_cull_decisions"]
    assert replayed["readings"] and len(replayed["readings"]) == len(recorded)
    for reading_, decision in zip(replayed["readings"], recorded, strict=True):
        assert (reading_["epoch"], reading_["slot"]) == (decision["epoch"], decision["slot"])
        assert reading_["keep_score"] == decision["keep_score"]
        assert reading_["selection_loss"] * LOSS_READING_POINTS_PER_NAT == pytest.approx(decision["contribution"])
