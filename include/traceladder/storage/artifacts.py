"""The artifact store: where a rung's log, traces, metrics and manifest go.

Keys are ``<prefix>/<ladder>/<run_id>/<rung_id>/<name>``, e.g.
``traceladder/proxy-local/manual__2026-11-29T10-00-00/fusions.none.r0/log.txt.gz``.

Two sinks share the key rules and the manifest logic:

* ``S3ArtifactStore(client, bucket, prefix, ladder)``: a boto3 S3 client (in Airflow from
  ``S3Hook(aws_conn_id=...).get_conn()``, elsewhere from ``s3_client_from_env()``).
* ``DirArtifactSink(root)``: the same relative layout in a local folder (``--out DIR``).

Every write goes through ``check_write_key``: the key must lie under ``<prefix>/<ladder>/`` and
every ``/``-separated part must match ``[A-Za-z0-9._-]+`` and not be ``.`` or ``..`` (so ``..``,
absolute paths, backslashes and percent-encoded variants such as ``%2e%2e`` are all refused,
before anything is written). Use ``safe_key_part`` for names that come from outside.

The sink remembers the size and sha256 of every object it writes (computed while writing;
nothing is downloaded again). ``write_manifest(rung_prefix)`` stores ``manifest.json`` =
``{"schema": 1, "objects": [{"key", "size", "sha256"}, ...]}`` (sorted by key, no timestamps, so
an identical re-run yields an identical manifest) and ``get_verified(key)`` checks an object
against the manifest of its rung folder.

S3 failures become ``ArtifactStoreError`` with a one-line message naming the endpoint, bucket and
key; nothing already stored is ever deleted.
"""

from __future__ import annotations

import abc
import contextlib
import hashlib
import io
import json
import os
import re
import tempfile
import threading
import zlib
from pathlib import Path
from typing import IO, Any, Iterator, Mapping, TypeVar

# The errors and the key shapes have their own modules; these names stay importable from here.
from traceladder.core.documents import DocumentError, Manifest, ManifestEntry
from traceladder.core import env_vars
from traceladder.core.errors import ArtifactError as ArtifactError
from traceladder.core.errors import ArtifactIntegrityError as ArtifactIntegrityError
from traceladder.core.errors import ArtifactKeyError as ArtifactKeyError
from traceladder.core.errors import ArtifactNotFoundError as ArtifactNotFoundError
from traceladder.core.errors import ArtifactStoreError as ArtifactStoreError
from traceladder.core.layout import DEFAULT_PREFIX as DEFAULT_PREFIX
from traceladder.core.layout import MANIFEST_NAME as MANIFEST_NAME
from traceladder.core.layout import _safe_prefix_parts
from traceladder.core.layout import ladder_prefix as ladder_prefix
from traceladder.core.layout import run_prefix as run_prefix
from traceladder.core.layout import rung_prefix as rung_prefix
from traceladder.core.layout import safe_key_part as safe_key_part

MANIFEST_SCHEMA = 1
_CHUNK = 1 << 20
_Bytes = TypeVar("_Bytes", bytes, bytearray)

_PART_RE = re.compile(r"^[A-Za-z0-9._-]+$")

_CONTENT_TYPES = {
    ".gz": "application/gzip",
    ".json": "application/json",
    ".txt": "text/plain; charset=utf-8",
    ".log": "text/plain; charset=utf-8",
    ".csv": "text/csv; charset=utf-8",
    ".md": "text/markdown; charset=utf-8",
    ".html": "text/html; charset=utf-8",
    ".png": "image/png",
    ".svg": "image/svg+xml",
    ".db": "application/vnd.sqlite3",
    ".rpd": "application/vnd.sqlite3",
}


# ---- keys --------------------------------------------------------------------------------------
def check_key(key: object) -> str:
    """Raise ``ArtifactKeyError`` unless ``key`` is a clean relative key; return it."""
    if not isinstance(key, str) or not key:
        raise ArtifactKeyError(f"invalid artifact key {key!r}: empty or not a string", None)
    if key.startswith("/"):
        raise ArtifactKeyError(f"invalid artifact key {key!r}: absolute path", key)
    if len(key.encode("utf-8")) > 1024:
        raise ArtifactKeyError(f"invalid artifact key {key[:80]!r}...: longer than 1024 bytes", key)
    for part in key.split("/"):
        if part in ("", ".", ".."):
            raise ArtifactKeyError(f"invalid artifact key {key!r}: empty, '.' or '..' path segment", key)
        if not _PART_RE.match(part):
            raise ArtifactKeyError(
                f"invalid artifact key {key!r}: segment {part!r} has characters outside "
                "[A-Za-z0-9._-] (use safe_key_part)",
                key,
            )
    return key


def _check_prefix_arg(prefix: str) -> str:
    """A listing or manifest prefix: a clean key, trailing slash dropped."""
    stripped = prefix.rstrip("/")
    check_key(stripped)
    return stripped


def _content_type_for(key: str) -> str:
    return _CONTENT_TYPES.get(os.path.splitext(key)[1].lower(), "application/octet-stream")


# ---- streaming helpers -------------------------------------------------------------------------
class _HashingReader(io.RawIOBase):
    """A forward-only reader over ``source`` (optionally gzip-compressing it) that counts and
    hashes exactly the bytes it hands out, i.e. the bytes that get stored."""

    def __init__(self, source: IO[bytes], gzip: bool = False, level: int = 6) -> None:
        self._src = source
        # wbits=31: gzip container with mtime 0 and no file name -> deterministic output
        self._z = zlib.compressobj(level, zlib.DEFLATED, 31) if gzip else None
        self._buf = bytearray()
        self._eof = False
        self.sha256 = hashlib.sha256()
        self.size = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def _fill(self, want: int) -> None:
        while len(self._buf) < want and not self._eof:
            chunk = self._src.read(_CHUNK)
            if not chunk:
                self._eof = True
                if self._z is not None:
                    self._buf += self._z.flush()
                break
            self._buf += self._z.compress(chunk) if self._z is not None else chunk

    def read(self, size: int = -1) -> bytes:
        if size < 0:
            self._fill(1 << 62)
            size = len(self._buf)
        else:
            self._fill(size)
        out = bytes(self._buf[:size])
        del self._buf[:size]
        self.sha256.update(out)
        self.size += len(out)
        return out

    def readinto(self, b: Any) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)


# ---- the sinks ---------------------------------------------------------------------------------
class ArtifactSink(abc.ABC):
    """Key rules, write tracking and manifests; subclasses store bytes."""

    def __init__(self, prefix: str | None, ladder: str | None) -> None:
        if (prefix is None) != (ladder is None):
            raise ArtifactKeyError("give both prefix and ladder, or neither")
        self.prefix = "/".join(_safe_prefix_parts(prefix)) if prefix is not None else None
        self.ladder = safe_key_part(ladder) if ladder is not None else None
        # The namespace every write must stay under ("" = any clean key).
        self.namespace = f"{ladder_prefix(self.prefix, self.ladder)}/" if self.prefix and self.ladder else ""
        self._written: dict[str, tuple[int, str]] = {}
        self._written_lock = threading.Lock()

    # -- key helpers
    def rung_prefix(self, run_id: str, rung_id: str) -> str:
        if not self.namespace:
            raise ArtifactKeyError("this sink has no prefix/ladder; use rung_prefix(...) directly")
        return f"{self.namespace}{safe_key_part(run_id)}/{safe_key_part(rung_id)}"

    def check_write_key(self, key: object) -> str:
        """The checks every write goes through (before anything is written)."""
        k = check_key(key)
        if self.namespace and not k.startswith(self.namespace):
            raise ArtifactKeyError(f"artifact key {k!r} is outside this ladder's prefix {self.namespace!r}", k)
        return k

    # -- storage primitives (subclasses)
    @abc.abstractmethod
    def _store_bytes(self, key: str, data: bytes, content_type: str) -> None: ...

    @abc.abstractmethod
    def _store_stream(self, key: str, reader: _HashingReader, content_type: str) -> None: ...

    @abc.abstractmethod
    def _load_bytes(self, key: str) -> bytes: ...

    @abc.abstractmethod
    def _exists(self, key: str) -> bool: ...

    @abc.abstractmethod
    def _list(self, prefix: str) -> list[str]: ...

    @abc.abstractmethod
    def describe(self, key: str | None = None) -> str:
        """Where ``key`` lives, for messages (``s3://bucket/key at endpoint`` or a path)."""

    def locate(self, key: str) -> str:
        """How a result names a stored object: the S3 key, or a file's absolute path."""
        return key

    # -- public API
    def put_bytes(self, key: str, data: bytes, content_type: str | None = None) -> str:
        k = self.check_write_key(key)
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"put_bytes({k!r}) needs bytes, got {type(data).__name__}")
        data = bytes(data)
        self._store_bytes(k, data, content_type or _content_type_for(k))
        self._record(k, len(data), hashlib.sha256(data).hexdigest())
        return k

    def put_text(self, key: str, text: str, content_type: str | None = None) -> str:
        return self.put_bytes(key, text.encode("utf-8"), content_type)

    def put_json(self, key: str, obj: Any) -> str:
        text = json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        return self.put_bytes(key, text.encode("utf-8"), "application/json")

    def put_file(self, key: str, path: str | os.PathLike[str], gzip: bool = False) -> str:
        """Store a local file, streaming; ``gzip=True`` compresses on the fly (deterministic
        gzip: same input, same bytes). The manifest records the stored (compressed) bytes."""
        k = self.check_write_key(key)
        content_type = "application/gzip" if gzip else _content_type_for(k)
        try:
            src = open(path, "rb")
        except OSError as exc:
            raise ArtifactStoreError(f"cannot read {path} for {k}: {exc.strerror or exc}", k) from None
        with src:
            reader = _HashingReader(src, gzip=gzip)
            self._store_stream(k, reader, content_type)
        self._record(k, reader.size, reader.sha256.hexdigest())
        return k

    def get_bytes(self, key: str) -> bytes:
        return self._load_bytes(check_key(key))

    def get_json(self, key: str) -> Any:
        data = self.get_bytes(key)
        try:
            return json.loads(data)
        except ValueError as exc:
            raise ArtifactIntegrityError(f"{self.describe(key)} is not valid JSON: {exc}", key) from None

    def exists(self, key: str) -> bool:
        return self._exists(check_key(key))

    def list_first(self, prefix: str, limit: int) -> tuple[list[str], bool]:
        """The first ``limit`` keys under ``prefix`` (sorted), and whether the listing stopped at
        ``limit`` (the UI shows a folder that far)."""
        keys = self.list(prefix)
        return keys[:limit], len(keys) >= limit

    def list(self, prefix: str = "") -> list[str]:
        """Every key under ``prefix`` (a folder-like prefix; sorted)."""
        if prefix == "":
            return sorted(self._list(""))
        p = _check_prefix_arg(prefix)
        return sorted(k for k in self._list(p + "/") if k.startswith(p + "/"))

    def list_versions(self, prefix: str) -> dict[str, str | None]:
        """``{key: version}`` of every key under ``prefix`` (sorted), from the listing alone: a
        version changes when the object is rewritten with other content. None: this sink cannot
        tell (a reader that caches reads the object again)."""
        return dict.fromkeys(self.list(prefix))

    # -- tracking and manifests
    def _record(self, key: str, size: int, sha256: str) -> None:
        with self._written_lock:
            self._written[key] = (size, sha256)

    def written(self) -> dict[str, tuple[int, str]]:
        """``{key: (size, sha256)}`` of every object this sink has written."""
        with self._written_lock:
            return dict(self._written)

    def manifest_for(self, rung_key_prefix: str) -> Manifest:
        p = _check_prefix_arg(rung_key_prefix) + "/"
        manifest_key = p + MANIFEST_NAME
        with self._written_lock:
            items = sorted((k, v) for k, v in self._written.items() if k.startswith(p) and k != manifest_key)
        entries = [ManifestEntry(key=k, sha256=sha, size=size) for k, (size, sha) in items]
        return Manifest(version=MANIFEST_SCHEMA, objects=entries)

    def write_manifest(self, rung_key_prefix: str) -> str:
        """Write ``<rung_key_prefix>/manifest.json`` covering every object this sink wrote under
        that prefix; returns the manifest's key."""
        p = _check_prefix_arg(rung_key_prefix)
        manifest_key = self.check_write_key(f"{p}/{MANIFEST_NAME}")
        self._store_bytes(manifest_key, self.manifest_for(p).to_json().encode("utf-8"), "application/json")
        return manifest_key

    def _manifest_candidates(self, key: str) -> Iterator[str]:
        """``manifest.json`` in the key's folder, then in each parent folder up to (not above)
        the namespace; the rung folder is the nearest one that holds a manifest."""
        parts = key.split("/")[:-1]
        floor = len(self.namespace.rstrip("/").split("/")) if self.namespace else 0
        for depth in range(len(parts), floor, -1):
            yield "/".join(parts[:depth] + [MANIFEST_NAME])

    def get_verified(self, key: str) -> bytes:
        """The object's bytes, after checking size and sha256 against the manifest beside it."""
        k, entry, manifest_key = self._manifest_entry(key)
        return self._verified(k, self._load_bytes(k), entry, manifest_key)

    def get_verified_buffer(self, key: str) -> bytearray:
        """As :meth:`get_verified`, in a buffer the caller may change (a reader that marks it in
        place), read without the extra copy that ``bytearray(get_verified(key))`` makes."""
        k, entry, manifest_key = self._manifest_entry(key)
        return self._verified(k, self._load_buffer(k), entry, manifest_key)

    def _load_buffer(self, key: str) -> bytearray:
        return bytearray(self._load_bytes(key))

    def _manifest_entry(self, key: str) -> tuple[str, ManifestEntry, str]:
        """(the checked key, its entry in the nearest manifest, that manifest's key)."""
        k = check_key(key)
        if k.rsplit("/", 1)[-1] == MANIFEST_NAME:
            raise ArtifactIntegrityError(f"{k} is a manifest; it is not listed in one", k)
        for manifest_key in self._manifest_candidates(k):
            try:
                raw = self._load_bytes(manifest_key)
            except ArtifactNotFoundError:
                continue
            try:
                data = json.loads(raw)
            except ValueError:
                raise ArtifactIntegrityError(
                    f"manifest {self.describe(manifest_key)} is not valid JSON (checking {k})", k
                ) from None
            try:
                entry = Manifest.from_dict(data, f"manifest {self.describe(manifest_key)}").entry(k)
            except DocumentError as exc:
                raise ArtifactIntegrityError(f"{exc} (checking {k})", k) from None
            if entry is None:
                raise ArtifactIntegrityError(f"{k} is not listed in manifest {manifest_key}", k)
            return k, entry, manifest_key
        raise ArtifactIntegrityError(f"no {MANIFEST_NAME} in the rung folder of {k}", k)

    @staticmethod
    def _verified(k: str, data: _Bytes, entry: ManifestEntry, manifest_key: str) -> _Bytes:
        if len(data) != entry.size:
            raise ArtifactIntegrityError(f"{k}: size {len(data)} != {entry.size} in manifest {manifest_key}", k)
        digest = hashlib.sha256(data).hexdigest()
        if digest != entry.sha256:
            raise ArtifactIntegrityError(
                f"{k}: sha256 {digest[:16]}... != {entry.sha256[:16]}... in manifest {manifest_key}",
                k,
            )
        return data


class S3ArtifactStore(ArtifactSink):
    """Artifacts in ``s3://<bucket>/<prefix>/<ladder>/...`` through a boto3 S3 client."""

    def __init__(self, client: Any, bucket: str, prefix: str = DEFAULT_PREFIX, ladder: str = "") -> None:
        if not ladder:
            raise ArtifactKeyError("S3ArtifactStore needs a ladder name")
        if not bucket:
            raise ArtifactStoreError("S3ArtifactStore needs a bucket name")
        super().__init__(prefix, ladder)
        self.client = client
        self.bucket = bucket
        self._bucket_checked = False

    @classmethod
    def from_env(
        cls, ladder: str, prefix: str = DEFAULT_PREFIX, env: Mapping[str, str] | None = None
    ) -> "S3ArtifactStore":
        """A store from TRACELADDER_S3_ENDPOINT / AWS_* / TRACELADDER_S3_BUCKET."""
        if not env_vars.S3_BUCKET.is_set(env):
            raise ArtifactStoreError(f"{env_vars.S3_BUCKET.name} is not set")
        bucket = str(env_vars.S3_BUCKET.get(env))
        return cls(s3_client_from_env(env), bucket, prefix, ladder)

    @property
    def endpoint(self) -> str:
        meta = getattr(self.client, "meta", None)
        return str(getattr(meta, "endpoint_url", "") or "the default S3 endpoint")

    def describe(self, key: str | None = None) -> str:
        return f"s3://{self.bucket}/{key or ''} at {self.endpoint}"

    def _error(self, op: str, key: str | None, exc: BaseException) -> ArtifactStoreError:
        code, reason = _explain(exc)
        where = f"s3://{self.bucket}/{key}" if key is not None else f"bucket {self.bucket}"
        cls = ArtifactNotFoundError if code in ("NoSuchKey", "404", "NotFound") else ArtifactStoreError
        err = cls(f"S3 {op} failed for {where} at {self.endpoint}: {reason}", key, code)
        err.__cause__ = None
        return err

    def check(self) -> None:
        """Raise ``ArtifactStoreError`` unless the bucket is reachable with these credentials."""
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except Exception as exc:  # noqa: BLE001 - every failure becomes one line
            err = self._error("head_bucket", None, exc)
            if isinstance(err, ArtifactNotFoundError):  # HEAD has no body: 404 is the bucket
                err = ArtifactStoreError(
                    f"S3 head_bucket failed for bucket {self.bucket} at {self.endpoint}: "
                    "NoSuchBucket (the bucket does not exist)",
                    None,
                    "NoSuchBucket",
                )
            raise err from None

    def _store_bytes(self, key: str, data: bytes, content_type: str) -> None:
        try:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=data, ContentType=content_type)
        except Exception as exc:  # noqa: BLE001 - any S3 failure becomes one ArtifactStoreError line
            raise self._error("put", key, exc) from None

    def _store_stream(self, key: str, reader: _HashingReader, content_type: str) -> None:
        try:
            self.client.upload_fileobj(reader, self.bucket, key, ExtraArgs={"ContentType": content_type})
        except Exception as exc:  # noqa: BLE001 - any S3 failure becomes one ArtifactStoreError line
            raise self._error("upload", key, exc) from None

    def _load_bytes(self, key: str) -> bytes:
        try:
            resp = self.client.get_object(Bucket=self.bucket, Key=key)
            return resp["Body"].read()
        except Exception as exc:  # noqa: BLE001 - any S3 failure becomes one ArtifactStoreError line
            raise self._error("get", key, exc) from None

    def _load_buffer(self, key: str) -> bytearray:
        """The body read in chunks into one buffer of its announced length (no second copy)."""
        try:
            resp = self.client.get_object(Bucket=self.bucket, Key=key)
            buf = bytearray(int(resp.get("ContentLength") or 0))
            at = 0
            for chunk in resp["Body"].iter_chunks(_CHUNK):
                buf[at : at + len(chunk)] = chunk  # past the announced end, the buffer grows
                at += len(chunk)
        except Exception as exc:  # noqa: BLE001 - any S3 failure becomes one ArtifactStoreError line
            raise self._error("get", key, exc) from None
        del buf[at:]
        return buf

    def open(self, key: str) -> tuple[Iterator[bytes], int | None]:
        """A streaming body of ``key`` (1 MiB chunks) and its length, for the UI's downloads."""
        k = check_key(key)
        try:
            resp = self.client.get_object(Bucket=self.bucket, Key=k)
        except Exception as exc:  # noqa: BLE001 - any S3 failure becomes one ArtifactStoreError line
            raise self._error("get", k, exc) from None
        body = resp["Body"]

        def chunks() -> Iterator[bytes]:
            try:
                yield from body.iter_chunks(_CHUNK)
            finally:
                body.close()

        return chunks(), resp.get("ContentLength")

    def get_file(self, key: str, path: str | os.PathLike[str]) -> Path:
        """Download ``key`` to ``path`` (streaming)."""
        k = check_key(key)
        dest = Path(path)
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.client.download_file(self.bucket, k, str(dest))
        except Exception as exc:  # noqa: BLE001 - any S3 failure becomes one ArtifactStoreError line
            raise self._error("download", k, exc) from None
        return dest

    def _exists(self, key: str) -> bool:
        try:
            self.client.head_object(Bucket=self.bucket, Key=key)
            return True
        except Exception as exc:  # noqa: BLE001 - any S3 failure becomes one ArtifactStoreError line
            err = self._error("head", key, exc)
            if not isinstance(err, ArtifactNotFoundError):
                raise err from None
        if not self._bucket_checked:  # a HEAD 404 does not say whether the bucket exists
            self.check()
            self._bucket_checked = True
        return False

    def _list_tagged(self, prefix: str, limit: int | None = None) -> list[tuple[str, str]]:
        """(key, ETag) of the objects under ``prefix``, in key order (one paginated listing)."""
        found: list[tuple[str, str]] = []
        try:
            paginator = self.client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
                found.extend((obj["Key"], str(obj.get("ETag") or "")) for obj in page.get("Contents", []) or [])
                if limit is not None and len(found) >= limit:
                    return found[:limit]
        except Exception as exc:  # noqa: BLE001 - any S3 failure becomes one ArtifactStoreError line
            raise self._error("list", prefix, exc) from None
        return found

    def _list(self, prefix: str, limit: int | None = None) -> list[str]:
        return [key for key, _etag in self._list_tagged(prefix, limit)]

    def list_versions(self, prefix: str) -> dict[str, str | None]:
        # the ETag: S3 changes it with the content, and the listing carries it (no HEAD per key)
        return {key: etag or None for key, etag in sorted(self._list_tagged(_check_prefix_arg(prefix) + "/"))}

    def list_first(self, prefix: str, limit: int) -> tuple[list[str], bool]:
        # S3 lists in key order: stop paginating at `limit` instead of listing a huge folder.
        p = _check_prefix_arg(prefix) + "/"
        keys = self._list(p, limit)
        return sorted(keys), len(keys) >= limit


class DirArtifactSink(ArtifactSink):
    """Artifacts as files under ``root`` with the same relative layout as in S3 (``root/<key>``).

    Without ``prefix``/``ladder`` any clean key may be written; with them, only keys under
    ``<prefix>/<ladder>/``, as for S3.
    """

    def __init__(self, root: str | os.PathLike[str], prefix: str | None = None, ladder: str | None = None) -> None:
        super().__init__(prefix, ladder)
        self.root = Path(root).resolve()

    def describe(self, key: str | None = None) -> str:
        return str(self.root / key) if key else str(self.root)

    def locate(self, key: str) -> str:
        return str(self._path(key))

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if path != self.root and self.root not in path.parents:  # e.g. a symlink pointing out
            raise ArtifactKeyError(f"artifact key {key!r} resolves outside {self.root}", key)
        return path

    def _atomic_write(self, key: str, write: Any) -> None:
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
            try:
                with os.fdopen(fd, "wb") as f:
                    write(f)
                os.chmod(tmp, 0o644)
                os.replace(tmp, path)
            except BaseException:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
                raise
        except OSError as exc:
            raise ArtifactStoreError(f"cannot write {path}: {exc.strerror or exc}", key) from None

    def _store_bytes(self, key: str, data: bytes, content_type: str) -> None:
        self._atomic_write(key, lambda f: f.write(data))

    def _store_stream(self, key: str, reader: _HashingReader, content_type: str) -> None:
        def copy(f: IO[bytes]) -> None:
            while True:
                chunk = reader.read(_CHUNK)
                if not chunk:
                    break
                f.write(chunk)

        self._atomic_write(key, copy)

    def _load_bytes(self, key: str) -> bytes:
        with self._reading(key) as path:
            return path.read_bytes()

    def _load_buffer(self, key: str) -> bytearray:
        with self._reading(key) as path, open(path, "rb") as fh:
            buf = bytearray(os.fstat(fh.fileno()).st_size)
            n = fh.readinto(buf)
        del buf[n:]  # the file shrank while it was read: the size check then names it
        return buf

    @contextlib.contextmanager
    def _reading(self, key: str) -> Iterator[Path]:
        path = self._path(key)
        try:
            yield path
        except FileNotFoundError:
            raise ArtifactNotFoundError(f"no artifact {path}", key, "NoSuchKey") from None
        except OSError as exc:
            raise ArtifactStoreError(f"cannot read {path}: {exc.strerror or exc}", key) from None

    def _exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def _list(self, prefix: str) -> list[str]:
        base = self.root / prefix if prefix else self.root
        if not base.is_dir():
            return []
        keys = []
        for dirpath, _dirs, files in os.walk(base):
            for name in files:
                if name.endswith(".part") and name.startswith("."):
                    continue  # an interrupted write
                rel = Path(dirpath, name).relative_to(self.root).as_posix()
                keys.append(rel)
        return keys


# ---- S3 plumbing -------------------------------------------------------------------------------
def _explain(exc: BaseException) -> tuple[str, str]:
    """(code, one-line reason) of a boto3/botocore/s3transfer failure."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict) and "Error" in response:
        err = response.get("Error") or {}
        code = str(err.get("Code") or response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
        message = str(err.get("Message") or "").strip()
        if code in ("404", "NotFound") and not message:
            message = "not found"
        hint = {
            "AccessDenied": "access denied (check the credentials and the bucket policy)",
            "InvalidAccessKeyId": "unknown access key",
            "SignatureDoesNotMatch": "wrong secret key",
            "403": "access denied",
        }.get(code)
        reason = f"{code}: {message}" if message else code
        if hint and hint.lower() not in reason.lower():
            reason = f"{reason} ({hint})"
        return code, " ".join(reason.split())
    # s3transfer wraps the underlying error (S3UploadFailedError's message embeds it).
    inner = getattr(exc, "last_exception", None) or exc.__cause__ or exc.__context__
    if inner is not None and inner is not exc and getattr(inner, "response", None):
        return _explain(inner)
    name = type(exc).__name__
    text = " ".join(str(exc).split())
    if "Could not connect" in text or name in ("EndpointConnectionError", "ConnectionClosedError"):
        return "EndpointConnectionError", f"endpoint unreachable ({text})"
    if name in ("NoCredentialsError", "PartialCredentialsError"):
        return name, f"no S3 credentials ({text}); set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
    m = re.search(r"An error occurred \((\w+)\)", text)
    code = m.group(1) if m else name
    return code, f"{name}: {text}" if text else name


def s3_client_from_env(env: Mapping[str, str] | None = None, **config: Any) -> Any:
    """A boto3 S3 client from TRACELADDER_S3_ENDPOINT, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY
    and AWS_DEFAULT_REGION (defaults: AWS's endpoint, the default credential chain, us-east-1)."""
    import boto3
    from botocore.config import Config

    env = os.environ if env is None else env
    endpoint = env_vars.S3_ENDPOINT.get(env)
    region = env.get("AWS_DEFAULT_REGION") or env.get("AWS_REGION") or "us-east-1"
    s3_opts = {"addressing_style": "path"} if endpoint else {}
    cfg = Config(
        signature_version="s3v4",
        s3=s3_opts,
        connect_timeout=config.pop("connect_timeout", 5),
        read_timeout=config.pop("read_timeout", 120),
        retries=config.pop("retries", {"max_attempts": 3, "mode": "standard"}),
        **config,
    )
    kwargs: dict[str, Any] = {"region_name": region, "config": cfg}
    if endpoint:
        kwargs["endpoint_url"] = endpoint
    access = env.get("AWS_ACCESS_KEY_ID")
    secret = env.get("AWS_SECRET_ACCESS_KEY")
    if access and secret:
        kwargs["aws_access_key_id"] = access
        kwargs["aws_secret_access_key"] = secret
        if env.get("AWS_SESSION_TOKEN"):
            kwargs["aws_session_token"] = env["AWS_SESSION_TOKEN"]
    return boto3.session.Session().client("s3", **kwargs)
