"""A Docker registry's HTTP API v2 client, RegistryHook's (registry.py). For a triage's image
candidates: the tags of a ladder's image repository between the last good run's image and the
newest, read from its registry through the Docker Registry HTTP API v2, each pinned by its
manifest digest and ordered by its config's ``created``.

The calls, as distribution's ``docs/spec/api.md`` states them:

- ``GET /v2/``: the registry speaks v2 (and tells how to authenticate, in a 401's challenge);
- ``GET /v2/<name>/tags/list[?n=<page>]``: the tags, one page at a time, the next page's URL in
  the ``Link: <url>; rel="next"`` header;
- ``GET /v2/<name>/manifests/<tag or digest>`` with an ``Accept`` of the four manifest types: a
  Docker v2 schema 2 or OCI image manifest, or a manifest list / OCI index, from which the
  linux/amd64 entry is taken. The digest is the ``Docker-Content-Digest`` header, else the sha256
  of the body; content fetched by digest is checked against that digest;
- ``GET /v2/<name>/blobs/<config digest>``: the image config, whose ``created`` orders the tags.

Authentication follows the 401's ``WWW-Authenticate`` challenge: ``Basic`` with the username and
password given, or ``Bearer realm=...,service=...,scope=...``: a token from the realm (anonymous
or with those credentials), cached per scope. A token given outright is sent as ``Bearer``.
Credentials come from the caller (the Airflow hook reads them from a connection); no message
holds one. Redirects are followed by hand so the ``Authorization`` header never leaves the host.

Every failure is a one-line :class:`RegistryError` naming the registry's host and the repository.
A tag that cannot run (its manifest or config is gone) is no error: its candidate carries the
reason, so the bisection skips it as ``git bisect skip`` does. Standard library only.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import http.client
import json
import re
import socket
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any, Mapping

from traceladder.core.codec import JSONObject, JSONValue
from traceladder.core.errors import TraceladderError, first_line

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
IMAGE_MANIFESTS = (DOCKER_MANIFEST, OCI_MANIFEST)
MANIFEST_INDEXES = (DOCKER_MANIFEST_LIST, OCI_INDEX)
#: the platform a ladder's image runs on
PLATFORM = ("linux", "amd64")

#: a manifest or config larger than this is not one (a layer would be): refuse rather than read it
MAX_DOCUMENT_BYTES = 16 * 1024 * 1024
#: a tags list longer than this many pages is a registry looping on its Link header
MAX_TAG_PAGES = 10_000
MAX_REDIRECTS = 5
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_LOOPBACK = re.compile(r"^(localhost|127(\.\d{1,3}){3}|\[::1\])(:\d+)?$")


class ImageReferenceError(TraceladderError, ValueError):
    """An image reference or registry address that cannot be read (bad input, not a registry's fault)."""


class RegistryError(TraceladderError):
    """A registry's failure, one line naming its host (and the repository, when there is one)."""

    def __init__(self, host: str, repository: str | None, what: str) -> None:
        where = f"registry {host}" + (f", repository {repository}" if repository else "")
        super().__init__(f"{where}: {what}")
        self.host = host
        self.repository = repository


class RegistryUnreachableError(RegistryError):
    """No HTTP answer: connection refused, timeout, DNS, TLS."""


class RegistryAuthError(RegistryError):
    """401 (no or refused credentials) or 403 (access denied)."""


class RepositoryNotFoundError(RegistryError):
    """404 ``NAME_UNKNOWN``: the registry has no such repository."""


class RegistryResponseError(RegistryError):
    """An answer that is not what the API promises: malformed JSON, a wrong digest, a status the
    call does not expect, a manifest type it cannot read."""


@dataclass(frozen=True)
class ImageRef:
    """An image reference split as Docker reads it: ``[registry/]repository[:tag][@digest]``."""

    registry: str
    repository: str
    reference: str  # a tag or a sha256 digest

    @classmethod
    def parse(cls, text: str) -> ImageRef:
        """``127.0.0.1:5000/team/runner:nightly-20261201`` or ``...@sha256:<hex>``. The first
        component is the registry when it has a dot or a port or is ``localhost``; otherwise the
        registry is Docker Hub (and a one-component name is under ``library/``)."""
        rest = text.strip()
        if not rest or any(c.isspace() for c in rest):
            raise ImageReferenceError(f"image reference {text!r}: expected [registry/]repository[:tag|@digest]")
        reference = "latest"
        if "@" in rest:
            rest, reference = rest.split("@", 1)
        elif ":" in rest.rsplit("/", 1)[-1]:
            rest, reference = rest.rsplit(":", 1)
        first, _, remainder = rest.partition("/")
        if remainder and ("." in first or ":" in first or first == "localhost"):
            registry, repository = first, remainder
        else:
            registry, repository = "docker.io", rest if "/" in rest else f"library/{rest}"
        if not repository or not reference:
            raise ImageReferenceError(f"image reference {text!r}: expected [registry/]repository[:tag|@digest]")
        return cls(registry, repository, reference)


@dataclass(frozen=True)
class ImageCandidate:
    """One image of the repository: the tags that name its manifest, the manifest's digest, its
    config's ``created`` time; or the reason a bisection must skip it (its manifest or config is
    gone, it has no linux/amd64 image, its config has no creation time)."""

    tags: tuple[str, ...]
    digest: str | None  # the manifest (or index) digest the tag resolves to: what RepoDigests shows
    pinned: str | None  # "<registry>/<repository>@<digest>", what a run pulls
    created: datetime | None
    skip_reason: str | None = None
    platform_digest: str | None = None  # the linux/amd64 manifest, when ``digest`` is an index's

    @property
    def name(self) -> str:
        """How a message names it: its first tag, else its digest."""
        return self.tags[0] if self.tags else (self.digest or "?")


@dataclass(frozen=True)
class ImageRange:
    """The candidates from the good image to the bad one, in creation order from the good's toward
    the bad's (``candidates[0]`` is the good, ``candidates[-1]`` the bad); tags sharing a manifest
    are one candidate. ``unplaced`` holds the tags that could not be placed in that order, each
    with its ``skip_reason``. When an end is unusable, ``candidates`` is empty: see ``reason``."""

    good: ImageCandidate
    bad: ImageCandidate
    candidates: tuple[ImageCandidate, ...]
    unplaced: tuple[ImageCandidate, ...]

    @property
    def reason(self) -> str | None:
        """Why there is no range (an end's image is gone), or None."""
        for label, end in (("good", self.good), ("bad", self.bad)):
            if end.skip_reason:
                return f"the {label} image {end.name}: {end.skip_reason}"
        return None


@dataclass(frozen=True)
class PlatformEntry:
    """One entry of a manifest list or OCI index: the platform its image is for
    (``os/architecture``, ``?`` for a part the entry does not say; attestations say
    ``unknown/unknown``) and its manifest's digest (None unless a sha256 digest)."""

    platform: str
    digest: str | None

    @classmethod
    def parse(cls, entry: JSONObject) -> PlatformEntry:
        platform = entry.get("platform")
        if not isinstance(platform, dict):
            platform = {}
        digest = entry.get("digest")
        return cls(
            f"{platform.get('os', '?')}/{platform.get('architecture', '?')}",
            digest if isinstance(digest, str) and _DIGEST.match(digest) else None,
        )


@dataclass(frozen=True)
class RegistryManifest:
    """A manifest as far as this client reads it: its media type (the body's ``mediaType``, else
    the answer's Content-Type; None when neither says), and either an index's entries (a Docker
    manifest list or an OCI index: ``entries``) or an image manifest's config blob digest
    (``config_digest``, None unless a sha256 digest)."""

    media_type: str | None
    entries: tuple[PlatformEntry, ...] | None  # None: an image manifest, not an index
    config_digest: str | None

    @classmethod
    def parse(cls, document: JSONObject, media_type: str | None) -> RegistryManifest:
        """``document`` is the manifest's JSON; an index is one by its media type or, when no
        media type is said, by its ``manifests`` list."""
        if media_type in MANIFEST_INDEXES or (media_type is None and "manifests" in document):
            listed = document.get("manifests")
            items = listed if isinstance(listed, list) else []
            entries = tuple(PlatformEntry.parse(item) for item in items if isinstance(item, dict))
            return cls(media_type, entries, None)
        config = document.get("config")
        digest = config.get("digest") if isinstance(config, dict) else None
        return cls(media_type, None, digest if isinstance(digest, str) and _DIGEST.match(digest) else None)

    def platform_digest(self) -> str | None:
        """The digest of an index's linux/amd64 manifest."""
        wanted = "/".join(PLATFORM)
        return next((e.digest for e in self.entries or () if e.platform == wanted and e.digest), None)

    def platforms(self) -> list[str]:
        """The platforms an index has images for, sorted, each once."""
        return sorted({e.platform for e in self.entries or ()})


@dataclass(frozen=True)
class _Response:
    status: int
    headers: Mapping[str, str]
    body: bytes
    url: str

    def header(self, name: str) -> str | None:
        wanted = name.lower()
        return next((v for k, v in self.headers.items() if k.lower() == wanted), None)

    def error_codes(self) -> list[str]:
        """The ``errors[].code`` of a registry's error body (empty when it has none)."""
        try:
            errors = json.loads(self.body).get("errors") or []
            return [str(e.get("code", "")) for e in errors if isinstance(e, dict)]
        except (ValueError, AttributeError):
            return []


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Redirects come back as responses: the client follows them itself, without credentials."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def registry_base_url(registry: str) -> tuple[str, str]:
    """``(base URL, host[:port])`` of a registry given as ``host[:port]`` or a URL. A bare loopback
    host speaks plain HTTP (as Docker treats loopback registries as insecure); any other bare host
    HTTPS. Docker Hub's ``docker.io`` is served from ``registry-1.docker.io``."""
    text = registry.strip().rstrip("/")
    if "://" not in text:
        text = ("http://" if _LOOPBACK.match(text) else "https://") + text
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ImageReferenceError(f"registry {registry!r}: expected host[:port] or an http(s) URL")
    if parts.username or parts.password:
        # never echo it: the URL holds a credential
        raise ImageReferenceError("registry URL: credentials belong in the connection, not the URL")
    host = parts.netloc
    if host == "docker.io":
        host = "registry-1.docker.io"
    return f"{parts.scheme}://{host}{parts.path}", host


def _challenge(header: str) -> tuple[str, dict[str, str]]:
    """``Bearer realm="...",service="...",scope="a,b"`` -> ("bearer", {...}); quoted values may hold
    commas."""
    scheme, _, params = header.strip().partition(" ")
    pairs = re.findall(r'([A-Za-z_]+)\s*=\s*(?:"([^"]*)"|([^,\s]*))', params)
    return scheme.lower(), {key.lower(): quoted or bare for key, quoted, bare in pairs}


def _next_link(header: str | None) -> str | None:
    """The URL of ``Link: <url>; rel="next"`` (RFC 5988), or None."""
    for part in (header or "").split(","):
        match = re.match(r"\s*<([^>]*)>\s*;(.*)", part)
        if match and re.search(r'rel\s*=\s*"?next"?', match.group(2)):
            return match.group(1)
    return None


def _created(value: JSONValue) -> datetime | None:
    """An image config's RFC 3339 ``created`` (nanoseconds trimmed to micro), None when absent or
    unreadable."""
    if not isinstance(value, str):
        return None
    text = re.sub(r"(\.\d{6})\d+", r"\1", value.strip()).replace("Z", "+00:00")
    try:
        created = datetime.fromisoformat(text)
    except ValueError:
        return None
    return created if created.tzinfo else created.replace(tzinfo=timezone.utc)


class RegistryClient:
    """A read-only Docker Registry HTTP API v2 client for one registry.

    ``username``/``password`` answer a Basic challenge or authenticate a Bearer token request;
    ``token`` is a bearer token sent outright. Nothing here writes to the registry."""

    def __init__(
        self,
        registry: str,
        *,
        username: str | None = None,
        password: str | None = None,
        token: str | None = None,
        timeout_s: float = 30.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.base_url, self.host = registry_base_url(registry)
        self._credentials = (username, password or "") if username else None
        self._static_token = token or None
        self._timeout_s = timeout_s
        # ssl_context: a private CA's bundle, for a registry whose certificate the system does not trust
        self._opener = (
            _OPENER
            if ssl_context is None
            else urllib.request.build_opener(_NoRedirect, urllib.request.HTTPSHandler(context=ssl_context))
        )
        self._basic = False  # the registry asked for Basic: send it on every request
        self._tokens: dict[str, str] = {}  # bearer tokens by scope
        self._configs: dict[str, tuple[datetime | None, str | None]] = {}  # created by config digest

    # ---- the HTTP exchange --------------------------------------------------------------------
    def _send(self, method: str, url: str, headers: dict[str, str], repository: str | None) -> _Response:
        for _ in range(MAX_REDIRECTS + 1):
            parts = urllib.parse.urlsplit(url)
            if parts.scheme not in ("http", "https"):
                # a Link, a redirect or a token realm comes from the server: no file: or other scheme
                raise RegistryResponseError(
                    self.host, repository, f"sent a non-HTTP URL ({parts.scheme}:), not followed"
                )
            if "@" in parts.netloc:  # a user:password@ the server put in a URL is never sent
                url = urllib.parse.urlunsplit(parts._replace(netloc=_host_of(url)))
            request = urllib.request.Request(url, headers=headers, method=method)  # noqa: S310 (checked above)
            try:
                with self._opener.open(request, timeout=self._timeout_s) as answer:
                    response = _Response(answer.status, dict(answer.headers), self._read(answer, repository), url)
            except urllib.error.HTTPError as answer:
                response = _Response(answer.code, dict(answer.headers or {}), self._read(answer, repository), url)
            except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
                reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
                target = _host_of(url)
                raise RegistryUnreachableError(
                    self.host, repository, f"unreachable at {target} ({_reason(reason)})"
                ) from None
            location = response.header("Location")
            if response.status not in (301, 302, 303, 307, 308) or not location:
                return response
            next_url = urllib.parse.urljoin(url, location)
            if urllib.parse.urlsplit(next_url).netloc != urllib.parse.urlsplit(url).netloc:
                headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
            url = next_url
        raise RegistryResponseError(self.host, repository, f"more than {MAX_REDIRECTS} redirects")

    def _read(self, answer: Any, repository: str | None) -> bytes:
        try:
            body: bytes = answer.read(MAX_DOCUMENT_BYTES + 1)
        except (OSError, http.client.HTTPException) as exc:
            raise RegistryUnreachableError(self.host, repository, f"answer cut off ({_reason(exc)})") from None
        if len(body) > MAX_DOCUMENT_BYTES:
            raise RegistryResponseError(self.host, repository, f"an answer over {MAX_DOCUMENT_BYTES} bytes")
        return body

    def _get(self, path_or_url: str, repository: str | None, accept: str = "application/json") -> _Response:
        """GET with the authentication the registry asks for; 401 and 403 raise
        :class:`RegistryAuthError`, any other status comes back to the caller."""
        url = urllib.parse.urljoin(self.base_url + "/", path_or_url)
        scope = f"repository:{repository}:pull" if repository else ""
        response = self._send("GET", url, self._headers(accept, scope), repository)
        if response.status == 401 and not self._static_token:
            scheme, params = _challenge(response.header("WWW-Authenticate") or "")
            if scheme == "basic":
                if not self._credentials:
                    raise RegistryAuthError(self.host, repository, "needs credentials (Basic auth) and none were given")
                self._basic = True
            elif scheme == "bearer" and params.get("realm"):
                scope = params.get("scope") or scope
                self._tokens[scope] = self._fetch_token(params, scope, repository)
            else:
                raise RegistryAuthError(self.host, repository, "401 with no challenge this client can answer")
            response = self._send("GET", url, self._headers(accept, scope), repository)
        if response.status == 401:
            if self._static_token:
                refused = "the token was refused"
            elif self._credentials:
                refused = "the credentials were refused"
            else:
                refused = "an anonymous token is not enough"
            raise RegistryAuthError(self.host, repository, f"401 unauthorized: {refused}")
        if response.status == 403:
            raise RegistryAuthError(self.host, repository, "403 access denied")
        return response

    def _headers(self, accept: str, scope: str) -> dict[str, str]:
        headers = {"Accept": accept, "User-Agent": "traceladder-triage"}
        if self._static_token:
            headers["Authorization"] = f"Bearer {self._static_token}"
        elif scope in self._tokens:
            headers["Authorization"] = f"Bearer {self._tokens[scope]}"
        elif self._basic and self._credentials:
            pair = f"{self._credentials[0]}:{self._credentials[1]}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")
        return headers

    def _fetch_token(self, challenge: Mapping[str, str], scope: str, repository: str | None) -> str:
        """A bearer token from the challenge's realm for ``scope`` (the spec's token flow)."""
        query = {"service": challenge.get("service", "")}
        if scope:
            query["scope"] = scope
        url = challenge["realm"] + ("&" if "?" in challenge["realm"] else "?") + urllib.parse.urlencode(query)
        headers = {"Accept": "application/json", "User-Agent": "traceladder-triage"}
        if self._credentials:
            pair = f"{self._credentials[0]}:{self._credentials[1]}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")
        realm_host = _host_of(challenge["realm"])
        response = self._send("GET", url, headers, repository)
        if response.status in (401, 403):
            given = "the credentials" if self._credentials else "an anonymous token request"
            raise RegistryAuthError(
                self.host, repository, f"the token server {realm_host} refused {given} ({response.status})"
            )
        if response.status != 200:
            raise RegistryResponseError(
                self.host, repository, f"the token server {realm_host} answered {response.status}"
            )
        document = self._json(response, repository, f"the token from {realm_host}")
        token = document.get("token") or document.get("access_token")
        if not isinstance(token, str) or not token:
            raise RegistryResponseError(self.host, repository, f"the token server {realm_host} sent no token")
        return token

    def _json(self, response: _Response, repository: str | None, what: str) -> JSONObject:
        try:
            document = json.loads(response.body)
        except ValueError:
            raise RegistryResponseError(self.host, repository, f"{what} is not JSON") from None
        if not isinstance(document, dict):
            raise RegistryResponseError(self.host, repository, f"{what} is not a JSON object")
        return document

    def _unexpected(self, response: _Response, repository: str | None, what: str) -> RegistryError:
        codes = response.error_codes()
        if response.status == 404 and "NAME_UNKNOWN" in codes:
            return RepositoryNotFoundError(self.host, repository, "no such repository (404 NAME_UNKNOWN)")
        detail = f" {','.join(codes)}" if codes else ""
        return RegistryResponseError(self.host, repository, f"{what}: unexpected {response.status}{detail}")

    # ---- the API ------------------------------------------------------------------------------
    def check(self) -> None:
        """``GET /v2/``: the registry answers and speaks v2 (authenticating if it asks to)."""
        response = self._get("/v2/", None)
        if response.status == 404:
            raise RegistryResponseError(
                self.host, None, "does not implement the Docker Registry HTTP API v2 (404 on /v2/)"
            )
        if response.status != 200:
            raise self._unexpected(response, None, "GET /v2/")

    def tags(self, repository: str, *, page_size: int | None = None) -> list[str]:
        """Every tag of the repository, following the ``Link`` header page by page (``n`` =
        ``page_size`` when given; the registry's own page size otherwise)."""
        url: str | None = f"/v2/{repository}/tags/list" + (f"?n={int(page_size)}" if page_size else "")
        tags: list[str] = []
        seen: set[str] = set()
        while url is not None:
            if url in seen or len(seen) >= MAX_TAG_PAGES:
                raise RegistryResponseError(self.host, repository, f"the tags list's Link header loops at {url}")
            seen.add(url)
            response = self._get(url, repository)
            if response.status != 200:
                raise self._unexpected(response, repository, "GET tags/list")
            page = self._json(response, repository, "the tags list").get("tags") or []
            if not isinstance(page, list) or not all(isinstance(tag, str) for tag in page):
                raise RegistryResponseError(self.host, repository, "the tags list's 'tags' is not a list of names")
            tags.extend(str(tag) for tag in page)
            link = _next_link(response.header("Link"))
            url = urllib.parse.urljoin(response.url, link) if link else None
        return tags

    def image(self, repository: str, reference: str) -> ImageCandidate:
        """The image a tag or digest names: its manifest digest and its config's creation time, or
        the reason it cannot run (its manifest or config is gone, ...). A tag appears in ``tags``."""
        tags = () if _DIGEST.match(reference) else (reference,)
        manifest = self._manifest(repository, reference)
        if isinstance(manifest, str):
            return ImageCandidate(tags, reference if not tags else None, None, None, manifest)
        digest, document = manifest
        pinned = f"{self.host}/{repository}@{digest}"
        platform_digest = None
        if document.entries is not None:
            platform_digest = document.platform_digest()
            if platform_digest is None:
                platforms = document.platforms()
                missing = f"no {'/'.join(PLATFORM)} image in its index (has {', '.join(platforms) or 'none'})"
                return ImageCandidate(tags, digest, pinned, None, missing)
            child = self._manifest(repository, platform_digest)
            if isinstance(child, str):
                return ImageCandidate(tags, digest, pinned, None, f"its {'/'.join(PLATFORM)} {child}", platform_digest)
            document = child[1]
        config_digest = document.config_digest
        if config_digest is None:
            return ImageCandidate(tags, digest, pinned, None, "its manifest names no sha256 config", platform_digest)
        created, reason = self._config_created(repository, config_digest)
        return ImageCandidate(tags, digest, pinned, created, reason, platform_digest)

    def _manifest(self, repository: str, reference: str) -> tuple[str, RegistryManifest] | str:
        """(digest, manifest) or the reason there is none to run."""
        accept = ", ".join((*IMAGE_MANIFESTS, *MANIFEST_INDEXES))
        response = self._get(f"/v2/{repository}/manifests/{reference}", repository, accept)
        codes = response.error_codes()
        if response.status == 404 and "NAME_UNKNOWN" not in codes:
            return f"manifest {reference} is gone from the registry ({' '.join(['404', *codes])})"
        if response.status != 200:
            raise self._unexpected(response, repository, f"GET manifest {reference}")
        body_digest = "sha256:" + hashlib.sha256(response.body).hexdigest()
        if _DIGEST.match(reference) and body_digest != reference:
            raise RegistryResponseError(self.host, repository, f"manifest {reference} has digest {body_digest}")
        digest = response.header("Docker-Content-Digest") or body_digest
        document = self._json(response, repository, f"manifest {reference}")
        media_type = document.get("mediaType") or (response.header("Content-Type") or "").split(";")[0].strip()
        if media_type and media_type not in (*IMAGE_MANIFESTS, *MANIFEST_INDEXES):
            return f"manifest {reference} is of a type this client does not read ({media_type})"
        return digest, RegistryManifest.parse(document, str(media_type) if media_type else None)

    def _config_created(self, repository: str, config_digest: str) -> tuple[datetime | None, str | None]:
        """The config's ``created`` time, or the reason there is none (cached by digest)."""
        if config_digest in self._configs:
            return self._configs[config_digest]
        response = self._get(f"/v2/{repository}/blobs/{config_digest}", repository)
        if response.status == 404:
            codes = ",".join(response.error_codes()) or "404"
            result: tuple[datetime | None, str | None] = (
                None,
                f"its config blob {config_digest} is gone from the registry ({codes})",
            )
        elif response.status != 200:
            raise self._unexpected(response, repository, f"GET config blob {config_digest}")
        elif "sha256:" + hashlib.sha256(response.body).hexdigest() != config_digest:
            raise RegistryResponseError(self.host, repository, f"config blob {config_digest} does not match its digest")
        else:
            created = _created(self._json(response, repository, f"config blob {config_digest}").get("created"))
            result = (created, None if created else f"its config {config_digest} has no readable 'created' time")
        self._configs[config_digest] = result
        return result

    def tags_between(
        self, repository: str, good: str, bad: str, *, pattern: str | None = None, page_size: int | None = None
    ) -> ImageRange:
        """The repository's images from ``good`` to ``bad`` (each a tag or a ``sha256:`` digest),
        ordered by their config's ``created`` time from the good's toward the bad's, both ends
        included. ``pattern`` (a glob, e.g. ``nightly-*``) keeps the tags it matches; the ends are
        kept whatever their names. Tags that resolve to one manifest are one candidate."""
        self.check()
        names = [
            t for t in self.tags(repository, page_size=page_size) if pattern is None or fnmatch.fnmatchcase(t, pattern)
        ]
        by_digest: dict[str, ImageCandidate] = {}
        unplaced: list[ImageCandidate] = []
        for tag in sorted(set(names) | {ref for ref in (good, bad) if not _DIGEST.match(ref)}):
            image = self.image(repository, tag)
            if image.skip_reason or image.digest is None or image.created is None:
                unplaced.append(image)
            elif image.digest in by_digest:
                by_digest[image.digest] = replace(by_digest[image.digest], tags=(*by_digest[image.digest].tags, tag))
            else:
                by_digest[image.digest] = image
        ends = [self._end(repository, ref, by_digest, unplaced) for ref in (good, bad)]
        good_image, bad_image = ends
        unplaced = [u for u in unplaced if u not in ends]
        if good_image.created is None or bad_image.created is None:
            return ImageRange(good_image, bad_image, (), tuple(unplaced))
        low, high = sorted((good_image.created, bad_image.created))
        middle = [
            image
            for digest, image in by_digest.items()
            if digest not in (good_image.digest, bad_image.digest) and image.created and low <= image.created <= high
        ]
        middle.sort(key=lambda image: (image.created, image.tags), reverse=good_image.created > bad_image.created)
        ordered = (good_image, *middle) + ((bad_image,) if bad_image.digest != good_image.digest else ())
        return ImageRange(good_image, bad_image, ordered, tuple(unplaced))

    def _end(
        self, repository: str, reference: str, by_digest: Mapping[str, ImageCandidate], unplaced: list[ImageCandidate]
    ) -> ImageCandidate:
        """An end of the range: its candidate among the tags, or (a digest no tag names) fetched."""
        for image in (*by_digest.values(), *unplaced):
            if reference in image.tags or reference == image.digest:
                return image
        return self.image(repository, reference)


def _host_of(url: str) -> str:
    """``host[:port]`` of a URL the server sent, without any ``user:password@`` it may carry."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or "?"
    host = f"[{host}]" if ":" in host else host
    return f"{host}:{parts.port}" if parts.port else host


def _reason(exc: object) -> str:
    """A socket error's words (``connection refused``), without the ``[Errno 111]``."""
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "timed out"
    text = first_line(exc) if isinstance(exc, BaseException) else str(exc)
    return re.sub(r"^\[Errno -?\d+\]\s*", "", text).strip().lower() or type(exc).__name__


def candidates_between(
    good_image: str,
    bad_image: str,
    *,
    username: str | None = None,
    password: str | None = None,
    token: str | None = None,
    pattern: str | None = None,
    page_size: int | None = None,
    timeout_s: float = 30.0,
) -> ImageRange:
    """The image candidates between two runs' images, each named as provenance records it (the
    daemon's ``RepoDigests[0]``, ``host/repository@sha256:...``) or by tag
    (``host/repository:tag``). Both must be in one repository of one registry."""
    good, bad = ImageRef.parse(good_image), ImageRef.parse(bad_image)
    if (good.registry, good.repository) != (bad.registry, bad.repository):
        raise RegistryError(
            registry_base_url(good.registry)[1],
            good.repository,
            f"the bad image is in {bad.registry}/{bad.repository}: a range needs both in one repository",
        )
    client = RegistryClient(good.registry, username=username, password=password, token=token, timeout_s=timeout_s)
    return client.tags_between(good.repository, good.reference, bad.reference, pattern=pattern, page_size=page_size)
