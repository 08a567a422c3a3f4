"""The `esper ppo` command line: a real tiny run, exact resume, and one-line errors that overwrite nothing."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch

import esper
from conftest import tiny_shapes_task, tiny_text_task, tree
from esper.scripts.cli import main
from esper.simic.checkpoint import CHECKPOINT_FORMAT, policy_only, read_checkpoint
from esper.simic.controller import PolicyController
from esper.simic.morphogenetic_envs import TIMING_METRICS
from esper.tolaria import TASKS
from esper.tolaria.grown import read_grown
from test_cli import check_usage_error
from test_grown import plain_test_accuracy

TINY = ["--n-envs", "2", "--max-epochs", "2", "--quiet"]


@pytest.fixture
def tiny_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(TASKS, "shapes", tiny_shapes_task())
    monkeypatch.setitem(TASKS, "pydoc", tiny_text_task())


def rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def without_timing(row: dict) -> dict:
    return {k: v for k, v in row.items() if k not in TIMING_METRICS}


def test_a_run_writes_metrics_summary_and_checkpoints(tiny_tasks, workdir: Path, tmp_path: Path, capsys) -> None:
    run_dir = tmp_path / "run"
    assert main(["ppo", "--episodes", "4", *TINY, "--run-dir", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "obs_dim 73" in out and "done: 2 rounds, 4 episodes" in out
    metrics = rows(run_dir)
    assert [r["round"] for r in metrics] == [1, 2]
    assert all(math.isfinite(v) for r in metrics for v in r.values())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["obs_dim"] == 73 and len(summary["observation_layout"]) == 73
    assert summary["action_heads"] == {"op": 4, "slot": 3, "blueprint": 6, "schedule": 2}
    assert summary["splits"] == {"train": 400, "val": 200, "test": 200}
    assert summary["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert summary["final_test_accuracy"] == metrics[-1]["charts/final_test_accuracy"]
    assert summary["final_val_accuracy"] == metrics[-1]["charts/final_val_accuracy"]
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["round-0001.pt", "round-0002.pt"]
    assert (run_dir / "events.jsonl").stat().st_size > 0
    checkpoint = torch.load(run_dir / "checkpoints" / "round-0002.pt", weights_only=True)
    assert checkpoint["learner"]["round"] == 2 and checkpoint["settings"]["n_envs"] == 2
    assert not (workdir / "runs").exists()
    grown = sorted(p.name for p in (run_dir / "grown").iterdir())
    assert grown == ["round-0002-env-00.pt", "round-0002-env-01.pt"]  # the last round's networks
    for i, name in enumerate(grown):
        record = read_grown(run_dir / "grown" / name)["record"]
        assert record["round"] == 2 and record["env"] == i
        assert plain_test_accuracy(esper.load_grown(run_dir / "grown" / name)) == record["final_test_accuracy"]


@pytest.mark.slow
def test_resume_continues_exactly(tiny_tasks, workdir: Path, tmp_path: Path) -> None:
    whole, split = tmp_path / "whole", tmp_path / "split"
    assert main(["ppo", "--episodes", "8", *TINY, "--run-dir", str(whole)]) == 0
    assert main(["ppo", "--episodes", "4", *TINY, "--run-dir", str(split)]) == 0
    assert main(["ppo", "--resume", str(split / "checkpoints" / "round-0002.pt"), "--episodes", "8", "--quiet"]) == 0
    a, b = rows(whole), rows(split)
    assert [r["round"] for r in b] == [1, 2, 3, 4]
    assert [without_timing(r) for r in a] == [without_timing(r) for r in b]
    final_a = torch.load(whole / "checkpoints" / "round-0004.pt", weights_only=True)["learner"]["policy"]
    final_b = torch.load(split / "checkpoints" / "round-0004.pt", weights_only=True)["learner"]["policy"]
    assert all(torch.equal(final_a[k], final_b[k]) for k in final_a)


@pytest.mark.slow
def test_resuming_a_copied_run_by_its_checkpoint_file_continues_in_the_copy(
    tiny_tasks, workdir: Path, tmp_path: Path
) -> None:
    """The checkpoint records where it was first written; a copy resumed by file must not write there."""
    original, copy = tmp_path / "original", tmp_path / "copy"
    assert main(["ppo", "--episodes", "2", *TINY, "--run-dir", str(original)]) == 0
    shutil.copytree(original, copy)
    before = tree(original)
    assert main(["ppo", "--resume", str(copy / "checkpoints" / "round-0001.pt"), "--episodes", "4", "--quiet"]) == 0
    assert tree(original) == before
    assert [r["round"] for r in rows(copy)] == [1, 2]
    resumed = torch.load(copy / "checkpoints" / "round-0002.pt", weights_only=True)
    assert Path(resumed["run_dir"]).resolve() == copy.resolve()


@pytest.mark.slow
def test_a_checkpoint_kept_outside_a_run_directory_resumes_in_its_recorded_one(
    tiny_tasks, workdir: Path, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    assert main(["ppo", "--episodes", "2", *TINY, "--run-dir", str(run_dir)]) == 0
    kept = tmp_path / "kept.pt"
    shutil.copyfile(run_dir / "checkpoints" / "round-0001.pt", kept)
    assert main(["ppo", "--resume", str(kept), "--episodes", "4", "--quiet"]) == 0
    assert [r["round"] for r in rows(run_dir)] == [1, 2]


@pytest.mark.slow
def test_resume_from_an_older_round_refuses_to_overwrite_later_checkpoints(
    tiny_tasks, workdir: Path, tmp_path: Path, capsys
) -> None:
    run_dir = tmp_path / "run"
    assert main(["ppo", "--episodes", "4", *TINY, "--run-dir", str(run_dir)]) == 0
    capsys.readouterr()
    before = tree(run_dir)
    check_usage_error(
        capsys,
        ["ppo", "--resume", str(run_dir / "checkpoints" / "round-0001.pt"), "--episodes", "6"],
        "round 1",
        "round-0002.pt",
        "new --run-dir",
    )
    assert tree(run_dir) == before


@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        (["--n-envs", "0"], ("--n-envs must be >= 1, got 0",)),
        (["--reward.mode", "contribution"], ("unknown reward mode 'contribution'", "dense sparse")),
        (["--ppo.learnin_rate", "1e-4"], ("--ppo.learnin_rate", "groups: ppo reward gates governor host")),
        (["--ppo.learning_rate", "fast"], ("ppo.learning_rate", "fast")),
        (["--gates.blend_epochs", "0"], ("blend_epochs must be >= 1", "0")),
        (["--gates.keep_reading", "fresh"], ("keep_reading 'fresh': choose from accuracy loss",)),
        (["--reward.gamma", "0.9"], ("shaping gamma (0.9) must equal the PPO gamma (1.0)",)),
        (["--reward.compute_price", "-1"], ("compute_price must be >= 0, got -1.0",)),
        (["--episodes", "0"], ("--episodes must be >= 1, got 0",)),
        (["--save-every", "0"], ("--save-every must be >= 1, got 0",)),
        (["--task", "imagenet"], ("unknown task 'imagenet'",)),
        (["--devices", "cpu", "cpu", "cpu", "--n-envs", "2"], ("3 devices", "--n-envs is 2")),
        (["--device", "cuda:7"], ("cuda:7", "available devices: cpu")),
        (["--devices", "cuda:0", "cuda:1"], ("'cuda:0' asked for CUDA", "available devices: cpu")),
        (["--devices", "gpu0"], ("malformed device 'gpu0'", "available devices: cpu")),
        (["--amp", "bf16"], ("--amp bf16 is for CUDA hosts", "cpu")),
        (["--amp", "fp8"], ("unknown --amp precision 'fp8'", "bf16 fp16")),
        (["--observe-budget"], ("--observe-budget needs a compute budget", "--gates.compute_budget")),
        (
            ["--heuristic.slot_blueprints", "[early=widen_50]", "--blueprints", "conv_heavy"],
            ("slot_blueprints early=widen_50: not among the run's blueprints: conv_heavy",),
        ),
        (["--heuristic.slot_blueprints", "[late=conv_heavy]", "--slots", "early"], ("'late' is not a slot",)),
    ],
)
def test_bad_arguments_get_one_line_and_exit_2(
    argv, fragments, tiny_tasks, workdir: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    check_usage_error(capsys, ["ppo", *argv, "--run-dir", str(tmp_path / "run")], *fragments)
    assert not (tmp_path / "run").exists()


def test_a_bad_pin_from_the_config_file_names_the_file(
    tiny_tasks, workdir: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    """The cloning teacher's pins read from `--config` are the file's, not a `--heuristic.` flag's."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    config = tmp_path / "teacher.toml"
    config.write_text('[heuristic]\nslot_blueprints = ["late=conv_heavy"]\n')
    argv = ["ppo", "--config", str(config), "--slots", "early", "--run-dir", str(tmp_path / "run")]
    line = check_usage_error(capsys, argv, f"--config {str(config)!r}: heuristic.slot", "'late' is not a slot")
    assert "--heuristic." not in line
    flag = ["--heuristic.slot_blueprints", "[late=conv_heavy]"]
    check_usage_error(capsys, [*argv, *flag], "--heuristic.slot", "'late' is not a slot")
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_resume_from_a_missing_corrupt_or_mismatched_checkpoint(
    tiny_tasks, workdir: Path, tmp_path: Path, capsys
) -> None:
    run_dir = tmp_path / "run"
    assert main(["ppo", "--episodes", "2", *TINY, "--run-dir", str(run_dir)]) == 0
    checkpoint = run_dir / "checkpoints" / "round-0001.pt"
    capsys.readouterr()
    before = tree(run_dir)

    check_usage_error(capsys, ["ppo", "--resume", str(tmp_path / "nope.pt")], "nope.pt", "does not exist")

    corrupt = tmp_path / "corrupt.pt"
    corrupt.write_bytes(checkpoint.read_bytes()[:200])
    check_usage_error(capsys, ["ppo", "--resume", str(corrupt)], "corrupt.pt", "corrupt or unreadable")
    text = tmp_path / "notes.txt"
    text.write_text("not a checkpoint")
    line = check_usage_error(
        capsys, ["ppo", "--resume", str(text)], "notes.txt", "not the zip archive torch.save writes"
    )
    assert "weights_only" not in line, "torch's advice to load unsafely is not passed on"

    # The same checkpoint on a text host: the observation layout differs.
    check_usage_error(
        capsys,
        ["ppo", "--resume", str(checkpoint), "--task", "pydoc", "--episodes", "4"],
        "does not fit this run's observation layout",
    )
    # A policy with a different slot head (as from a host with other slots).
    other = tmp_path / "other_heads.pt"
    payload = torch.load(checkpoint, weights_only=True)
    payload["spaces"]["action_heads"]["slot"] = 2
    torch.save(payload, other)
    check_usage_error(
        capsys, ["ppo", "--resume", str(other), "--episodes", "4"], "does not fit this run's action heads"
    )
    check_usage_error(capsys, ["ppo", "--resume", str(checkpoint)], "--episodes 2 is already reached")
    partial = tmp_path / "partial.pt"
    payload = torch.load(checkpoint, weights_only=True)
    del payload["learner"]["rng_ranks"]
    torch.save(payload, partial)
    check_usage_error(capsys, ["ppo", "--resume", str(partial), "--episodes", "4"], "lacks 'learner.rng_ranks'")
    assert tree(run_dir) == before


def test_a_pickled_object_in_a_checkpoint_is_refused(tiny_tasks, workdir: Path, tmp_path: Path, capsys) -> None:
    """weights_only=True: a checkpoint carrying arbitrary Python objects never runs their code."""
    evil = tmp_path / "evil.pt"
    torch.save({"format": CHECKPOINT_FORMAT, "payload": Path("/")}, evil)
    line = check_usage_error(capsys, ["ppo", "--resume", str(evil)], "evil.pt", "Python objects other than tensors")
    assert "weights_only" not in line, "torch's advice to load unsafely is not passed on"


def test_a_checkpoint_of_an_older_format_is_refused_in_one_line(
    tiny_tasks, workdir: Path, tmp_path: Path, capsys
) -> None:
    """A format-1 checkpoint holds reward settings that no longer exist, a format-2 one a policy
    with a shared trunk and no training seeds: one line, not a TypeError."""
    old = tmp_path / "old.pt"
    torch.save({"format": 1, "trainer": {"reward": {"mode": "contribution", "rent_weight": 0.5}}}, old)
    check_usage_error(capsys, ["ppo", "--resume", str(old)], "old.pt", "format 1", f"format {CHECKPOINT_FORMAT}")
    torch.save({"format": 2, "learner": {}}, old)
    check_usage_error(capsys, ["ppo", "--resume", str(old)], "old.pt", "format 2", f"format {CHECKPOINT_FORMAT}")


@pytest.mark.slow
def test_cuda_graphs_are_on_unless_turned_off_and_recorded(tiny_tasks, workdir: Path, tmp_path: Path) -> None:
    for flags, expected in (([], True), (["--no-cuda-graphs"], False)):
        run_dir = tmp_path / f"run-{expected}"
        assert main(["ppo", "--episodes", "2", *TINY, *flags, "--run-dir", str(run_dir)]) == 0
        assert json.loads((run_dir / "config.json").read_text())["settings"]["cuda_graphs"] is expected
    off = tmp_path / "run-False"
    assert main(["ppo", "--resume", "last", "--run-dir", str(off), "--episodes", "4", "--cuda-graphs", "--quiet"]) == 0
    assert json.loads((off / "config.json").read_text())["settings"]["cuda_graphs"] is True


@pytest.mark.slow
def test_knobs_come_from_a_config_file_and_flags_win(tiny_tasks, workdir: Path, tmp_path: Path) -> None:
    """Settings and knobs from a TOML file; a flag overrides the file; the run directory and the
    checkpoint record the resolved tree, and a resume keeps it."""
    config = tmp_path / "run.toml"
    config.write_text(
        "episodes = 2\nn_envs = 2\nmax_epochs = 2\n[ppo]\nlearning_rate = 0.001\nclip_coef = 0.1\n"
        "[gates]\nblend_epochs = 2\n[host]\nhost_lr = 0.01\n"
    )
    run_dir = tmp_path / "run"
    argv = ["ppo", "--config", str(config), "--ppo.clip_coef", "0.3", "--quiet", "--run-dir", str(run_dir)]
    assert main(argv) == 0
    resolved = json.loads((run_dir / "config.json").read_text())
    assert resolved["settings"]["episodes"] == 2 and resolved["settings"]["n_envs"] == 2
    assert resolved["knobs"]["ppo"]["learning_rate"] == 0.001 and resolved["knobs"]["ppo"]["clip_coef"] == 0.3
    assert resolved["knobs"]["gates"]["blend_epochs"] == 2 and resolved["knobs"]["host"]["host_lr"] == 0.01
    assert resolved["command_line"] and resolved["esper"]
    checkpoint = torch.load(run_dir / "checkpoints" / "round-0001.pt", weights_only=True)
    assert checkpoint["knobs"]["ppo"]["clip_coef"] == 0.3 and checkpoint["trainer"]["ppo"]["learning_rate"] == 0.001
    assert main(["ppo", "--resume", str(run_dir / "checkpoints" / "round-0001.pt"), "--episodes", "4", "--quiet"]) == 0
    resumed = json.loads((run_dir / "config.json").read_text())
    assert resumed["knobs"] == resolved["knobs"] and resumed["settings"]["episodes"] == 4


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ("[ppo]\nbogus = 1\n", ("unknown key 'ppo.bogus'", "valid keys of [ppo]: gamma", "learning_rate")),
        ("bogus = 1\n", ("unknown key 'bogus'", "episodes", "[reward]")),
        ("ppo = 3\n", ("'ppo' is a group of knobs",)),
        ("[ppo\n", ("is not valid TOML",)),
    ],
)
def test_a_bad_config_file_is_one_line(text, fragments, tiny_tasks, workdir: Path, tmp_path: Path, capsys) -> None:
    config = tmp_path / "run.toml"
    config.write_text(text)
    check_usage_error(capsys, ["ppo", "--config", str(config), "--run-dir", str(tmp_path / "run")], *fragments)
    assert not (tmp_path / "run").exists()


def test_help_shows_the_settings_and_names_the_knob_groups(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["ppo", "--help"])
    text = capsys.readouterr().out
    assert "--n-envs" in text and "--ppo.learning_rate" not in text  # the knobs are one step away
    for group in ("ppo", "reward", "gates", "governor", "host", "heuristic"):
        assert f"\n  {group} " in text
    assert "esper ppo --help-knobs GROUP" in text


def test_help_knobs_lists_the_knob_flags(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["ppo", "--help-knobs"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for flag in (
        "--ppo.learning_rate",
        "--ppo.clip_coef",
        "--reward.param_price",
        "--reward.mode",
        "--gates.blend_epochs",
    ):
        assert flag in text
    assert "--host.host_lr" in text and "Peak learning rate of the host" in " ".join(text.split())  # docstrings


def test_help_knobs_of_one_group(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["ppo", "--help-knobs", "reward"])
    text = capsys.readouterr().out
    assert "--reward.param_price" in text and "--ppo.learning_rate" not in text


def test_help_knobs_of_an_unknown_group_is_one_line(capsys) -> None:
    assert main(["heuristic", "--help-knobs", "bogus"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'bogus'" in err and "heuristic gates governor host" in err


def test_a_policy_that_observes_the_budget_is_saved_and_loaded_with_its_layout(
    tiny_tasks, workdir: Path, tmp_path: Path
) -> None:
    """`--observe-budget` widens the observation by the budget's block; the checkpoint records
    it, and the loaded policy is shaped alike and acts under an eval's budget."""
    run_dir = tmp_path / "run"
    budget = ["--gates.compute_budget", "1.5", "--blueprints", "widen_50", "conv_light"]
    assert main(["ppo", "--episodes", "2", *TINY, *budget, "--observe-budget", "--run-dir", str(run_dir)]) == 0
    checkpoint = run_dir / "checkpoints" / "round-0001.pt"
    controller = PolicyController.from_checkpoint(checkpoint)
    layout = controller.spaces.layout
    assert layout.budget_blueprints == ("conv_light", "widen_50")
    assert layout.feature_names()[-7:] == (
        "compute_budget_used",
        *(f"{slot}.fits_{b}" for slot in ("early", "mid", "late") for b in ("conv_light", "widen_50")),
    )
    plain = PolicyController.fresh(TASKS["shapes"], ("widen_50", "conv_light"))
    assert layout.obs_dim == plain.spaces.layout.obs_dim + 7
    eval_dir = tmp_path / "eval"
    argv = ["eval", "--task", "shapes", "--controllers", f"policy:{checkpoint}", "--seeds", "50:51", "--quiet"]
    assert main([*argv, "--max-epochs", "2", "--gates.compute_budget", "1.5", "--run-dir", str(eval_dir)]) == 0
    shipped = tmp_path / "policy.pt"  # what tools/ship_policy.py writes loads with the same layout
    torch.save(policy_only(read_checkpoint(checkpoint)), shipped)
    assert PolicyController.from_checkpoint(shipped).spaces.layout.obs_dim == layout.obs_dim
