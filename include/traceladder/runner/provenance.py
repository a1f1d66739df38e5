"""What ran, as the runner sees it from inside the container (standard library only).

Every field is read from the tool or file that owns it, never assumed; what cannot be read is
``None`` (and the reason goes to ``provenance_notes``), so a week-over-week comparison flags a change
rather than a guess:

* ``image_digest`` (the image's ``RepoDigests[0]``) and ``image_id`` come from the Docker daemon:
  the operator looks the image up before the rung and passes them in as
  ``TRACELADDER_IMAGE_DIGEST`` / ``TRACELADDER_IMAGE_ID``;
* ``build``: the build catalog entry the rung runs (``TRACELADDER_BUILD``, set by the plan);
* ``rocm_version``: ``$ROCM_PATH/.info/version`` (default ``/opt/rocm``);
* ``gpu``: product, architecture, driver version and count from ``amd-smi static --json`` (ROCm 7
  wraps the list in ``{"gpu_data": [...]}``; older releases print the bare list);
* ``primus_commit``: ``git -C $PRIMUS_PATH rev-parse HEAD``, or ``.git/HEAD`` read directly where the
  image has no git;
* ``tools``: ``rocprofv3 --version`` and ``rtl --version`` (first line), ``torch`` (package metadata),
  ``python``.
"""

from __future__ import annotations

import json
import platform
import re
import shutil
import subprocess
from pathlib import Path

from traceladder.core.documents import JSONObject

from traceladder.core import env_vars

_TIMEOUT_S = 20


def _run(argv: list[str]) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def rocm_version(env: dict[str, str]) -> str | None:
    path = Path(env.get("ROCM_PATH") or "/opt/rocm") / ".info" / "version"
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def amd_smi_rows(text: str | None) -> list[JSONObject]:
    """The per-GPU rows of an ``amd-smi ... --json`` output, in either wrapper shape."""
    if not text:
        return []
    try:
        doc = json.loads(text)
    except ValueError:
        return []
    if isinstance(doc, dict):
        doc = doc.get("gpu_data", [])
    return [row for row in doc if isinstance(row, dict)] if isinstance(doc, list) else []


def gpu_info() -> JSONObject | None:
    rows = amd_smi_rows(_run(["amd-smi", "static", "--asic", "--driver", "--json"]))
    if not rows:
        return None
    first = rows[0]
    asic, driver = _section(first, "asic"), _section(first, "driver")
    return {
        "product": asic.get("market_name"),
        "arch": asic.get("target_graphics_version"),
        "driver_version": driver.get("version") or driver.get("driver_version"),
        "count": len(rows),
    }


def _section(row: JSONObject, name: str) -> JSONObject:
    section = row.get(name)
    return section if isinstance(section, dict) else {}


def primus_commit(primus_path: Path) -> str | None:
    out = _run(["git", "-C", str(primus_path), "rev-parse", "HEAD"])
    if out and re.fullmatch(r"[0-9a-f]{40}", out.strip()):
        return out.strip()
    git = primus_path / ".git"
    try:
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref: "):
            return head or None
        ref = head[5:]
        loose = git / ref
        if loose.exists():
            return loose.read_text().strip() or None
        for line in (git / "packed-refs").read_text().splitlines():
            if line.endswith(" " + ref):
                return line.split()[0]
    except OSError:
        return None
    return None


def tool_version(tool: str) -> str | None:
    out = _run([tool, "--version"])
    return out.strip().splitlines()[0][:200] if out and out.strip() else None


def torch_version() -> str | None:
    try:
        from importlib.metadata import PackageNotFoundError, version

        return version("torch")
    except (ImportError, PackageNotFoundError):
        return None


def collect(backend: str, env: dict[str, str], primus_path: Path | None) -> JSONObject:
    """Provenance fields for metrics.json; docker-only fields are None on the local backend."""
    tools: dict[str, str | None] = {"torch": torch_version(), "python": platform.python_version()}
    out: JSONObject = {
        "image_digest": env_vars.IMAGE_DIGEST.get(env),
        "image_id": env_vars.IMAGE_ID.get(env),
        # the build catalog's entry (a ladder's `build:`; local backend): the history tells builds apart
        "build": env_vars.BUILD.get(env),
        "rocm_version": None,
        "gpu": None,
        "primus_commit": None,
        "tools": {},  # filled below, without the tools not found
    }
    if backend == "docker":
        tools["rocprofv3"] = tool_version("rocprofv3")
        tools["rtl"] = tool_version("rtl")
        out.update(
            rocm_version=rocm_version(env),
            gpu=gpu_info(),
            primus_commit=primus_commit(primus_path) if primus_path else None,
        )
    out["tools"] = {k: v for k, v in tools.items() if v is not None}
    return out
