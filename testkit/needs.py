"""What the integration and fault tests need from the machine: in CI a missing part fails the
test; elsewhere it is a clear skip."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def unavailable(message: str) -> NoReturn:
    if in_ci():
        pytest.fail(f"required in CI: {message}", pytrace=False)
    pytest.skip(message)
