"""The one analysis module that imports ``traceladder.storage``: the file names of the
documents analysis writes (``analysis.json``, ``collectives.json``, ``compare.json``),
the key arithmetic of where its reports go, and the store type.

Every other analysis module takes these from here, so the reports, readers and model
stay free of storage (``.importlinter``) and a move of the storage layout is one edit.
"""

from __future__ import annotations

from traceladder.core import layout
from traceladder.storage.artifacts import ArtifactSink

__all__ = [
    "ANALYSIS_OBJECT",
    "COLLECTIVES_OBJECT",
    "COMPARE_OBJECT",
    "TRACES_FOLDER",
    "ArtifactSink",
    "analysis_prefix",
    "ranks_prefix",
    "tracelens_prefix",
]

ANALYSIS_OBJECT = layout.ANALYSIS_OBJECT
COLLECTIVES_OBJECT = layout.COLLECTIVES_OBJECT
COMPARE_OBJECT = layout.COMPARE_OBJECT
TRACES_FOLDER = layout.TRACES_FOLDER
analysis_prefix = layout.analysis_prefix
tracelens_prefix = layout.tracelens_prefix
ranks_prefix = layout.ranks_prefix
