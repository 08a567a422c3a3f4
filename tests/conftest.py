"""Shared fixtures: tiny versions of the embedded tasks, so end-to-end tests run in seconds."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch
from hypothesis import settings

from esper.kasmina import CNNHost, TransformerHost
from esper.leyline import Decision, GateThresholds, LifecycleOp, SeedStage, TrainingSignals
from esper.tolaria import DATA_DIR_ENV, EnvConfig, MorphogeneticEnv, TaskSpec, get_task
from esper.tolaria.datasets import ImageData, TokenData, load_shapes, pydoc_topics_bytes, split_tokens
from esper.tolaria.passes import VALIDATION_BATCH_SIZE
from esper.tolaria.training import validate

# No per-example deadline: these properties are about values, not time, and a loaded two-core
# machine once took 277 ms over a 0.2 ms example (a learning-rate schedule), failing the run.
settings.register_profile("esper", deadline=None)
settings.load_profile("esper")

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--full", action="store_true", help="run every test: the slow tier too (what CI runs)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The default run is the fast tier: tests marked `slow` (end-to-end runs of several seconds)
    are deselected unless `--full` is given, or `-m` chooses by marker itself."""
    if config.getoption("--full") or config.option.markexpr:
        return
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if item.get_closest_marker("slow") is None]


def load_benchmark(name: str, folder: Path = BENCHMARKS) -> ModuleType:
    """A script of `benchmarks/` (or of another folder: an experiment's) as a module, so its
    functions can be tested."""
    spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[name] = module  # dataclasses look their module up while it executes
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def enum_name(member: object) -> str:
    """Readable test ids: stage and op names instead of their integer values."""
    return getattr(member, "name", repr(member))


def training_signals(slots, **overrides) -> TrainingSignals:
    """Signals of a mid-episode env with the given slot signals; any field can be overridden."""
    fields = dict(
        epoch=5,
        max_epochs=25,
        train_loss=1.0,
        train_accuracy=50.0,
        val_loss=1.0,
        val_accuracy=50.0,
        val_accuracy_delta=0.0,
        val_loss_delta=0.0,
        best_val_accuracy=50.0,
        plateau_epochs=3,
        host_params=100,
        seed_params=0,
        seeds_germinated=0,
        max_germinations=6,
        epochs_since_germination=10,
    )
    fields.update(overrides)
    return TrainingSignals(slots=tuple(slots), **fields)


def tiny_shapes_task() -> TaskSpec:
    return dataclasses.replace(
        get_task("shapes"),
        make_host=lambda width: CNNHost(width=width, depth=3),
        host_width=4,
        load_data=lambda _: tiny_shapes_data(),
        batch_size=50,
        max_epochs=6,
        lr_warmup_epochs=0,  # shapes' 3 of 40 epochs would be half of these 6 (tests that need one set it)
    )


def tiny_shapes_data() -> ImageData:
    data = load_shapes(0, n_train=400, n_val=200, n_test=200, image_size=16, samples_per_epoch=None)
    return dataclasses.replace(data, calibration_size=200)


def tiny_text_task() -> TaskSpec:
    def data(_):
        train, val, test = split_tokens(pydoc_topics_bytes()[:60_000], val_fraction=0.2, test_fraction=0.1)
        return TokenData(train, val, test, block_size=16, train_windows_per_epoch=128, max_eval_windows=32)

    return dataclasses.replace(
        get_task("pydoc"),
        make_host=lambda width: TransformerHost(block_size=16, d_model=width, n_layer=3, n_slots=3),
        host_width=32,
        load_data=data,
        batch_size=32,
        max_epochs=4,
    )


def make_env(
    task: TaskSpec | None = None,
    max_epochs: int = 6,
    max_germinations: int = 6,
    slots: tuple[str, ...] = ("early", "mid", "late"),
    device: torch.device = torch.device("cpu"),  # noqa: B008
    **kwargs,
) -> MorphogeneticEnv:
    task = task or tiny_shapes_task()
    config = EnvConfig(
        task=task,
        device=device,
        max_epochs=max_epochs,
        enabled_slots=slots,
        max_germinations=max_germinations,
        **kwargs,
    )
    return MorphogeneticEnv(config, task.load_data(None))


def assert_signals_measure_the_model_left(env: MorphogeneticEnv, signals: TrainingSignals) -> None:
    """The signals' selection loss and accuracy are those of the env's model as it is now."""
    left = validate(
        env.model,
        env.passes.data.val_batches(VALIDATION_BATCH_SIZE),
        (),
        calibration=env.passes.data.calibration_batches(VALIDATION_BATCH_SIZE),
    )
    assert signals.val_loss == pytest.approx(left.loss)
    assert signals.val_accuracy == pytest.approx(left.accuracy)


@pytest.fixture
def shapes_task() -> TaskSpec:
    return tiny_shapes_task()


@pytest.fixture
def text_task() -> TaskSpec:
    return tiny_text_task()


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    """Every test starts on one torch thread and leaves the count as it found it. Float sums
    depend on the thread count, and `esper` commands set it (`--threads`) for the process: two
    exact-equality tests passed or failed by which test had run before them."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Run from an empty folder (so a default `runs/` would show up), with no data-dir env."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    yield cwd


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else b"<dir>" for p in sorted(root.rglob("*"))}


EVERYTHING_KEPT = GateThresholds(fossilize_min_contribution=-1e9, probation_cull_contribution=-1e9)


def scripted_episode(env, scenario: str) -> list:
    """Nine epochs that germinate in `mid`, then fossilize (and merge a width seed), cull, or
    poison the host with NaN (a governor rollback), by scenario."""
    blueprint = "conv_light" if scenario in ("cull", "panic") else "widen_50"
    env.reset(0)
    seen = []
    for epoch in range(9):
        if env.episode_over:
            break
        slot = env.model.slot("mid")
        decision = Decision.wait()
        if epoch == 0:
            decision = Decision(LifecycleOp.GERMINATE, "mid", blueprint)
        elif slot.stage is SeedStage.PROBATIONARY and scenario == "cull":
            decision = Decision(LifecycleOp.CULL, "mid")
        elif slot.stage is SeedStage.PROBATIONARY and slot.lifecycle.epochs_in_stage >= 1 and scenario != "panic":
            decision = Decision(LifecycleOp.FOSSILIZE, "mid")
        if scenario == "panic" and epoch == 5:
            with torch.no_grad():
                next(env.model.host_parameters()).fill_(float("nan"))
        result = env.step(decision)
        seen.append((result.signals, result.panic))
    return seen
