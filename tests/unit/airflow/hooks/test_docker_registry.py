"""The registry client's parsing and its answers to broken registries (no service: a registry that
sends what a real one never does is played by a loopback HTTP server that sends exactly that)."""

from __future__ import annotations

import json
import threading
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Iterator

import pytest
from traceladder.airflow.hooks.docker_registry import (
    ImageRef,
    ImageReferenceError,
    RegistryAuthError,
    RegistryClient,
    RegistryResponseError,
    RegistryUnreachableError,
    RegistryError,
    _challenge,
    _created,
    _next_link,
    candidates_between,
    registry_base_url,
)

pytestmark = pytest.mark.triage


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:5000/team/runner:nightly-20261201", ("127.0.0.1:5000", "team/runner", "nightly-20261201")),
        ("localhost/runner", ("localhost", "runner", "latest")),
        ("reg.example.com/a/b@sha256:" + "a" * 64, ("reg.example.com", "a/b", "sha256:" + "a" * 64)),
        ("ubuntu:24.04", ("docker.io", "library/ubuntu", "24.04")),
        ("rocm/primus:v25.9", ("docker.io", "rocm/primus", "v25.9")),
    ],
)
def test_image_reference_split_as_docker_reads_it(text: str, expected: tuple[str, str, str]) -> None:
    ref = ImageRef.parse(text)
    assert (ref.registry, ref.repository, ref.reference) == expected


def test_registry_urls_and_credentials_never_in_messages() -> None:
    assert registry_base_url("127.0.0.1:5000") == ("http://127.0.0.1:5000", "127.0.0.1:5000")
    assert registry_base_url("localhost:5000") == ("http://localhost:5000", "localhost:5000")
    assert registry_base_url("reg.example.com") == ("https://reg.example.com", "reg.example.com")
    assert registry_base_url("docker.io") == ("https://registry-1.docker.io", "registry-1.docker.io")
    with pytest.raises(ImageReferenceError) as with_password:
        registry_base_url("https://bob:hunter2@reg.example.com")
    assert "hunter2" not in str(with_password.value) and "bob" not in str(with_password.value)


def test_challenge_link_and_created_parsing() -> None:
    scheme, params = _challenge(
        'Bearer realm="https://auth.example.com/token",service="registry.example.com",scope="repository:a/b:pull,push"'
    )
    assert scheme == "bearer"
    assert params == {
        "realm": "https://auth.example.com/token",
        "service": "registry.example.com",
        "scope": "repository:a/b:pull,push",
    }
    assert _challenge('Basic realm="x"') == ("basic", {"realm": "x"})
    assert _next_link('</v2/a/tags/list?n=2&last=b>; rel="next"') == "/v2/a/tags/list?n=2&last=b"
    assert _next_link('<https://x/prev>; rel="prev", <https://x/next>; rel=next') == "https://x/next"
    assert _next_link(None) is None
    assert _created("2026-12-01T02:00:00.123456789Z") == datetime(2026, 12, 1, 2, 0, 0, 123456, tzinfo=timezone.utc)
    assert _created("2026-12-01T02:00:00+01:00") == datetime(2026, 12, 1, 1, 0, tzinfo=timezone.utc)
    assert _created("yesterday") is None and _created(None) is None


Route = Callable[[BaseHTTPRequestHandler], tuple[int, dict[str, str], bytes]]


@pytest.fixture
def broken_registry() -> Iterator[Callable[[Route], str]]:
    """A loopback HTTP server answering every GET with ``route(handler)``; yields a starter."""
    servers: list[ThreadingHTTPServer] = []

    def start(route: Route) -> str:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                status, headers, body = route(self)
                self.send_response(status)
                for name, value in {"Content-Length": str(len(body)), **headers}.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_malformed_json_is_one_line_naming_host_and_repository(broken_registry) -> None:
    host = broken_registry(lambda h: (200, {"Content-Type": "application/json"}, b"{not json"))
    with pytest.raises(RegistryResponseError) as malformed:
        RegistryClient(host).tags("team/runner")
    assert str(malformed.value) == f"registry {host}, repository team/runner: the tags list is not JSON"


def test_a_link_header_that_loops_or_leaves_http_is_refused(broken_registry) -> None:
    page = json.dumps({"name": "r", "tags": ["a"]}).encode()
    looping = broken_registry(lambda h: (200, {"Link": '</v2/r/tags/list?n=1&last=a>; rel="next"'}, page))
    with pytest.raises(RegistryResponseError, match="Link header loops"):
        RegistryClient(looping).tags("r")
    to_file = broken_registry(lambda h: (200, {"Link": '<file:///etc/passwd>; rel="next"'}, page))
    with pytest.raises(RegistryResponseError, match=r"sent a non-HTTP URL \(file:\), not followed"):
        RegistryClient(to_file).tags("r")


def test_a_redirect_to_another_host_drops_the_credentials(broken_registry) -> None:
    seen: dict[str, str | None] = {}

    def storage(h: BaseHTTPRequestHandler) -> tuple[int, dict[str, str], bytes]:
        seen["authorization"] = h.headers.get("Authorization")
        return 200, {}, json.dumps({"name": "r", "tags": ["x"]}).encode()

    # "localhost" and "127.0.0.1" are different hosts to the client, the same socket to the test
    storage_port = broken_registry(storage).split(":")[1]

    def registry(h: BaseHTTPRequestHandler) -> tuple[int, dict[str, str], bytes]:
        if h.headers.get("Authorization") is None:
            return 401, {"WWW-Authenticate": 'Basic realm="r"'}, b""
        return 307, {"Location": f"http://localhost:{storage_port}/elsewhere"}, b""

    host = broken_registry(registry)
    assert RegistryClient(host, username="u", password="secret").tags("r") == ["x"]
    assert seen == {"authorization": None}


def test_tags_follow_the_link_header_page_by_page(broken_registry) -> None:
    """A registry that paginates as the spec says (``n``, ``last``, ``Link: <...>; rel="next"``)."""
    tags = sorted(f"nightly-202612{day:02d}" for day in range(1, 8))
    pages: list[str] = []

    def paginating(h: BaseHTTPRequestHandler) -> tuple[int, dict[str, str], bytes]:
        from urllib.parse import parse_qs, urlsplit

        pages.append(h.path)
        query = {k: v[0] for k, v in parse_qs(urlsplit(h.path).query).items()}
        rest = [t for t in tags if t > query.get("last", "")]
        n = int(query.get("n", len(rest)))
        page, more = rest[:n], rest[n:]
        headers = {"Link": f'</v2/r/tags/list?n={n}&last={page[-1]}>; rel="next"'} if more else {}
        return 200, headers, json.dumps({"name": "r", "tags": page}).encode()

    assert RegistryClient(broken_registry(paginating)).tags("r", page_size=3) == tags
    assert pages == [
        "/v2/r/tags/list?n=3",
        "/v2/r/tags/list?n=3&last=nightly-20261203",
        "/v2/r/tags/list?n=3&last=nightly-20261206",
    ]


def test_denied_and_not_a_registry_are_one_line(broken_registry) -> None:
    denied = broken_registry(lambda h: (403, {}, b'{"errors":[{"code":"DENIED"}]}'))
    with pytest.raises(RegistryAuthError) as forbidden:
        RegistryClient(denied, username="u", password="p").tags("team/runner")
    assert str(forbidden.value) == f"registry {denied}, repository team/runner: 403 access denied"
    web_server = broken_registry(lambda h: (404, {}, b"<html>not found</html>"))
    with pytest.raises(RegistryResponseError) as not_v2:
        RegistryClient(web_server).tags_between("team/runner", "a", "b")
    assert str(not_v2.value) == (
        f"registry {web_server}: does not implement the Docker Registry HTTP API v2 (404 on /v2/)"
    )


def test_a_range_needs_one_repository() -> None:
    with pytest.raises(RegistryError) as two:
        candidates_between("127.0.0.1:5000/team/runner:a", "127.0.0.1:5000/team/other:b")
    assert str(two.value) == (
        "registry 127.0.0.1:5000, repository team/runner: "
        "the bad image is in 127.0.0.1:5000/team/other: a range needs both in one repository"
    )


def test_a_realm_with_credentials_in_its_url_is_named_by_host_only(broken_registry) -> None:
    def registry(h: BaseHTTPRequestHandler) -> tuple[int, dict[str, str], bytes]:
        return 401, {"WWW-Authenticate": 'Bearer realm="http://bob:hunter2@127.0.0.1:9/token",service="s"'}, b""

    host = broken_registry(registry)
    with pytest.raises(RegistryUnreachableError) as down:
        RegistryClient(host).tags("r")
    assert str(down.value) == f"registry {host}, repository r: unreachable at 127.0.0.1:9 (connection refused)"


def test_a_manifest_is_read_as_an_index_or_an_image_manifest() -> None:
    from traceladder.airflow.hooks.docker_registry import (
        DOCKER_MANIFEST,
        OCI_INDEX,
        PlatformEntry,
        RegistryManifest,
    )

    amd64, arm64 = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    index = {
        "manifests": [
            {"digest": arm64, "platform": {"os": "linux", "architecture": "arm64"}},
            {"digest": "sha256:short", "platform": {"os": "linux", "architecture": "amd64"}},
            {"digest": amd64, "platform": {"os": "linux", "architecture": "amd64"}},
            {"digest": "sha256:" + "c" * 64, "platform": {"os": "unknown", "architecture": "unknown"}},
            "not an entry",
        ]
    }
    for media_type in (OCI_INDEX, None):  # an index by its type, or by its list where no type is said
        read = RegistryManifest.parse(index, media_type)
        assert read.entries is not None and len(read.entries) == 4 and read.config_digest is None
        assert read.entries[1] == PlatformEntry("linux/amd64", None)  # not a sha256 digest
        assert read.platform_digest() == amd64
        assert read.platforms() == ["linux/amd64", "linux/arm64", "unknown/unknown"]
    no_amd64 = RegistryManifest.parse({"manifests": [{"digest": arm64, "platform": {"os": "linux"}}]}, OCI_INDEX)
    assert no_amd64.platform_digest() is None and no_amd64.platforms() == ["linux/?"]
    image = RegistryManifest.parse({"config": {"digest": amd64}, "manifests": []}, DOCKER_MANIFEST)
    assert image == RegistryManifest(DOCKER_MANIFEST, None, amd64)
    assert RegistryManifest.parse({"config": {"digest": "md5:x"}}, None).config_digest is None
