"""Issue 29, item 12: the reference directory (tests/conftest.py) has one source that an
environment variable overrides."""

from __future__ import annotations

import os
from pathlib import Path

from tests.conftest import REFERENCE_DIR, REPO_ROOT, reference_dir_from


def test_the_reference_dir_is_beside_the_repository_unless_the_environment_says_otherwise(tmp_path: Path) -> None:
    assert reference_dir_from({}) == REPO_ROOT.parent / "shared" / "reference"
    assert reference_dir_from({"TRACELADDER_REFERENCE_DIR": str(tmp_path)}) == tmp_path
    assert reference_dir_from({"TRACELADDER_REFERENCE_DIR": ""}) == REPO_ROOT.parent / "shared" / "reference"
    assert REFERENCE_DIR == reference_dir_from(os.environ)


def test_the_reference_dir_fixture_gives_the_one_the_tests_parametrize_over(reference_dir: Path) -> None:
    assert reference_dir == REFERENCE_DIR
    assert (reference_dir / "tracelens-v1.0.0").is_dir(), f"no tracelens-v1.0.0 under {reference_dir}"
