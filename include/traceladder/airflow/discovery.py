"""What the DAG files need at parse time: the ladder files, their schedules and their hosts.

Only YAML and pydantic are imported here, so parsing stays fast. A ladder file that does not
validate is reported in the log and left out; it never breaks the other ladders' DAGs."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from traceladder.config import LadderConfigError, LoadedLadder, ladder_files, load_clusters, load_ladder
from traceladder.config.models import Host

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Discovered:
    ladders: list[LoadedLadder]
    all_hosts: list[Host]


def discover() -> Discovered:
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
