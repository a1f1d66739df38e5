"""The one base of traceladder's errors, and the artifact store's errors (the store and the key
layout both raise them). Standard library only.

A :class:`TraceladderError` is a user's error or an unreachable service: the CLI prints it as one
line on stderr and exits 2 (``cli/main.py``), the Airflow tasks fail with it, never a traceback.
Each module keeps its own subclass, so callers can still catch what they expect."""

from __future__ import annotations


class TraceladderError(Exception):
    """Base of every error traceladder raises for bad input or an unreachable service.

    ``str()`` is always one line (the message's lines joined by `` | ``, or the class name when
    empty): that line is what the user sees."""

    def __str__(self) -> str:
        lines = [line.strip() for line in super().__str__().splitlines() if line.strip()]
        return " | ".join(lines) if lines else type(self).__name__


def first_line(exc: BaseException, *, typed: bool = False) -> str:
    """Any exception as the one line a user sees: its message's first non-blank line (the class
    name when it has none), after ``Type: `` when ``typed`` (for a failure whose type tells
    what broke: a webhook's, a look's)."""
    text = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    if typed:
        return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text or type(exc).__name__


class ArtifactError(TraceladderError):
    """Base of the artifact store's errors. Messages are one line."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(" ".join(str(message).split()))
        self.key = key


class ArtifactKeyError(ArtifactError, ValueError):
    """A key that is malformed or outside the sink's ``<prefix>/<ladder>/``; nothing was written."""


class ArtifactIntegrityError(ArtifactError):
    """An object does not match its manifest (or has none)."""


class ArtifactStoreError(ArtifactError):
    """The store failed (endpoint down, bucket missing, access denied, disk error, ...)."""

    def __init__(self, message: str, key: str | None = None, code: str | None = None) -> None:
        super().__init__(message, key)
        self.code = code


class ArtifactNotFoundError(ArtifactStoreError):
    """The object does not exist."""
