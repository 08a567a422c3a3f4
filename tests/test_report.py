"""`esper report`: the page and figures of grown, static and PPO runs, overlaid; the page renders
in headless Chromium with every image decoded and no console message."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from conftest import tiny_shapes_task
from esper.karn.rundir import read_run
from esper.scripts.cli import main
from esper.tolaria import TASKS
from test_cli import check_usage_error

pytestmark = pytest.mark.slow
EAGER = ["--heuristic.warmup_epochs", "1", "--heuristic.plateau_patience", "1", "--heuristic.germination_cooldown", "1"]
PROBE = """<script>window.onload = () => { document.body.dataset.images =
  [...document.images].every(i => i.complete && i.naturalWidth > 0) ? "decoded" : "broken"; };</script>"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A grown heuristic run, its static twin and a tiny PPO run, on the tiny shapes task."""
    root = tmp_path_factory.mktemp("runs")
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(TASKS, "shapes", tiny_shapes_task())
        common = ["--episodes", "2", "--max-epochs", "16", "--quiet"]
        assert main(["heuristic", *common, *EAGER, "--run-dir", str(root / "grown")]) == 0
        assert main(["heuristic", *common, "--max-germinations", "0", "--run-dir", str(root / "static")]) == 0
        ppo = [
            "ppo",
            "--episodes",
            "4",
            "--n-envs",
            "2",
            "--max-epochs",
            "3",
            "--quiet",
            "--run-dir",
            str(root / "ppo"),
        ]
        assert main(ppo) == 0
    return {name: root / name for name in ("grown", "static", "ppo")}


@pytest.mark.slow
def test_a_grown_run_and_its_static_twin_give_a_page_and_figures(runs, tmp_path: Path, capsys) -> None:
    out = tmp_path / "report"
    assert main(["report", str(runs["grown"]), str(runs["static"]), "--out", str(out)]) == 0
    assert str(out / "report.html") in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == [
        "contributions.png",
        "host_accuracy.png",
        "parameters.png",
        "report.html",
        "swimlanes.png",
    ]
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 4 and "<script" not in page
    assert "grown" in page and "static" in page and "test − static twin" in page
    assert page.count("<p class=caption>") == 4
    grown = read_run(runs["grown"])
    assert any(c["target"] == "GERMINATED" for e in grown.episodes.values() for c in e.changes), "seeds to draw"


def test_a_ppo_run_adds_the_per_round_figure_and_defaults_into_its_folder(runs) -> None:
    assert main(["report", str(runs["ppo"])]) == 0
    out = runs["ppo"] / "report"
    assert (out / "ppo_rounds.png").stat().st_size > 10_000
    assert (out / "report.html").read_text().count("data:image/png;base64,") == 5


def test_a_bad_run_directory_is_one_line_and_writes_nothing(runs, tmp_path: Path, capsys) -> None:
    check_usage_error(capsys, ["report", str(tmp_path / "missing")], "is not a directory")
    empty = tmp_path / "empty"
    empty.mkdir()
    check_usage_error(capsys, ["report", str(empty)], "is not an Esper run directory")
    check_usage_error(capsys, ["report", str(runs["grown"]), str(empty)], "is not an Esper run directory")
    assert not (runs["grown"] / "report").exists() and list(empty.iterdir()) == []


def render(page: Path) -> tuple[str, list[str]]:
    """Chromium's DOM of `page` once loaded, and the console lines it logged."""
    done = subprocess.run(
        [
            shutil.which("chromium") or "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=5000",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, [line for line in done.stderr.splitlines() if ":CONSOLE" in line]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Chromium (apt-get install chromium)")
def test_the_page_renders_in_chromium_with_no_console_message(runs, tmp_path: Path) -> None:
    out = tmp_path / "report"
    assert main(["report", str(runs["grown"]), str(runs["static"]), str(runs["ppo"]), "--out", str(out)]) == 0
    probed = tmp_path / "probed.html"
    probed.write_text((out / "report.html").read_text().replace("</body>", PROBE + "</body>"))
    dom, console = render(probed)
    assert console == []
    assert 'data-images="decoded"' in dom and "<h1>Esper report: grown, static, ppo</h1>" in dom
    # The check can fail: a page that logs, and a broken image, are both caught.
    bad = tmp_path / "bad.html"
    bad.write_text('<html><body><img src="data:image/png;base64,AAAA"><script>console.error("x")</script>' + PROBE)
    dom, console = render(bad)
    assert console and 'data-images="broken"' in dom
    assert json.loads(json.dumps(console))  # plain strings


DAMAGES = {
    "truncated": lambda data: data[: len(data) // 2],
    "garbage bytes": lambda data: b"\x00\xff\xfe garbage \x81" + data[7:],
    "wrong types": lambda data: b"[1, 2, 3]\n" if data.lstrip().startswith(b"{") else b'"text"\n',
    "empty": lambda data: b"",
    "wrong keys": lambda data: b'{"x": 1}\n{"y": [2]}\n' if b"\n" in data.strip() else b'{"x": 1}',
}


@pytest.mark.slow
@pytest.mark.parametrize("damage", sorted(DAMAGES))
@pytest.mark.parametrize(
    ("run", "name"),
    [
        ("grown", "events.jsonl"),
        ("grown", "summary.json"),
        ("grown", "config.json"),
        ("ppo", "metrics.jsonl"),
        ("ppo", "summary.json"),
    ],
)
def test_report_and_watch_of_a_damaged_run_file_are_one_line_or_read_around_it(
    runs, run: str, name: str, damage: str, tmp_path: Path, capsys
) -> None:
    """Each run file damaged four ways: `report` and `watch` either read what is whole or stop
    with exit 2 and one line naming the file; never a traceback."""
    copy = tmp_path / run
    shutil.copytree(runs[run], copy, ignore=shutil.ignore_patterns("report"))
    target = copy / name
    target.write_bytes(DAMAGES[damage](target.read_bytes()))
    for argv in (["report", str(copy), "--out", str(tmp_path / "out")], ["watch", str(copy), "--once"]):
        rc = main(argv)
        _, err = capsys.readouterr()
        assert rc in (0, 2), (argv, err)
        if rc == 2:  # one line, naming the damaged file (or saying the run has nothing to read yet)
            assert len(err.splitlines()) == 1 and (name in err or "no epoch yet" in err), err
        assert "Traceback" not in err
