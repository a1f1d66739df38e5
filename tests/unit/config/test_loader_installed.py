"""An installed package finds its ladders (issue 29): the ladders and the clusters file live in
`include/configs/` and ship as package data through the `include/traceladder/configs -> ../configs`
symlink, so after a real `pip install` the package holds one copy of them (`traceladder/configs/`),
the console script validates `proxy-local` from outside the checkout, and TRACELADDER_LADDERS_DIR /
TRACELADDER_CLUSTERS_FILE still win. The install is `--no-deps --no-build-isolation --target` of a
copy of the sources, symlink kept (the checkout stays clean; the test venv already has the
dependencies), about 5-10 s."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import REPO_ROOT

REPO = REPO_ROOT


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("installed")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    shutil.copytree(REPO / "include", src / "include", ignore=ignore, symlinks=True)
    assert (src / "include" / "traceladder" / "configs").is_symlink()
    site = tmp / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index"]
        + ["--no-compile", "--disable-pip-version-check", "--target", str(site), str(src)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return site


def _traceladder(site: Path, cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("TRACELADDER_")}
    script = site / "bin" / "traceladder"  # the console script pip wrote
    return subprocess.run(
        [sys.executable, str(script), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**base, "PYTHONPATH": str(site), **env},
        timeout=120,
    )


def test_installed_package_finds_its_ladders(installed: Path, tmp_path: Path) -> None:
    shipped = installed / "traceladder" / "configs"
    assert not shipped.is_symlink() and (shipped / "clusters.yaml").is_file()
    ladders = sorted(p.name for p in (REPO / "include" / "configs" / "ladders").glob("*.yaml"))
    assert sorted(p.name for p in (shipped / "ladders").glob("*.yaml")) == ladders
    # the wheel pip built held each file once, under traceladder/configs/ (its RECORD lists them)
    (record,) = installed.glob("traceladder-*.dist-info/RECORD")
    yamls = sorted(line.split(",")[0] for line in record.read_text().splitlines() if "/configs/" in line)
    assert yamls == ["traceladder/configs/clusters.yaml", *(f"traceladder/configs/ladders/{n}" for n in ladders)]
    proc = _traceladder(installed, tmp_path, "validate", "proxy-local")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"{shipped / 'ladders' / 'proxy-local.yaml'}: ok: ladder proxy-local"), proc.stdout


def test_environment_still_wins_over_the_shipped_configs(installed: Path, tmp_path: Path) -> None:
    ladders = tmp_path / "ladders"
    ladders.mkdir()
    shipped = installed / "traceladder" / "configs"
    text = (shipped / "ladders" / "proxy-local.yaml").read_text()
    (ladders / "mine.yaml").write_text(text.replace("ladder: proxy-local", "ladder: mine", 1))
    seed = "deepseek-v4-flash-mi350x.yaml"  # what proxy-local extends
    shutil.copy(shipped / "ladders" / seed, ladders / seed)
    clusters = tmp_path / "clusters.yaml"
    shutil.copy(shipped / "clusters.yaml", clusters)
    env = {"TRACELADDER_LADDERS_DIR": str(ladders), "TRACELADDER_CLUSTERS_FILE": str(clusters)}
    proc = _traceladder(installed, tmp_path, "validate", "mine", **env)
    assert proc.returncode == 0 and proc.stdout.startswith(f"{ladders / 'mine.yaml'}: ok: ladder mine"), proc
    missing = _traceladder(installed, tmp_path, "validate", "proxy-local", **env)  # not in the given folder
    assert missing.returncode == 2 and missing.stderr.splitlines() == [
        f"ladder: no ladder named 'proxy-local' in {ladders}"
    ]
    clusters.write_text("schema: 1\nclusters: {}\n")
    no_cluster = _traceladder(installed, tmp_path, "validate", "mine", **env)
    assert no_cluster.returncode == 2 and str(clusters) in no_cluster.stderr, no_cluster


def test_installed_package_carries_the_upstream_facts(installed: Path, tmp_path: Path) -> None:
    """The upstream table (config/upstream/facts.csv, docs/upstream.md) is package data: the wheel
    holds it and the installed loader reads it from outside the checkout."""
    shipped = installed / "traceladder" / "config" / "upstream" / "facts.csv"
    assert shipped.read_bytes() == (REPO / "include" / "traceladder" / "config" / "upstream" / "facts.csv").read_bytes()
    (record,) = installed.glob("traceladder-*.dist-info/RECORD")
    assert "traceladder/config/upstream/facts.csv" in {line.split(",")[0] for line in record.read_text().splitlines()}
    code = "from traceladder.config import upstream; print(upstream.__file__, len(upstream.facts('log_segment')) > 0)"
    base = {k: v for k, v in os.environ.items() if not k.startswith("TRACELADDER_")}
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**base, "PYTHONPATH": str(installed)},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(installed / "traceladder" / "config" / "upstream.py"), "True"]
