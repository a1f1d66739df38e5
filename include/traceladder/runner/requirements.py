"""The imports the runner needs inside the runner image, checked at start so a base image that
lacks one fails with one line naming the package and the fix, not a traceback mid-rung.
(boto3 is pinned in the rocm/primus v26.4-v26.5.1 Dockerfiles; v26.7 is not confirmed.)"""

from __future__ import annotations

import importlib.util

_BOTO3_FIX = (
    "put boto3 and its dependencies in docker/wheels/ (pip download boto3 -d docker/wheels) and rebuild the runner "
    "image, or use a BASE_IMAGE that has boto3"
)
# module -> the fix; the S3 upload needs boto3, the trace readers sqlite3 and gzip
REQUIRED = {
    "boto3": _BOTO3_FIX,
    "botocore": _BOTO3_FIX,
    "sqlite3": "the base image's Python was built without sqlite3; use a BASE_IMAGE whose python3 has it",
    "gzip": "the base image's Python lacks zlib; use a BASE_IMAGE whose python3 has it",
}


def missing_import(needs_s3: bool = True) -> str | None:
    """The first missing module as a one-line message, or None when all import."""
    for module, fix in REQUIRED.items():
        if not needs_s3 and module in ("boto3", "botocore"):
            continue
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            return f"runner image: Python package {module!r} is missing: {fix}"
    return None
