"""What the Ladders page shows, read from the ladder files on disk and from S3.

The ladder list comes from ``include/configs/ladders/*.yaml`` (``ladder_files()``), so the page
shows every ladder even when S3 is down. Runs, summaries, charts and artifacts come from S3
through the cluster's Airflow connection (``storage.conn_id``, an ``aws`` connection, via the
amazon provider's ``S3Hook``), exactly like the tasks that wrote them.

Every S3 key this module reads is built from the ladder's prefix ``<prefix>/<ladder>/`` plus a
relative key that passed ``check_key`` (``[A-Za-z0-9._-]`` parts, no ``.``/``..``/empty parts, not
absolute), so nothing outside ``<prefix>/<ladder>/`` can be read, whatever the URL held.

``LadderStore`` reads through the artifact store (``storage.artifacts.S3ArtifactStore``), so S3
failures become its one-line ``ArtifactStoreError`` / ``ArtifactNotFoundError``; ``scrub`` removes
the connection's credentials from any message before it is shown.
"""

from __future__ import annotations

import builtins  # LadderStore.list shadows the builtin inside the class
import threading
import time
import contextlib
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator, TypedDict

from traceladder.storage.artifacts import (
    ArtifactIntegrityError,
    ArtifactKeyError,
    ArtifactNotFoundError,
    ArtifactStoreError,
    S3ArtifactStore,
    check_key,
    ladder_prefix,
    safe_key_part,
)
from traceladder.core.documents import DocumentError, JSONObject, Summary, entries_from, legacy_rows
from traceladder.core import env_vars
from traceladder.core.layout import LEGACY_INDEX as INDEX_OBJECT
from traceladder.core.layout import (
    LOG_OBJECT,
    MANIFEST_NAME,
    RUNS_FOLDER,
    SUMMARY_FOLDER,
    SUMMARY_JSON,
    TRACES_FOLDER,
)
from traceladder.storage.retention import removed_in

MAX_LISTED_KEYS = 5000  # a run folder listing stops here (the page says so)
# TRACELADDER_UI_CACHE=0 turns the page's in-process caches off (the "before" of the page-load bench).
CACHE_ENABLED = env_vars.UI_CACHE.get() != "0"
CLIENT_TTL_S = 60.0

_CONNECT_TIMEOUT_S = 3
_READ_TIMEOUT_S = 20


class RunRow(TypedDict):
    """A published run as the Ladders page lists it."""

    run_id: str
    published_at: str
    logical_date: str
    what_if: bool
    failed_rungs: list[str]
    version: str  # the index entry's ETag ("" for an older index.json row)


@dataclass
class LadderEntry:
    """One ladder file, as far as it could be read."""

    file: str  # the file name without .yaml: the page's and the URLs' name for the ladder
    path: Path
    name: str | None = None  # the `ladder:` field (S3 keys and the trigger DAG use it)
    description: str = ""
    model_tag: str = ""
    backend: str = ""
    cluster: str = ""
    schedule: str | None = None
    repeats: str | None = None  # `3`, or `3-8 adaptive[, 450 s budget]` (Ladder.repeats_label)
    rungs: list[str] = field(default_factory=list)
    lenses: list[str] = field(default_factory=list)  # lenses this ladder's backend can run
    conn_id: str | None = None
    bucket: str | None = None
    prefix: str | None = None
    error: str | None = None  # one line: why the file could not be loaded
    _storage: Any = field(default=None, repr=False, compare=False)  # the cluster's storage settings

    @property
    def s3_prefix(self) -> str:
        """``<prefix>/<ladder>`` (no trailing slash)."""
        if not (self.prefix and self.name):
            raise ArtifactKeyError(f"ladder file {self.file} has no storage settings")
        return ladder_prefix(self.prefix, self.name)

    @property
    def storage_key(self) -> tuple[str, str] | None:
        return (self.conn_id, self.bucket) if self.conn_id and self.bucket else None


def _stat_sig(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


class _LadderFileCache:
    """Parsed ladder files, kept while neither the file nor the clusters file changes (a page
    parsed every YAML on every request: ~0.1 s per seed-sized file)."""

    def __init__(self) -> None:
        self._entries: dict[Path, tuple[Any, LadderEntry]] = {}
        self._lock = threading.Lock()

    def get(self, path: Path, sig: Any) -> LadderEntry | None:
        if not CACHE_ENABLED:
            return None
        with self._lock:
            hit = self._entries.get(path)
        if not hit or hit[0] != sig:
            return None
        entry = replace(hit[1])
        if entry._storage is not None:  # the deployment's bucket override is read afresh
            entry.bucket = entry._storage.effective_bucket
        return entry

    def put(self, path: Path, sig: Any, entry: LadderEntry) -> None:
        with self._lock:
            self._entries[path] = (sig, replace(entry))


LADDER_FILES = _LadderFileCache()


def list_ladders(only: str | None = None) -> list[LadderEntry]:
    """Every ``*.yaml`` in the ladders folder (or only the one whose file name is ``only``),
    sorted by file name; a file that does not load is listed with its one-line error."""
    from traceladder.config import ladder_files
    from traceladder.config.loader import clusters_file

    every = ladder_files()
    paths = [p for p in every if only is None or p.stem == only]
    if not paths:
        return []
    # Any ladder file (one may `extends` another) or the clusters file changed: parse again.
    sig = (tuple((p.name, _stat_sig(p)) for p in every), _stat_sig(clusters_file()))
    cached = [LADDER_FILES.get(p, sig) for p in paths]
    missing = [p for p, c in zip(paths, cached) if c is None]
    if missing:
        loaded = {e.path: e for e in _load_entries(missing)}
        for path in missing:
            LADDER_FILES.put(path, sig, loaded[path])
        cached = [c or loaded[p] for p, c in zip(paths, cached)]
    return [c for c in cached if c is not None]


def _load_entries(paths: list[Path]) -> list[LadderEntry]:
    from traceladder.config import LadderConfigError, load_clusters, load_ladder
    from traceladder.config.models import LENSES_BY_BACKEND

    clusters = None
    clusters_error = None
    try:
        clusters = load_clusters()
    except LadderConfigError as exc:
        clusters_error = str(exc)
    out = []
    for path in paths:
        entry = LadderEntry(file=path.stem, path=path)
        out.append(entry)
        if clusters is None:
            entry.error = clusters_error
            continue
        try:
            loaded = load_ladder(path, clusters)
        except LadderConfigError as exc:
            entry.error = " ".join(str(exc).split())
            continue
        except Exception as exc:  # noqa: BLE001 - a broken file must not take the page down
            entry.error = f"{path.name}: {type(exc).__name__}: {' '.join(str(exc).split())}"
            continue
        ladder = loaded.ladder
        storage = loaded.cluster.storage
        entry.name = ladder.ladder
        entry.description = ladder.description
        entry.model_tag = ladder.model_tag
        entry.backend = ladder.backend
        entry.cluster = ladder.cluster
        entry.schedule = ladder.schedule
        entry.repeats = ladder.repeats_label
        entry.rungs = [r.name for r in ladder.rungs]
        entry.lenses = list(LENSES_BY_BACKEND.get(ladder.backend, ()))
        entry.conn_id = storage.conn_id
        entry.bucket = storage.effective_bucket
        entry.prefix = storage.prefix
        entry._storage = storage
    return out


def find_entry(file: str) -> LadderEntry | None:
    """The ladder whose file name is ``file`` (an exact match against the files on disk: the
    URL never names a path)."""
    found = list_ladders(only=file)
    return found[0] if found else None


def clean_run_id(run_id: str) -> str:
    """A run id as it appears in keys; raises ``ArtifactKeyError`` unless it is already clean."""
    if not run_id or safe_key_part(run_id) != run_id:
        raise ArtifactKeyError(f"invalid run id {run_id[:80]!r}")
    return run_id


def relative_key(key: str) -> str:
    """A key relative to the ladder's prefix, as a URL gives it; ``ArtifactKeyError`` unless
    it is clean (this refuses ``..``, absolute paths, backslashes and anything still
    percent-encoded after the one decoding the server does, e.g. ``%2e%2e`` sent as ``%252e%252e``)."""
    return check_key(key)


# ---- S3 ----------------------------------------------------------------------------------------
class _Secrets:
    """Credentials of the connections in use, to scrub from messages."""

    def __init__(self) -> None:
        self._values: set[str] = set()
        self._lock = threading.Lock()

    def add(self, *values: Any) -> None:
        with self._lock:
            self._values.update(str(v) for v in values if v and len(str(v)) >= 4)

    def scrub(self, text: str) -> str:
        with self._lock:
            values = sorted(self._values, key=len, reverse=True)
        for value in values:
            text = text.replace(value, "***")
        return text


SECRETS = _Secrets()


def scrub(text: object) -> str:
    """One line, with every known credential replaced by ``***``."""
    return SECRETS.scrub(" ".join(str(text).split()))


class _ClientCache:
    """One boto3 client per connection id. Every ``CLIENT_TTL_S`` seconds the connection is read
    again, so an edited one takes effect without a restart; the client is re-made only when the
    connection really changed. Making one loads botocore's S3 model (~10^5 objects), whose
    discarded copies every minute kept the api-server workers in 0.5-1 s collections."""

    def __init__(self) -> None:
        self._clients: dict[str, tuple[float, str, Any]] = {}  # conn id -> (checked at, fingerprint, client)
        self._lock = threading.Lock()

    def get(self, conn_id: str) -> Any:
        now = time.monotonic()
        with self._lock:
            hit = self._clients.get(conn_id)
        if hit and now - hit[0] < CLIENT_TTL_S:
            return hit[2]
        hook, fingerprint = _connection(conn_id)
        if hit and hit[1] == fingerprint:
            client = hit[2]
        else:
            client = _make_client(conn_id, hook)
        with self._lock:
            self._clients[conn_id] = (now, fingerprint, client)
        _freeze_long_lived()
        return client


_FROZEN = threading.Event()


def _freeze_long_lived() -> None:
    """Once per process, after the first S3 client exists: move what is alive now (Airflow's
    modules, the ORM's mappers, the API's routes, botocore's S3 model: ~7 x 10^5 objects) out of
    the collector's reach (``gc.freeze``). Otherwise every full collection walks them all again:
    0.5-1.3 s pauses of a worker every 10-20 s under load, most of the page's p95."""
    if _FROZEN.is_set():
        return
    _FROZEN.set()
    import gc

    gc.collect()
    gc.freeze()


def _connection(conn_id: str) -> tuple[Any, str]:
    """The connection's S3 hook and a digest of everything a client is made from (never the
    secrets themselves)."""
    import hashlib

    try:
        from airflow.providers.amazon.aws.hooks.s3 import S3Hook

        hook = S3Hook(aws_conn_id=conn_id)
        conn = hook.get_connection(conn_id)
        material = repr((conn.conn_type, conn.host, conn.login, conn.password, conn.port, conn.extra))
    except Exception as exc:  # noqa: BLE001 - a bad connection is one line on the page
        raise ArtifactStoreError(f"cannot read S3 connection {conn_id!r}: {scrub(exc)}") from None
    return hook, hashlib.sha256(material.encode()).hexdigest()


def _make_client(conn_id: str, hook: Any) -> Any:
    from botocore.config import Config

    try:
        wrapper = hook.conn_config
        SECRETS.add(wrapper.aws_access_key_id, wrapper.aws_secret_access_key, wrapper.aws_session_token)
        # The connection's own botocore config (e.g. path-style addressing) plus short timeouts,
        # so that an unreachable S3 costs the page seconds, not minutes.
        config = hook.config.merge(
            Config(
                connect_timeout=_CONNECT_TIMEOUT_S,
                read_timeout=_READ_TIMEOUT_S,
                retries={"max_attempts": 2, "mode": "standard"},
            )
        )
        return _fast_timestamps(hook.get_client_type(config=config))
    except Exception as exc:  # noqa: BLE001 - a bad connection is one line on the page
        raise ArtifactStoreError(f"cannot make an S3 client from connection {conn_id!r}: {scrub(exc)}") from None


def _fast_timestamps(client: Any) -> Any:
    """botocore parses every listed key's LastModified with dateutil (~0.5 ms a key: 0.4 s of a
    run page's 850-key listing); S3 sends ISO 8601 there, which ``fromisoformat`` reads ~50x
    faster. Anything else (the RFC 1123 Last-Modified header) goes to botocore's own parser."""
    from datetime import datetime

    from botocore.parsers import DEFAULT_TIMESTAMP_PARSER, ResponseParserFactory

    endpoint = getattr(client, "_endpoint", None)
    if endpoint is None or not hasattr(endpoint, "_response_parser_factory"):
        return client  # another botocore: keep its parsers

    def parse(value: Any) -> Any:
        if isinstance(value, str) and value[:4].isdigit():
            try:
                return datetime.fromisoformat(value)
            except ValueError:
                pass
        return DEFAULT_TIMESTAMP_PARSER(value)

    factory = ResponseParserFactory()  # this client's own: the session's stays as it is
    factory.set_parser_defaults(timestamp_parser=parse)
    endpoint._response_parser_factory = factory
    return client


CLIENTS = _ClientCache()


@contextmanager
def _scrubbed() -> Iterator[None]:
    """The store's one-line errors, with the connection's credentials scrubbed from them."""
    try:
        yield
    except ArtifactStoreError as exc:
        raise type(exc)(scrub(exc), exc.key, exc.code) from None


class _VersionedCache:
    """Values read from S3, each kept with the version it was read at (an object's listing ETag,
    or the index entry's): a hit costs no request. Bounded; emptied when full."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._values: dict[tuple[str, str], tuple[str, Any]] = {}
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str], version: str) -> Any | None:
        if not CACHE_ENABLED:
            return None
        with self._lock:
            hit = self._values.get(key)
        return hit[1] if hit and version and hit[0] == version else None

    def put(self, key: tuple[str, str], version: str, value: Any) -> None:
        if not version:
            return
        with self._lock:
            if len(self._values) >= self.limit:
                self._values.clear()
            self._values[key] = (version, value)


# A TTL cache drops its expired values once it holds TTL_PRUNE_AT, and everything at TTL_LIMIT.
TTL_PRUNE_AT, TTL_LIMIT = 64, 10_000


class _TtlCache:
    """Values kept for ``ttl_s`` seconds: what the page may show a few seconds late."""

    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self._values: dict[tuple[str, str], tuple[float, Any]] = {}
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str]) -> Any | None:
        if not CACHE_ENABLED:
            return None
        with self._lock:
            hit = self._values.get(key)
        return hit[1] if hit and time.monotonic() - hit[0] < self.ttl_s else None

    def put(self, key: tuple[str, str], value: Any) -> None:
        now = time.monotonic()
        with self._lock:
            if len(self._values) >= TTL_PRUNE_AT:  # expired values go: kept, they only feed the collector
                self._values = {k: v for k, v in self._values.items() if now - v[0] < self.ttl_s}
            if len(self._values) >= TTL_LIMIT:
                self._values.clear()
            self._values[key] = (now, value)


# The `runs/` listing, for a few seconds (a run published now shows within LISTING_TTL_S), and
# the older shared index.json, which nothing writes any more, for minutes.
LISTING_TTL_S = 5.0
LISTINGS = _TtlCache(LISTING_TTL_S)
LEGACY_INDEXES = _TtlCache(300.0)

# Index entries (a few KB each; ten ladders of a year are 520) and parsed summaries (larger,
# only the latest run of each ladder and the runs being opened are read).
ENTRIES = _VersionedCache(20_000)
SUMMARIES = _VersionedCache(200)
SUMMARY_FILES = _VersionedCache(2_000)

# A run page's file listing, for a few seconds as the runs/ listing (retention, which changes it,
# runs weekly), and each rung manifest parsed at its listing ETag: a run page of 45 rungs costs
# one listing, not one listing and 45 manifest reads. A bucket that answered is not asked again
# for a few seconds; one that did not is asked on every page.
RUN_LISTINGS = _TtlCache(LISTING_TTL_S)
MANIFESTS = _VersionedCache(20_000)
BUCKET_CHECKS = _TtlCache(LISTING_TTL_S)
# A run page's manifests and a ladder's index entries that are not cached are read this many at a
# time (one S3 round trip each).
MANIFEST_READERS = 8
INDEX_READERS = 8


class _RunsMemo:
    """A ladder's run rows, kept while the index objects they were read from are the cached ones
    (the same listing and legacy index objects): reading 52 index entries again on every page is
    most of the ladder list's own work."""

    def __init__(self) -> None:
        self._values: dict[tuple[str, str], tuple[object, object, builtins.list[RunRow]]] = {}
        self._lock = threading.Lock()
        self._readers: dict[tuple[str, str], threading.Lock] = {}

    def lock_for(self, key: tuple[str, str]) -> Any:
        """The ladder's reader lock (none when the caches are off: nothing to share then)."""
        if not CACHE_ENABLED:
            return contextlib.nullcontext()
        with self._lock:
            return self._readers.setdefault(key, threading.Lock())

    def get(self, key: tuple[str, str], listing: object, legacy: object) -> builtins.list[RunRow] | None:
        if not CACHE_ENABLED:
            return None
        with self._lock:
            hit = self._values.get(key)
        return list(hit[2]) if hit and hit[0] is listing and hit[1] is legacy else None

    def put(self, key: tuple[str, str], listing: object, legacy: object, rows: builtins.list[RunRow]) -> None:
        with self._lock:
            if len(self._values) > 1_000:
                self._values.clear()
            self._values[key] = (listing, legacy, list(rows))


RUNS_MEMO = _RunsMemo()


class LadderStore:
    """Read-only access to one ladder's ``<prefix>/<ladder>/`` in S3, through the artifact store
    (``S3ArtifactStore``: its listing, streaming, error wording and manifest check)."""

    def __init__(self, entry: LadderEntry, client: Any | None = None) -> None:
        if entry.storage_key is None:
            raise ArtifactStoreError(f"ladder file {entry.file} has no usable storage settings")
        self.entry = entry
        self.bucket = entry.bucket or ""
        self.base = entry.s3_prefix  # <prefix>/<ladder>
        self._client = client
        self._store: S3ArtifactStore | None = None

    @property
    def client(self) -> Any:
        if self._client is None:
            assert self.entry.conn_id
            self._client = CLIENTS.get(self.entry.conn_id)
        return self._client

    @property
    def store(self) -> S3ArtifactStore:
        if self._store is None:
            self._store = S3ArtifactStore(self.client, self.bucket, self.entry.prefix or "", self.entry.name or "")
        return self._store

    def full_key(self, rel: str) -> str:
        """``<prefix>/<ladder>/<rel>``; ``ArtifactKeyError`` unless ``rel`` is clean."""
        key = f"{self.base}/{relative_key(rel)}"
        if not key.startswith(self.base + "/"):  # cannot happen after check_key; kept as a guard
            raise ArtifactKeyError(f"key {rel!r} is outside {self.base}/")
        return check_key(key)

    def check(self) -> None:
        """Raise ``ArtifactStoreError`` unless the bucket answers (an answer is kept a few seconds)."""
        key = (self.entry.conn_id or "", self.bucket)
        if BUCKET_CHECKS.get(key):
            return
        with _scrubbed():
            self.store.check()
        BUCKET_CHECKS.put(key, True)

    def get_bytes(self, rel: str) -> bytes:
        key = self.full_key(rel)
        with _scrubbed():
            return self.store.get_bytes(key)

    def get_json(self, rel: str) -> Any:
        key = self.full_key(rel)
        with _scrubbed():
            try:
                return self.store.get_json(key)
            except ArtifactIntegrityError as exc:  # not JSON: for the page, a store error like any other
                raise ArtifactStoreError(str(exc), key) from None

    def list(self, rel_folder: str, limit: int = MAX_LISTED_KEYS) -> tuple[list[str], bool]:
        """Keys under ``<base>/<rel_folder>/``, relative to the base, sorted; and whether the
        listing stopped at ``limit``."""
        with _scrubbed():
            keys, truncated = self.store.list_first(self.full_key(rel_folder.rstrip("/")), limit)
        return [k[len(self.base) + 1 :] for k in keys], truncated

    def removed(self, rel_rung: str, etag: str = "") -> dict[str, JSONObject]:
        """``{relative key: record}`` of what retention removed from a rung folder (its manifest);
        ``etag``, the manifest's from a listing, keeps what was read at that ETag."""
        rel = f"{rel_rung.rstrip('/')}/{MANIFEST_NAME}"
        cached = MANIFESTS.get((self.bucket, f"{self.base}/{rel}"), etag)
        if cached is not None:
            return dict(cached)
        try:
            manifest = self.get_json(rel)
        except ArtifactStoreError:  # no manifest (or unreadable): nothing is known to be removed
            return {}
        found = {k[len(self.base) + 1 :]: r for k, r in removed_in(manifest).items() if k.startswith(self.base + "/")}
        MANIFESTS.put((self.bucket, f"{self.base}/{rel}"), etag, found)
        return found

    def removed_many(self, manifests: builtins.list[tuple[str, str]]) -> dict[str, dict[str, JSONObject]]:
        """``removed()`` of each ``(rung folder, manifest ETag)``: the uncached manifests read
        MANIFEST_READERS at a time (each read is one S3 round trip)."""
        if len(manifests) <= 1:
            return {rung: self.removed(rung, etag) for rung, etag in manifests}
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(MANIFEST_READERS, len(manifests))) as pool:
            found = pool.map(lambda item: (item[0], self.removed(item[0], item[1])), manifests)
            return dict(found)

    def removal_of(self, rel: str) -> JSONObject | None:
        """The retention record of a trace or log key, if its rung's manifest lists it as removed."""
        if rel.endswith(f"/{LOG_OBJECT}"):
            rung = rel[: -len(LOG_OBJECT) - 1]
        else:
            rung = rel.rpartition(f"/{TRACES_FOLDER}/")[0]
        return self.removed(rung).get(rel) if rung else None

    def open(self, rel: str) -> tuple[Iterator[bytes], int | None]:
        """A streaming body of ``<base>/<rel>`` and its length."""
        key = self.full_key(rel)
        with _scrubbed():
            return self.store.open(key)

    # ---- the published runs
    def _index_rows(self) -> builtins.list[tuple[object, str, str]]:
        """(row, where it came from, its ETag) of the run index: the older ``index.json`` (cached
        a while) and one entry per run under ``runs/``. One listing with each entry's ETag (kept
        LISTING_TTL_S): an entry read before at the same ETag is not read again, so a page costs
        one request per 1,000 runs, not one per run."""
        doc, listing = self._index_sources()
        return self._rows_from(doc, listing)

    def _index_sources(self) -> tuple[Any, builtins.list[tuple[str, str]]]:
        """The legacy index document (cached a while) and the ``runs/`` listing (kept LISTING_TTL_S)."""
        doc = LEGACY_INDEXES.get((self.bucket, self.base))
        if doc is None:
            try:
                doc = self.get_json(INDEX_OBJECT)
            except ArtifactNotFoundError:
                doc = {"runs": []}
            LEGACY_INDEXES.put((self.bucket, self.base), doc)
        listing = LISTINGS.get((self.bucket, self.base))
        if listing is None:
            listing = self._listing(RUNS_FOLDER)
            LISTINGS.put((self.bucket, self.base), listing)
        return doc, listing

    def _rows_from(self, doc: Any, listing: builtins.list[tuple[str, str]]) -> builtins.list[tuple[object, str, str]]:
        legacy = f"s3://{self.bucket}/{self.base}/{INDEX_OBJECT}"
        rows: builtins.list[tuple[object, str, str]] = [(r, w, "") for r, w in legacy_rows(doc, legacy)]
        entries = [(key, etag) for key, etag in listing if key.endswith(".json")]
        found = {key: ENTRIES.get((self.bucket, key), etag) for key, etag in entries}
        missing = [(key, etag) for key, etag in entries if found[key] is None]

        def read(item: tuple[str, str]) -> tuple[str, Any]:
            key, etag = item
            try:
                value = self.get_json(key[len(self.base) + 1 :])
            except ArtifactNotFoundError:
                return key, None
            ENTRIES.put((self.bucket, key), etag, value)
            return key, value

        if len(missing) > 1:  # a ladder's first page: its entries read INDEX_READERS at a time
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(min(INDEX_READERS, len(missing))) as pool:
                found.update(pool.map(read, missing))
        else:
            found.update(map(read, missing))
        rows += [(found[key], key, etag) for key, etag in entries if found[key] is not None]
        return rows

    def _listing(self, rel_folder: str) -> builtins.list[tuple[str, str]]:
        """(key, ETag) of every object under ``<base>/<rel_folder>/`` (the store's versioned listing)."""
        with _scrubbed():
            listed = self.store.list_versions(self.full_key(rel_folder))
        return [(key, etag or "") for key, etag in listed.items()]

    def runs(self) -> builtins.list[RunRow]:
        """The published runs, newest first (by logical date, then publish time), read by the run
        index's own rule (core.documents.entries_from) from the cached index objects."""
        # One reader per ladder at a time: the viewers' first pages all find the ladder cold, and
        # each would otherwise read its whole index again; they wait and take the first's rows.
        with RUNS_MEMO.lock_for((self.bucket, self.base)), _scrubbed():
            doc, listing = self._index_sources()
            memo = RUNS_MEMO.get((self.bucket, self.base), listing, doc)
            if memo is not None:
                return memo
            rows = self._rows_from(doc, listing)
        # the entry's ETag: a re-published run writes a new entry, so its summary is read again
        versions = {
            str(row["run_id"]): etag
            for row, _, etag in rows
            if isinstance(row, dict) and isinstance(row.get("run_id"), str)
        }
        by_id: dict[str, RunRow] = {}
        for run in entries_from(((row, where) for row, where, _ in rows), skip_bad=True):
            try:
                clean_run_id(run.run_id)
            except ArtifactKeyError:
                continue  # not a run this page can link to
            by_id[run.run_id] = RunRow(
                run_id=run.run_id,
                published_at=run.published_at,
                logical_date=run.logical_date or run.published_at,
                what_if=run.is_what_if,
                failed_rungs=[str(f) for f in run.failed_rungs],
                version=versions.get(run.run_id, ""),
            )
        result = sorted(by_id.values(), key=lambda r: (r["logical_date"], r["published_at"]), reverse=True)
        RUNS_MEMO.put((self.bucket, self.base), listing, doc, result)
        return result

    def summary(self, run_id: str, version: str = "") -> JSONObject:
        """The run's summary.json, checked against the manifest beside it (as the pipeline reads it).
        ``version`` (the run's index entry ETag) keeps the checked summary for the next page."""
        key = self.full_key(f"{clean_run_id(run_id)}/{SUMMARY_FOLDER}/{SUMMARY_JSON}")
        cached = SUMMARIES.get((self.bucket, key), version)
        if cached is not None:
            return cached
        with RUNS_MEMO.lock_for((self.bucket, key)):  # concurrent first views read it once
            cached = SUMMARIES.get((self.bucket, key), version)
            if cached is not None:
                return cached
            data = self._read_summary(run_id, key)
            SUMMARIES.put((self.bucket, key), version, data)
        return data

    def _read_summary(self, run_id: str, key: str) -> JSONObject:
        try:
            with _scrubbed():
                raw = self.store.get_verified(key)
        except ArtifactIntegrityError as exc:
            raise ArtifactStoreError(
                scrub(f"summary.json of run {run_id} fails its manifest check: {exc}"), key
            ) from None
        try:  # checked by its class (what a page may rely on), shown as stored
            return Summary.checked_json(raw, f"summary.json of run {run_id}")
        except DocumentError as exc:
            raise ArtifactStoreError(f"{exc} (not a traceladder summary)", key) from None

    def summary_files(self, run_id: str, version: str = "") -> builtins.list[str]:
        folder = f"{clean_run_id(run_id)}/{SUMMARY_FOLDER}"
        cached = SUMMARY_FILES.get((self.bucket, f"{self.base}/{folder}"), version)
        if cached is not None:
            return list(cached)
        keys, _ = self.list(folder)
        SUMMARY_FILES.put((self.bucket, f"{self.base}/{folder}"), version, tuple(keys))
        return keys

    def etag(self, rel: str) -> str:
        """The object's ETag (a HEAD request), for revalidating what retention may change."""
        key = self.full_key(rel)
        try:
            return str(self.client.head_object(Bucket=self.bucket, Key=key).get("ETag") or "")
        except Exception as exc:  # noqa: BLE001 - the store's one-line error, scrubbed
            err = self.store._error("head", key, exc)
            raise type(err)(scrub(err), err.key, err.code) from None

    def run_files(self, run_id: str) -> tuple[builtins.list[str], bool]:
        keys, truncated = self.run_listing(run_id)
        return [k for k, _ in keys], truncated

    def run_listing(self, run_id: str, limit: int = MAX_LISTED_KEYS) -> tuple[builtins.list[tuple[str, str]], bool]:
        """(key relative to the base, ETag) of the run's first ``limit`` files, sorted, and whether
        the listing stopped there; one listing, kept LISTING_TTL_S."""
        folder = self.full_key(clean_run_id(run_id))
        cached = RUN_LISTINGS.get((self.bucket, folder))
        if cached is not None:
            return cached
        found: builtins.list[tuple[str, str]] = []
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=folder + "/")
            for page in pages:  # S3 lists in key order: stop at the limit
                found += [
                    (o["Key"][len(self.base) + 1 :], str(o.get("ETag") or "")) for o in page.get("Contents") or []
                ]
                if len(found) >= limit:
                    break
        except Exception as exc:  # noqa: BLE001 - the store's one-line error, scrubbed
            raise type(err := self.store._error("list", folder + "/", exc))(scrub(err), err.key, err.code) from None
        result = (sorted(found)[:limit], len(found) >= limit)
        RUN_LISTINGS.put((self.bucket, folder), result)
        return result
