"""A rung's artifacts survive an S3 outage: written to a spool folder on the host first, then
uploaded with bounded retries.

``SpoolingSink(target, spool_root)`` is an ``ArtifactSink`` that writes every object to
``<spool_root>/<key>`` (same key rules, sizes and sha256 as the target would record) and names
objects as the target does (``locate``). ``flush(rung_prefix)`` then uploads that rung's folder to
the target, ``manifest.json`` last, retrying each object with exponential backoff until a total
budget is spent. On success the rung's spool folder is removed, with the folders it leaves empty.
Past the budget it raises ``ArtifactStoreError`` and leaves everything in the spool, with a
``.complete`` marker beside the folder: the task's retry (``pending`` -> ``flush``) uploads it
without running the rung again.

The spool is on the host (``TRACELADDER_SPOOL_DIR``, default ``~/.cache/traceladder/spool``),
never in the rung's temporary workspace (deleted when the rung ends) nor in a container.
Standard library only: the runner image imports this.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from traceladder.core.documents import RungResult
from traceladder.core import env_vars, layout
from traceladder.storage.artifacts import (
    MANIFEST_NAME,
    ArtifactKeyError,
    ArtifactNotFoundError,
    ArtifactSink,
    ArtifactStoreError,
    DirArtifactSink,
    _HashingReader,
)

ENV_SPOOL = env_vars.SPOOL_DIR.name
ENV_BUDGET = env_vars.S3_RETRY_BUDGET_S.name
DEFAULT_BUDGET_S = float(str(env_vars.S3_RETRY_BUDGET_S.default))
FIRST_DELAY_S, MAX_DELAY_S = 0.5, 10.0
COMPLETE = ".complete"


def spool_root(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    spool = env_vars.SPOOL_DIR.get(env)
    if spool:
        return Path(spool)
    cache = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "traceladder" / "spool"


def retry_budget_s(env: Mapping[str, str] | None = None) -> float:
    try:
        return max(0.0, float(env_vars.S3_RETRY_BUDGET_S.get(env) or DEFAULT_BUDGET_S))
    except ValueError:
        return DEFAULT_BUDGET_S


def with_backoff(op: Callable[[], Any], deadline: float, what: str, log: Callable[[str], None]) -> Any:
    """Run ``op`` until it succeeds or ``deadline`` (monotonic) passes; delays 0.5, 1, 2 ... 10 s.
    Only store errors are retried: a bad key or a missing object is not an outage."""
    delay = FIRST_DELAY_S
    attempt = 1
    while True:
        try:
            return op()
        except (ArtifactKeyError, ArtifactNotFoundError):
            raise
        except ArtifactStoreError as exc:
            left = deadline - time.monotonic()
            if left <= 0:
                raise
            wait = min(delay, left)
            log(f"[traceladder] {what}: attempt {attempt} failed ({exc}); retrying in {wait:.1f} s")
            time.sleep(wait)
            delay = min(delay * 2, MAX_DELAY_S)
            attempt += 1


class SpoolingSink(ArtifactSink):
    """Writes go to the host's spool; ``flush`` moves a rung's folder to ``target``."""

    def __init__(
        self,
        target: ArtifactSink,
        root: Path | None = None,
        budget_s: float | None = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__(target.prefix, target.ladder)
        self.target = target
        self.root = Path(root or spool_root())
        self._dir = DirArtifactSink(self.root)
        self.budget_s = retry_budget_s() if budget_s is None else budget_s
        self._log = log or (lambda line: print(line, file=sys.stderr, flush=True))

    # names, reads and listings are the target's: results must hold S3 keys, not spool paths
    def describe(self, key: str | None = None) -> str:
        return self.target.describe(key)

    def locate(self, key: str) -> str:
        return self.target.locate(key)

    def _store_bytes(self, key: str, data: bytes, content_type: str) -> None:
        self._dir._store_bytes(key, data, content_type)

    def _store_stream(self, key: str, reader: _HashingReader, content_type: str) -> None:
        self._dir._store_stream(key, reader, content_type)

    def _load_bytes(self, key: str) -> bytes:
        return self.target._load_bytes(key)

    def _load_buffer(self, key: str) -> bytearray:
        return self.target._load_buffer(key)

    def _exists(self, key: str) -> bool:
        return self.target._exists(key)

    def _list(self, prefix: str) -> list[str]:
        return self.target._list(prefix)

    # -- the spool
    def folder(self, rung_prefix: str) -> Path:
        return self._dir._path(self.check_write_key(rung_prefix))

    def _marker(self, rung_prefix: str) -> Path:
        folder = self.folder(rung_prefix)
        return folder.with_name(folder.name + COMPLETE)

    def seal(self, rung_prefix: str) -> None:
        """Everything of the rung is in the spool (manifest written): a retry may upload it."""
        self._marker(rung_prefix).write_text("")

    def pending(self, rung_prefix: str) -> RungResult | None:
        """The spooled result (metrics.json) of a sealed rung that still waits for S3, if any."""
        if not self._marker(rung_prefix).exists():
            return None
        metrics = self.folder(rung_prefix) / layout.METRICS_OBJECT
        try:
            return RungResult.from_json(metrics.read_text(), str(metrics))
        except (OSError, ValueError):  # DocumentError is a ValueError
            return None

    def discard(self, rung_prefix: str) -> None:
        """Drop a spool that is not sealed (a run cut short): the rung runs again from scratch."""
        if not self._marker(rung_prefix).exists():
            shutil.rmtree(self.folder(rung_prefix), ignore_errors=True)

    def flush(self, rung_prefix: str) -> int:
        """Upload the rung's spooled objects (manifest last) within the retry budget; returns how
        many. Past the budget: ``ArtifactStoreError`` naming the spool folder, which is kept."""
        folder = self.folder(rung_prefix)
        files = sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.endswith(".part"))
        files.sort(key=lambda p: p.name == MANIFEST_NAME)  # the manifest last: it says "complete"
        deadline = time.monotonic() + self.budget_s
        for path in files:
            key = f"{rung_prefix}/{path.relative_to(folder).as_posix()}"
            try:
                with_backoff(functools.partial(self.target.put_file, key, path), deadline, f"upload {key}", self._log)
            except ArtifactStoreError as exc:
                raise ArtifactStoreError(
                    f"S3 still failing after {self.budget_s:.0f} s of retries ({exc}); "
                    f"{len(files)} artifacts wait in {folder} and the task's retry uploads them",
                    key,
                    exc.code,
                ) from None
        shutil.rmtree(folder, ignore_errors=True)
        self._marker(rung_prefix).unlink(missing_ok=True)
        self._prune_parents(folder)
        return len(files)

    def _prune_parents(self, folder: Path) -> None:
        """Drop the folders a flush left empty (run, ladder, prefix), up to the spool root."""
        root = self.root.resolve()
        parent = folder.resolve().parent
        while parent != root and root in parent.parents:
            try:
                parent.rmdir()  # only an empty folder goes (another rung's spool keeps it)
            except OSError:
                return
            parent = parent.parent
