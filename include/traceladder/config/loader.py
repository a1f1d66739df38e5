"""Load ladder and clusters files from YAML, turning every failure into one `LadderConfigError`
that names the file and the field (or the line and column of a YAML error)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from traceladder.config.models import Cluster, Clusters, Ladder
from traceladder.core import env_vars
from traceladder.core.errors import first_line
from traceladder.config.validate import Assignment, LadderConfigError, check_workload_keys, validate_ladder

REPO_ROOT = Path(__file__).resolve().parents[3]  # the checkout (dev tools' state folder)
# The shipped ladders and clusters file live in `include/configs/`; `traceladder/configs` is a
# relative symlink to it, so they ship as package data and an installed package finds them wherever
# it is. Resolved, so a checkout names `include/configs/...`. TRACELADDER_LADDERS_DIR /
# TRACELADDER_CLUSTERS_FILE win.
CONFIG_DIR = (Path(__file__).resolve().parents[1] / "configs").resolve()

M = TypeVar("M", bound=BaseModel)


def ladders_dir() -> Path:
    return Path(env_vars.LADDERS_DIR.get() or CONFIG_DIR / "ladders")


def clusters_file() -> Path:
    return Path(env_vars.CLUSTERS_FILE.get() or CONFIG_DIR / "clusters.yaml")


@dataclass(frozen=True)
class LoadedLadder:
    """A validated ladder with what the plan needs from its file."""

    path: Path
    ladder: Ladder
    assignments: dict[str, Assignment]
    config_hash: str
    cluster: Cluster
    warnings: tuple[str, ...] = ()  # what `traceladder validate` prints beside "ok" (config/validate.py)


def _field_path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, str) and part.startswith("<"):  # a union's branch tag (models.Repeats), not a key
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


class Replace(dict):
    """A mapping tagged `!replace` in a ladder that `extends` another: it replaces the parent's
    mapping instead of merging into it (e.g. a switch's whole `values`)."""


# libyaml's parser when PyYAML was built with it (the wheels are): ~10x faster than pure Python
# at DAG parse time, with the same safe constructors and the same error marks
_SafeBase: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _LadderLoader(_SafeBase):
    pass


def _replace(loader: yaml.SafeLoader, node: yaml.Node) -> Replace:
    if not isinstance(node, yaml.MappingNode):
        raise yaml.constructor.ConstructorError(None, None, "!replace takes a mapping", node.start_mark)
    return Replace(loader.construct_mapping(node, deep=True))


_LadderLoader.add_constructor("!replace", _replace)


def _read_yaml(path: Path) -> tuple[Any, bytes]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise LadderConfigError("(file)", "no such file", str(path)) from None
    except OSError as exc:
        raise LadderConfigError("(file)", exc.strerror or str(exc), str(path)) from None
    try:
        return yaml.load(raw, Loader=_LadderLoader), raw  # noqa: S506 - a SafeLoader plus one tag
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}:{mark.column + 1}" if mark else "yaml"
        problem = getattr(exc, "problem", None) or first_line(exc)
        raise LadderConfigError(where, f"YAML syntax error: {problem}", str(path)) from None


def _parse(model: type[M], data: Any, path: Path) -> M:
    if not isinstance(data, dict):
        raise LadderConfigError("(top level)", "expected a mapping", str(path))
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        reason = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
        raise LadderConfigError(_field_path(tuple(err["loc"])), reason, str(path)) from None


def _deep_merge(parent: Any, child: Any) -> Any:
    """Mappings merge key by key (unless tagged `!replace`); anything else in the child replaces
    the parent's."""
    if isinstance(child, Replace):
        return dict(child)
    if isinstance(parent, dict) and isinstance(child, dict):
        return {**parent, **{k: _deep_merge(parent.get(k), v) if k in parent else v for k, v in child.items()}}
    return child


def _read_ladder_yaml(path: Path, depth: int = 0) -> tuple[Any, bytes]:
    """A ladder file, with `extends: OTHER.yaml` deep-merged under it (path relative to the file)."""
    data, raw = _read_yaml(path)
    if not isinstance(data, dict) or "extends" not in data:
        return data, raw
    if depth >= 4:
        raise LadderConfigError("extends", "chain deeper than 4 files (a cycle?)", str(path))
    base_name = data.pop("extends")
    if not isinstance(base_name, str):
        raise LadderConfigError("extends", "expected a file name", str(path))
    base_path = path.parent / base_name
    if not base_path.exists():
        raise LadderConfigError("extends", f"no such file {base_path}", str(path))
    base, base_raw = _read_ladder_yaml(base_path, depth + 1)
    if not isinstance(base, dict):
        raise LadderConfigError("(top level)", "expected a mapping", str(base_path))
    return _deep_merge(base, data), base_raw + b"\0" + raw


def load_clusters(path: Path | None = None) -> Clusters:
    path = path or clusters_file()
    data, _ = _read_yaml(path)
    return _parse(Clusters, data, path)


def load_ladder(path: Path | str, clusters: Clusters | None = None) -> LoadedLadder:
    """Parse and validate a ladder file; errors carry the file name."""
    path = Path(path)
    data, raw = _read_ladder_yaml(path)
    ladder = _parse(Ladder, data, path)
    try:
        assignments = validate_ladder(ladder)
    except LadderConfigError as exc:
        raise LadderConfigError(exc.field, exc.reason, str(path)) from None
    clusters = clusters or load_clusters()
    cluster = clusters.clusters.get(ladder.cluster)
    if cluster is None:
        raise LadderConfigError(
            "cluster",
            f"unknown cluster {ladder.cluster!r}; {clusters_file()} has {sorted(clusters.clusters)}",
            str(path),
        )
    if cluster.backend != ladder.backend:
        raise LadderConfigError(
            "backend", f"{ladder.backend!r} but cluster {ladder.cluster!r} is {cluster.backend!r}", str(path)
        )
    if ladder.nnodes > 1 and ladder.backend != "slurm":
        raise LadderConfigError(
            "nnodes",
            f"{ladder.nnodes} nodes need backend: slurm (the {ladder.backend} backend runs one node per rung)",
            str(path),
        )
    if ladder.backend == "slurm" and (cluster.slurm is None or not all(h.ssh_conn_id for h in cluster.hosts)):
        raise LadderConfigError(
            "cluster",
            f"backend slurm needs clusters.{ladder.cluster}.slurm and an ssh_conn_id on every host "
            f"in {clusters_file()}",
            str(path),
        )
    if ladder.engine == "tracelens" and cluster.tracelens is None:
        raise LadderConfigError(
            "engine",
            f"'tracelens' needs clusters.{ladder.cluster}.tracelens.docker_url in {clusters_file()} "
            "(the Docker daemon that runs the TraceLens image)",
            str(path),
        )
    # what the runner starts: Primus on docker, and on Slurm unless the cluster runs the CPU proxy
    runs_primus = ladder.backend == "docker" or (
        ladder.backend == "slurm" and cluster.slurm is not None and cluster.slurm.workload != "proxy"
    )
    try:
        warnings = check_workload_keys(ladder, assignments, runs_primus)
    except LadderConfigError as exc:
        raise LadderConfigError(exc.field, exc.reason, str(path)) from None
    digest = hashlib.sha256(raw).hexdigest()
    return LoadedLadder(path, ladder, assignments, digest, cluster, tuple(f"{path}: {w}" for w in warnings))


def ladder_files() -> list[Path]:
    return sorted(p for p in ladders_dir().glob("*.yaml"))


def find_ladder(name: str) -> Path:
    """A ladder by its `ladder:` name or file stem."""
    direct = ladders_dir() / f"{name}.yaml"
    if direct.exists():
        return direct
    for path in ladder_files():
        try:
            data, _ = _read_yaml(path)
        except LadderConfigError:
            continue
        if isinstance(data, dict) and data.get("ladder") == name:
            return path
    raise LadderConfigError("ladder", f"no ladder named {name!r} in {ladders_dir()}")
