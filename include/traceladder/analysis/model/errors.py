"""The analysis's one error for bad input, :class:`TraceError`. Standard library (and
``traceladder.core``) only, so a caller can catch it without importing numpy or msgspec
(``analysis/api.py`` offers it eagerly); ``model/events.py`` re-exports it for the readers."""

from __future__ import annotations

from pathlib import Path

from traceladder.core.errors import TraceladderError

__all__ = ["TraceError"]


class TraceError(TraceladderError):
    """A trace that cannot be analysed: missing, unreadable, malformed or empty.

    Every reader raises only this for bad input; the CLI prints ``str(err)`` as one line.
    """

    def __init__(self, path: Path | str, reason: str):
        self.path = Path(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")
