"""Ladder and cluster configuration: models, YAML loading and validation."""

from traceladder.config.loader import LoadedLadder, find_ladder, ladder_files, load_clusters, load_ladder
from traceladder.config.validate import LadderConfigError

__all__ = ["LadderConfigError", "LoadedLadder", "find_ladder", "ladder_files", "load_clusters", "load_ladder"]
