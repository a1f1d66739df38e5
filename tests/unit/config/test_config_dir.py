"""The ladders and the clusters file live in `include/configs/`, where a user reads and edits them;
`include/traceladder/configs` is a relative symlink to it (the one copy, shipped as package data),
and the loader finds them there unless TRACELADDER_LADDERS_DIR / TRACELADDER_CLUSTERS_FILE say
otherwise."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tests.conftest import REPO_ROOT

from traceladder.config.loader import CONFIG_DIR, clusters_file, find_ladder, ladder_files, ladders_dir, load_ladder

CONFIGS = REPO_ROOT / "include" / "configs"


@pytest.fixture
def no_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRACELADDER_LADDERS_DIR", raising=False)
    monkeypatch.delenv("TRACELADDER_CLUSTERS_FILE", raising=False)


def test_the_configs_live_in_include_configs() -> None:
    assert (CONFIGS / "ladders" / "proxy-local.yaml").is_file()
    assert (CONFIGS / "clusters.yaml").is_file()
    link = REPO_ROOT / "include" / "traceladder" / "configs"
    assert link.is_symlink() and os.readlink(link) == "../configs", "the package's configs must be a link, not a copy"


@pytest.mark.usefixtures("no_overrides")
def test_the_loader_finds_the_ladders_in_include_configs() -> None:
    assert CONFIG_DIR == CONFIGS.resolve()
    assert ladders_dir() == CONFIGS.resolve() / "ladders" and clusters_file() == CONFIGS.resolve() / "clusters.yaml"
    assert find_ladder("proxy-local") == CONFIGS.resolve() / "ladders" / "proxy-local.yaml"
    assert {p.name for p in ladder_files()} == {p.name for p in (CONFIGS / "ladders").glob("*.yaml")}
    assert load_ladder(find_ladder("proxy-local")).ladder.ladder == "proxy-local"


def test_the_environment_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TRACELADDER_LADDERS_DIR", str(tmp_path / "ladders"))
    monkeypatch.setenv("TRACELADDER_CLUSTERS_FILE", str(tmp_path / "clusters.yaml"))
    assert ladders_dir() == tmp_path / "ladders" and clusters_file() == tmp_path / "clusters.yaml"
