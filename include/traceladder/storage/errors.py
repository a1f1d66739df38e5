"""The artifact store's errors (their own module: the store and the key layout both raise them)."""

from __future__ import annotations


class ArtifactError(Exception):
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
