"""Host hygiene around a rung container: a pre-flight check of the worker host and the removal of
orphaned traceladder containers. Works on a docker-py ``APIClient`` (the operator's ``self.cli``).

Every traceladder container carries ``traceladder.managed=true`` and ``traceladder.host=<host>``
labels (plus ladder, rung and run labels), so cleanup never touches anything else on the host.
Failures are one line that names the host: ``host mi350x-01: <what> (<detail>)``.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

MANAGED_LABEL = "traceladder.managed"
HOST_LABEL = "traceladder.host"
RUN_LABEL = "traceladder.run"
RUNG_LABEL = "traceladder.rung"
LADDER_LABEL = "traceladder.ladder"

# Run in a throw-away container of the rung's image with the rung's devices: the daemon refuses
# to create it when a device is missing on the host, and the script reports the free space of
# the filesystem the container writes to (the Docker data root).
_CHECK_SCRIPT = (
    "import json, os, shutil, sys; "
    "paths = sys.argv[1:]; "
    "missing = [p for p in paths if not os.path.exists(p)]; "
    "u = shutil.disk_usage('/'); "
    "print(json.dumps({'missing': missing, 'free_gb': round(u.free / 2**30, 2)}))"
)


class HostCheckError(RuntimeError):
    """The worker host cannot run a rung; the message is one line naming the host."""

    def __init__(self, host: str, what: str, detail: str = "") -> None:
        detail = " ".join(str(detail).split())[:300]
        super().__init__(f"host {host}: {what}" + (f" ({detail})" if detail else ""))


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


def preflight(cli: Any, *, host: str, url: str, image: str, devices: list[str], min_free_gb: float, labels: dict[str, str], pull: bool = True) -> dict[str, Any]:
    """Check the daemon, the image, the devices and the free disk; raise HostCheckError.

    Returns what it found (``{"daemon": version, "image": id, "free_gb": ...}``)."""
    try:
        cli.ping()
        version = cli.version().get("Version", "?")
    except Exception as exc:  # noqa: BLE001 - any transport error is "unreachable"
        raise HostCheckError(host, f"Docker daemon at {url} unreachable", _one_line(exc)) from None
    try:
        image_id = cli.inspect_image(image)["Id"]
    except Exception:  # noqa: BLE001
        if not pull:
            raise HostCheckError(host, f"image {image} is not present") from None
        try:
            for _ in cli.pull(image, stream=True, decode=True):
                pass
            image_id = cli.inspect_image(image)["Id"]
        except Exception as exc:  # noqa: BLE001
            raise HostCheckError(host, f"image {image} is not present and could not be pulled", _one_line(exc)) from None
    container = None
    try:
        container = cli.create_container(
            image=image,
            entrypoint=["python3", "-c", _CHECK_SCRIPT],
            command=container_paths(devices),
            labels={**labels, "traceladder.purpose": "preflight"},
            host_config=cli.create_host_config(devices=list(devices), network_mode="none", auto_remove=False),
        )
        cli.start(container["Id"])
        status = cli.wait(container["Id"], timeout=120)
        out = cli.logs(container["Id"], stdout=True, stderr=False).decode("utf-8", "replace").strip().splitlines()
        if status.get("StatusCode") != 0 or not out:
            err = cli.logs(container["Id"], stdout=False, stderr=True).decode("utf-8", "replace")
            raise HostCheckError(host, "the check container failed", err.strip().splitlines()[-1] if err.strip() else str(status))
        found = json.loads(out[-1])
    except HostCheckError:
        raise
    except Exception as exc:  # noqa: BLE001
        text = _one_line(exc)
        if "device" in text.lower():
            raise HostCheckError(host, f"a device of {list(devices)} is missing", text) from None
        raise HostCheckError(host, "the check container could not run", text) from None
    finally:
        if container is not None:
            try:
                cli.remove_container(container["Id"], force=True)
            except Exception:  # noqa: BLE001
                pass
    if found["missing"]:
        raise HostCheckError(host, f"devices missing in the container: {found['missing']}")
    if found["free_gb"] < min_free_gb:
        raise HostCheckError(host, f"only {found['free_gb']} GiB free on the Docker data root, need {min_free_gb}")
    return {"daemon": version, "image": image_id, "free_gb": found["free_gb"]}


def managed_containers(cli: Any, host: str, extra_labels: dict[str, str] | None = None) -> list[dict[str, Any]]:
    filters = [f"{MANAGED_LABEL}=true", f"{HOST_LABEL}={host}", *(f"{k}={v}" for k, v in (extra_labels or {}).items())]
    return cli.containers(all=True, filters={"label": filters})


def remove_orphans(cli: Any, host: str, *, keep: Iterable[str] = (), running_too: dict[str, str] | None = None, log: Any = None) -> list[str]:
    """Remove this host's traceladder containers that are not running (exited, created, dead),
    except ``keep`` ids. ``running_too`` (labels) also removes running ones that match them, e.g.
    a previous try of the same rung. Returns the removed names."""
    removed = []
    keep = set(keep)
    candidates = managed_containers(cli, host)
    running_match = {c["Id"] for c in managed_containers(cli, host, running_too)} if running_too else set()
    for c in candidates:
        if c["Id"] in keep:
            continue
        if c.get("State") == "running" and c["Id"] not in running_match:
            continue
        try:
            cli.remove_container(c["Id"], force=True)
            removed.append((c.get("Names") or [c["Id"][:12]])[0].lstrip("/"))
        except Exception as exc:  # noqa: BLE001
            if log is not None:
                log.warning("host %s: could not remove orphaned container %s: %s", host, c["Id"][:12], _one_line(exc))
    if removed and log is not None:
        log.info("host %s: removed orphaned traceladder containers: %s", host, ", ".join(removed))
    return removed
