"""Host hygiene around a rung container: a pre-flight check of the worker host, the removal of
orphaned traceladder containers, the stop of a running one whose task instance no longer runs
(issue 27), and the spool's housekeeping (issue 30). Works on a docker-py ``APIClient`` (the
operator's ``self.cli``).

Every traceladder container carries ``traceladder.managed=true`` and ``traceladder.host=<host>``
labels (plus ladder, rung and run labels, and its task instance: dag, run id, task, map index),
so cleanup never touches anything else on the host.
Failures are one line that names the host: ``host mi350x-01: <what> (<detail>)``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterable

from traceladder.core.codec import Document, JSONObject, JSONValue, Part, doc_field
from traceladder.core.errors import TraceladderError

MANAGED_LABEL = "traceladder.managed"
HOST_LABEL = "traceladder.host"
RUN_LABEL = "traceladder.run"
RUNG_LABEL = "traceladder.rung"
LADDER_LABEL = "traceladder.ladder"
# The task instance that started the container: what the preflight asks Airflow about.
TI_LABELS = ("traceladder.dag_id", "traceladder.run_id", "traceladder.task_id", "traceladder.map_index")

# Run in a throw-away container of the rung's image with the rung's devices: the daemon refuses
# to create it when a device is missing on the host; the script reports the free space of the
# filesystem the container writes to (the Docker data root) and, with `gpus`, what amd-smi (or
# rocm-smi) sees: the GPU count and the processes that hold a GPU. amd-smi's JSON is a bare list
# of per-GPU rows, or (ROCm 7) {"gpu_data": [...]}; a process row is {"process_info": {...}}, or
# the string "No running processes detected" in some releases.
_CHECK_SCRIPT = r"""
import json, os, shutil, subprocess, sys
want_gpus = sys.argv[1] == "gpus"
paths = sys.argv[2:]
out = {"missing": [p for p in paths if not os.path.exists(p)], "free_gb": round(shutil.disk_usage("/").free / 2**30, 2)}
def smi(*args):
    try:
        r = subprocess.run(list(args), capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, str(exc)
    if r.returncode != 0:
        return None, (r.stderr or r.stdout).strip()[-300:]
    try:
        doc = json.loads(r.stdout)
    except ValueError:
        return None, "not JSON: " + r.stdout.strip()[:200]
    return (doc.get("gpu_data", doc) if isinstance(doc, dict) else doc), None
if want_gpus:
    if shutil.which("amd-smi"):
        rows, err = smi("amd-smi", "list", "--json")
        procs, perr = smi("amd-smi", "process", "--json")
        busy = []
        for row in procs or []:
            for p in row.get("process_list") or []:
                info = p.get("process_info") if isinstance(p, dict) else None
                if isinstance(info, dict):
                    busy.append({"gpu": row.get("gpu"), "pid": info.get("pid"), "name": info.get("name")})
        count = len(rows) if isinstance(rows, list) else None
        out["gpus"] = {"tool": "amd-smi", "count": count, "busy": busy, "error": err or perr}
    elif shutil.which("rocm-smi"):
        doc, err = smi("rocm-smi", "--showid", "--json")
        cards = [k for k in (doc or {}) if k.startswith("card")] if isinstance(doc, dict) else []
        pids, perr = smi("rocm-smi", "--showpids", "--json")
        system = ((pids or {}).get("system") or {}) if isinstance(pids, dict) else {}
        busy = [
            {"gpu": None, "pid": k[3:], "name": str(v).split(",")[0]} for k, v in system.items() if k.startswith("PID")
        ]
        count = len(cards) if doc is not None else None
        out["gpus"] = {"tool": "rocm-smi", "count": count, "busy": busy, "error": err or perr}
    else:
        msg = "neither amd-smi nor rocm-smi is on PATH in the image"
        out["gpus"] = {"tool": None, "count": None, "busy": [], "error": msg}
print(json.dumps(out))
"""


class HostCheckError(TraceladderError, RuntimeError):
    """The worker host cannot run a rung; the message is one line naming the host."""

    def __init__(self, host: str, what: str, detail: str = "") -> None:
        detail = " ".join(str(detail).split())[:300]
        super().__init__(f"host {host}: {what}" + (f" ({detail})" if detail else ""))


@dataclass(frozen=True, kw_only=True)
class BusyGpu(Part):
    """A process that holds a GPU, as amd-smi or rocm-smi names it: the GPU (amd-smi's index;
    rocm-smi says none), the pid and the process name, each printed as the tool gave it."""

    FILE: ClassVar[str] = "busy GPU"

    gpu: JSONValue = doc_field("any?", default=None)
    pid: JSONValue = doc_field("any?", default=None)
    name: JSONValue = doc_field("any?", default=None)


@dataclass(frozen=True, kw_only=True)
class GpuCheck(Part):
    """The check container's GPU part: the tool that looked (amd-smi, rocm-smi; None: neither is
    in the image), the GPUs it sees (None: it could not tell), the busy ones, and its error."""

    FILE: ClassVar[str] = "gpus"

    tool: str | None = doc_field("str?", default=None)
    count: int | None = doc_field("int?", default=None)
    busy: list[BusyGpu] = doc_field("list", default=[], part=BusyGpu)
    error: str | None = doc_field("str?", default=None)


@dataclass(frozen=True, kw_only=True)
class CheckAnswer(Part):
    """The check container's one output line (``_CHECK_SCRIPT``): the device paths missing in
    the container, the free GiB of the filesystem it writes to, and with ``gpus`` the GPU part."""

    FILE: ClassVar[str] = "the check container's answer"

    missing: list[str] = doc_field("list", default=[])
    free_gb: float = doc_field("number")
    gpus: GpuCheck | None = doc_field("object?", default=None, part=GpuCheck)


@dataclass(frozen=True, kw_only=True)
class ImageProvenance(Document):
    """What the daemon says the image is: its ``Id`` (``image``, and again as ``image_id``) and
    its ``RepoDigests[0]`` (``image_digest``; None for a locally built or imported image)."""

    FILE: ClassVar[str] = "image provenance"
    WRITES_SCHEMA: ClassVar[bool] = False
    UNVERSIONED: ClassVar[int | None] = 1

    image: str = doc_field("str")
    image_id: str = doc_field("str")
    image_digest: str | None = doc_field("str?", default=None)


@dataclass(frozen=True, kw_only=True)
class HostCheck(ImageProvenance):
    """What the preflight found on a host that passed it: the image, the daemon's version, the
    free GiB on the Docker data root and, with a GPU check, the GPUs."""

    FILE: ClassVar[str] = "host check"

    daemon: str = doc_field("str")
    free_gb: float = doc_field("number")
    gpus: GpuCheck | None = doc_field("object?", default=None, part=GpuCheck)


@dataclass(frozen=True)
class ManagedContainer:
    """A traceladder container as the daemon lists it (docker-py's ``containers()`` row): its id,
    name (its first name, else its short id), state (``running``, ``exited``...) and labels."""

    id: str
    name: str
    state: str | None
    labels: dict[str, str]

    @classmethod
    def listed(cls, row: JSONObject) -> ManagedContainer:
        ident = str(row["Id"])
        names = row.get("Names")
        first = names[0] if isinstance(names, list) and names else None
        labels = row.get("Labels")
        state = row.get("State")
        return cls(
            id=ident,
            name=(str(first) if first else ident[:12]).lstrip("/"),
            state=state if isinstance(state, str) else None,
            labels={str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {},
        )


def _one_line(exc: BaseException) -> str:
    explanation = getattr(exc, "explanation", None)
    return " ".join(str(explanation or exc).split())


def container_paths(devices: Iterable[str]) -> list[str]:
    """Where each ``host[:container[:perms]]`` device appears inside the container."""
    out = []
    for spec in devices:
        parts = spec.split(":")
        out.append(parts[1] if len(parts) > 1 and parts[1] else parts[0])
    return out


def preflight(
    cli: Any,
    *,
    host: str,
    url: str,
    image: str,
    devices: list[str],
    min_free_gb: float,
    labels: dict[str, str],
    pull: bool = True,
    gpus_per_node: int | None = None,
    environment: dict[str, str] | None = None,
    group_add: list[str] | None = None,
) -> HostCheck:
    """Check the daemon, the image, the devices and the free disk and, with ``gpus_per_node``,
    that the GPUs are visible (amd-smi or rocm-smi), that there are that many, and that no
    process holds one; raise HostCheckError. Returns what it found."""
    try:
        cli.ping()
        version = str(cli.version().get("Version", "?"))
    except Exception as exc:  # noqa: BLE001 - any transport error is "unreachable"
        raise HostCheckError(host, f"Docker daemon at {url} unreachable", _one_line(exc)) from None
    try:
        image_info = cli.inspect_image(image)
    except Exception:  # noqa: BLE001 - any docker-py failure becomes the check's one line
        if not pull:
            raise HostCheckError(host, f"image {image} is not present") from None
        try:
            for _ in cli.pull(image, stream=True, decode=True):
                pass
            image_info = cli.inspect_image(image)
        except Exception as exc:  # noqa: BLE001 - any docker-py failure becomes the check's one line
            raise HostCheckError(
                host, f"image {image} is not present and could not be pulled", _one_line(exc)
            ) from None
    container = None
    try:
        container = cli.create_container(
            image=image,
            entrypoint=["python3", "-c", _CHECK_SCRIPT],
            command=["gpus" if gpus_per_node else "-", *container_paths(devices)],
            environment=dict(environment or {}),
            labels={**labels, "traceladder.purpose": "preflight"},
            host_config=cli.create_host_config(
                devices=list(devices),
                network_mode="none",
                auto_remove=False,
                group_add=list(group_add) if group_add else None,
            ),
        )
        cli.start(container["Id"])
        status = cli.wait(container["Id"], timeout=120)
        out = cli.logs(container["Id"], stdout=True, stderr=False).decode("utf-8", "replace").strip().splitlines()
        if status.get("StatusCode") != 0 or not out:
            err = cli.logs(container["Id"], stdout=False, stderr=True).decode("utf-8", "replace")
            raise HostCheckError(
                host, "the check container failed", err.strip().splitlines()[-1] if err.strip() else str(status)
            )
        found = CheckAnswer.from_json(out[-1])
    except HostCheckError:
        raise
    except Exception as exc:  # noqa: BLE001 - any docker-py failure becomes the check's one line
        text = _one_line(exc)
        if "device" in text.lower():
            raise HostCheckError(host, f"a device of {list(devices)} is missing", text) from None
        raise HostCheckError(host, "the check container could not run", text) from None
    finally:
        if container is not None:
            try:
                cli.remove_container(container["Id"], force=True)
            except Exception:  # noqa: BLE001, S110 - clean-up never hides the check's outcome
                pass
    if found.missing:
        raise HostCheckError(host, f"devices missing in the container: {found.missing}")
    if found.free_gb < min_free_gb:
        raise HostCheckError(host, f"only {found.free_gb} GiB free on the Docker data root, need {min_free_gb}")
    if gpus_per_node:
        check_gpus(host, found.gpus, gpus_per_node)
    image_of = image_provenance(image_info)
    return HostCheck(
        image=image_of.image,
        image_id=image_of.image_id,
        image_digest=image_of.image_digest,
        daemon=version,
        free_gb=found.free_gb,
        gpus=found.gpus,
    )


def image_provenance(info: JSONObject) -> ImageProvenance:
    """What the daemon says the image is (``docker inspect``'s ``Id`` and ``RepoDigests``)."""
    image_id = str(info["Id"])
    digests = info.get("RepoDigests")
    digest = digests[0] if isinstance(digests, list) and digests else None
    return ImageProvenance(image=image_id, image_id=image_id, image_digest=None if digest is None else str(digest))


def check_gpus(host: str, gpus: GpuCheck | None, expected: int) -> None:
    """The GPU part of the preflight: visible, as many as GPUS_PER_NODE, idle."""
    if gpus is None or gpus.tool is None or gpus.count is None:
        error = gpus.error if gpus is not None else None
        raise HostCheckError(host, "GPU preflight: no GPU is visible in the rung's container", error or "")
    if gpus.count != expected:
        raise HostCheckError(host, f"GPU preflight: {gpus.tool} sees {gpus.count} GPU(s), GPUS_PER_NODE is {expected}")
    if gpus.busy:
        held = ", ".join(f"{b.name} (pid {b.pid}) on GPU {b.gpu}" for b in gpus.busy[:4])
        raise HostCheckError(host, f"GPU preflight: GPUs are busy: {held}")


def managed_containers(cli: Any, host: str, extra_labels: dict[str, str] | None = None) -> list[ManagedContainer]:
    filters = [f"{MANAGED_LABEL}=true", f"{HOST_LABEL}={host}", *(f"{k}={v}" for k, v in (extra_labels or {}).items())]
    rows = cli.containers(all=True, filters={"label": filters})
    return [ManagedContainer.listed(row) for row in rows]


def remove_orphans(
    cli: Any, host: str, *, keep: Iterable[str] = (), running_too: dict[str, str] | None = None, log: Any = None
) -> list[str]:
    """Remove this host's traceladder containers that are not running (exited, created, dead),
    except ``keep`` ids. ``running_too`` (labels) also removes running ones that match them, e.g.
    a previous try of the same rung. Returns the removed names."""
    removed = []
    keep = set(keep)
    candidates = managed_containers(cli, host)
    running_match = {c.id for c in managed_containers(cli, host, running_too)} if running_too else set()
    for c in candidates:
        if c.id in keep:
            continue
        if c.state == "running" and c.id not in running_match:
            continue
        try:
            cli.remove_container(c.id, force=True)
            removed.append(c.name)
        except Exception as exc:  # noqa: BLE001 - any docker-py failure becomes the check's one line
            if log is not None:
                log.warning("host %s: could not remove orphaned container %s: %s", host, c.id[:12], _one_line(exc))
    if removed and log is not None:
        log.info("host %s: removed orphaned traceladder containers: %s", host, ", ".join(removed))
    return removed


def ti_labels(dag_id: str, run_id: str, task_id: str, map_index: int) -> dict[str, str]:
    return dict(zip(TI_LABELS, (dag_id, run_id, task_id, str(map_index))))


def stop_dead_tasks(
    cli: Any, host: str, ti_running: Callable[[str, str, str, int], bool], *, keep: Iterable[str] = (), log: Any = None
) -> list[str]:
    """Remove this host's *running* traceladder containers whose task instance Airflow no longer
    runs (a killed worker leaves its container running; the next rung would measure it). A
    container without the task-instance labels, or whose lookup fails, is left alone.
    ``ti_running(dag_id, run_id, task_id, map_index)``. Returns the removed names."""
    removed = []
    keep = set(keep)
    for c in managed_containers(cli, host):
        labels = c.labels
        if c.id in keep or c.state != "running" or not all(labels.get(k) for k in TI_LABELS):
            continue
        dag_id, run_id, task_id, map_index = (labels[k] for k in TI_LABELS)
        try:
            alive = ti_running(dag_id, run_id, task_id, int(map_index))
        except Exception as exc:  # noqa: BLE001 - unknown is not dead: never stop on a failed lookup
            if log is not None:
                log.warning("host %s: could not ask Airflow about %s: %s", host, c.id[:12], _one_line(exc))
            continue
        if alive:
            continue
        name = c.name
        try:
            cli.remove_container(c.id, force=True)
            removed.append(name)
        except Exception as exc:  # noqa: BLE001 - any docker-py failure becomes the check's one line
            if log is not None:
                log.warning("host %s: could not stop container %s: %s", host, name, _one_line(exc))
    if removed and log is not None:
        log.info("host %s: stopped containers whose task instance no longer runs: %s", host, ", ".join(removed))
    return removed


# ---- the spool (storage/spool.py): sealed folders that no retry uploaded ------------------------
def old_sealed_spools(root: Path, max_age: timedelta, now: float | None = None) -> list[tuple[str, float]]:
    """``(rung key prefix, age in days)`` of each sealed spool folder older than ``max_age``."""
    from traceladder.storage.spool import COMPLETE

    now = time.time() if now is None else now
    found = []
    for marker in sorted(Path(root).rglob(f"*{COMPLETE}")) if Path(root).is_dir() else []:
        age_s = now - marker.stat().st_mtime
        if age_s > max_age.total_seconds():
            rel = marker.relative_to(root).as_posix()[: -len(COMPLETE)]
            found.append((rel, age_s / 86400))
    return found


def housekeep_spool(
    root: Path, max_age: timedelta, upload: Callable[[str], int], *, host: str, log: Any = None
) -> list[str]:
    """The preflight's spool step: report each sealed spool older than ``max_age`` and upload it
    (``upload(rung_prefix)``, which removes it once stored); then drop empty folders. Returns
    one line per old spool (what was done), for the task log."""
    lines = []
    for rung_prefix, days in old_sealed_spools(root, max_age):
        line = f"host {host}: spool {Path(root) / rung_prefix} sealed {days:.1f} days ago, never uploaded"
        try:
            count = upload(rung_prefix)
            line += f"; uploaded {count} objects and removed it"
        except Exception as exc:  # noqa: BLE001 - an upload failure is reported, never fatal to the rung
            line += f"; upload failed, kept ({_one_line(exc)[:200]})"
        lines.append(line)
        if log is not None:
            log.warning("%s", line)
    prune_empty_dirs(root)
    return lines


def prune_empty_dirs(root: Path) -> None:
    """Remove empty folders under ``root`` (deepest first), never ``root`` itself."""
    if not Path(root).is_dir():
        return
    for folder, _dirs, _files in os.walk(root, topdown=False):  # deepest first: a parent empties after
        if Path(folder) != Path(root):
            try:
                os.rmdir(folder)  # only an empty folder goes
            except OSError:
                pass
