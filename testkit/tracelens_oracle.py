"""The real TraceLens v1.0.0, built from the mirror into a venv of its own: the oracle that
``benchmarks/bench_tracelens_diff.py`` compares ``traceladder analyze`` against and that
``tests/fixtures/tracelens/regenerate.py`` makes the fixtures' expected sheets with."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from testkit.paths import SHARED

MIRROR = Path(os.environ.get("TRACELENS_MIRROR", "/work/.mirror/AMD-AGI+TraceLens/repo"))
ORACLE = Path(os.environ.get("TRACELENS_ORACLE", "/tmp/tracelens-oracle"))  # noqa: S108 - the script's default
TAG = "v1.0.0"
ORACLE_CMD = "TraceLens_generate_perf_report_pytorch"


#: what the oracle is built from: the package and its build files (the mirror lacks some
#: large test blobs, which is why the shared script's ``git archive`` of the tag fails there)
_ORACLE_PATHS = ("TraceLens", "setup.py", "pyproject.toml", "setup.cfg", "README.md", "LICENSE")


def oracle_bin() -> Path:
    """The oracle venv's bin dir, built when missing: through the shared script, or, where that
    fails (its ``git archive`` stops on the mirror's missing large blobs), by the same steps
    with ``read-tree`` + ``checkout-index`` of the package paths only, which never touch them."""
    exe = ORACLE / "bin" / ORACLE_CMD
    if exe.exists():
        return exe.parent
    script = SHARED / "tools" / "tracelens_oracle.sh"
    r = subprocess.run(["bash", str(script), str(MIRROR), str(ORACLE)], capture_output=True, text=True)
    if r.returncode != 0 or not exe.exists():
        _build_oracle_by_checkout()
    if not exe.exists():
        raise RuntimeError(f"tracelens_diff: the oracle did not build from {MIRROR}: {r.stderr.strip()[-500:]}")
    return exe.parent


def oracle_source(dest: Path) -> Path:
    """TraceLens v1.0.0's package files from the mirror into ``dest`` (a throwaway index, so
    only the blobs of those paths are read)."""
    git = ["git", f"--git-dir={MIRROR}"]
    names = subprocess.run([*git, "ls-tree", TAG, "--name-only"], capture_output=True, text=True, check=True)
    paths = [p for p in names.stdout.split() if p in _ORACLE_PATHS]
    env = {**os.environ, "GIT_INDEX_FILE": str(dest / ".oracle-index")}
    subprocess.run([*git, "read-tree", TAG], env=env, check=True)
    listed = subprocess.run([*git, "ls-files", "--", *paths], env=env, capture_output=True, text=True, check=True)
    subprocess.run(
        [*git, f"--work-tree={dest}", "checkout-index", f"--prefix={dest}/", "--stdin"],
        input=listed.stdout,
        env=env,
        text=True,
        check=True,
    )
    (dest / ".oracle-index").unlink()
    return dest


def _build_oracle_by_checkout() -> None:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="tracelens-src-") as tmp:
        src = oracle_source(Path(tmp))
        subprocess.run([sys.executable, "-m", "venv", str(ORACLE)], check=True)
        subprocess.run([str(ORACLE / "bin" / "pip"), "install", "-q", str(src)], check=True)
