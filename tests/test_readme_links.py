"""Every relative link of the README and of the experiments' READMEs names a file that exists
(the docs site's own links are checked by `mkdocs build --strict` in CI)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "experiments").rglob("README.md"))]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text())
    relative = [t for t in targets if "://" not in t]
    missing = [t for t in relative if not (page.parent / t).exists()]
    assert not missing, f"{page.relative_to(ROOT)} links to missing files: {missing}"


EXPERIMENTS = sorted(p for p in (ROOT / "experiments").iterdir() if p.is_dir())


@pytest.mark.parametrize("experiment", EXPERIMENTS, ids=lambda p: p.name)
def test_every_record_of_an_experiment_is_named_by_its_readme(experiment: Path) -> None:
    """An experiment's README is the index of its results: a JSON record it does not name is lost."""
    readme = (experiment / "README.md").read_text()
    records = [p.relative_to(experiment).as_posix() for p in experiment.rglob("*.json")]
    unnamed = [r for r in records if r not in readme]
    assert not unnamed, f"experiments/{experiment.name}/README.md names none of {unnamed}"


def test_every_experiment_is_listed() -> None:
    index = (ROOT / "experiments" / "README.md").read_text()
    assert all(f"]({e.name}/README.md)" in index for e in EXPERIMENTS)
