"""Where the test kit finds the checkout and the shared reference data beside it."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The reference traces and tools beside the clone; TRACELADDER_SHARED points elsewhere.
SHARED = Path(os.environ.get("TRACELADDER_SHARED", REPO.parent / "shared"))
