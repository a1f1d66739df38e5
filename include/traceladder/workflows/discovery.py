"""What the DAG files need at parse time: the ladder files, their schedules and their hosts.

Only YAML and pydantic are imported here, so parsing stays fast. A ladder file that does not
validate is reported in the log and left out; it never breaks the other ladders' DAGs.

Each DAG file calls `discover()`; in one process (a DagBag over dags/, `airflow dags report`) the
files are read once, and again only when one of them changes (its size or mtime)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from traceladder.config import LadderConfigError, LoadedLadder, ladder_files, load_clusters, load_ladder
from traceladder.config.loader import clusters_file
from traceladder.config.models import Host

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Discovered:
    ladders: list[LoadedLadder]
    all_hosts: list[Host]


FileStamps = tuple[tuple[str, int, int], ...]
_last: tuple[FileStamps, Discovered] | None = None


def _stamps(paths: list[Path]) -> FileStamps:
    stamps = []
    for path in paths:
        try:
            stat = path.stat()
        except OSError:
            stamps.append((str(path), -1, -1))  # missing: load_* reports it
        else:
            stamps.append((str(path), stat.st_mtime_ns, stat.st_size))
    return tuple(stamps)


def discover() -> Discovered:
    """The ladders and hosts, read once per process while the files stay as they are."""
    global _last
    stamps = _stamps([clusters_file(), *ladder_files()])
    if _last is not None and _last[0] == stamps:
        return _last[1]
    found = _discover()
    _last = (stamps, found)
    return found


def _discover() -> Discovered:
    clusters = load_clusters()
    ladders = []
    for path in ladder_files():
        try:
            ladders.append(load_ladder(path, clusters))
        except LadderConfigError as exc:
            log.error("traceladder: skipping ladder: %s", exc.one_line())
    hosts: dict[str, Host] = {}
    for cluster in clusters.clusters.values():
        for host in cluster.hosts:
            hosts.setdefault(host.name, host)
    return Discovered(ladders, list(hosts.values()))
