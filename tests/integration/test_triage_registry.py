"""The triage's image candidates (issue 51, item 4) against a real registry: Debian's
docker-registry on loopback, images pushed by a real Docker Engine under nightly tags whose config
``created`` times the test sets (tests/integration/registry_server.py)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import pytest
from tests.integration.conftest import DockerEngine, docker_cli
from tests.integration.registry_server import (
    TOKEN_SERVICE,
    TokenServer,
    RegistryServer,
    image_archive,
    push_image,
    remove_local,
    start_registry,
    write_htpasswd,
)
from traceladder.core.ports import free_port
from traceladder.airflow.hooks.docker_registry import (
    OCI_INDEX,
    RegistryAuthError,
    RegistryClient,
    RegistryUnreachableError,
    RepositoryNotFoundError,
    candidates_between,
)

# every test starts a real registry; those that push images take dockerd too (marked `docker`)
pytestmark = [pytest.mark.triage, pytest.mark.service]

REPOSITORY = "triage/runner"
USERNAME, PASSWORD = "triage-user", "s3cret-Pa55word"


def _at(day: int, hour: int = 2) -> datetime:
    return datetime(2026, 12, day, hour, 0, 0, 123456, tzinfo=timezone.utc)


# tag -> created. rebuild-20261202b sorts after every nightly by name but was built between the
# 2nd's and the 3rd's nightly: the order must come from `created`, not from the names.
NIGHTLIES = {
    "nightly-20261201": _at(1),
    "nightly-20261202": _at(2),
    "rebuild-20261202b": _at(2, 14),
    "nightly-20261203": _at(3),
    "nightly-20261204": _at(4),
    "nightly-20261205": _at(5),
}
ALIAS = ("latest", "nightly-20261205")  # `latest` names the newest nightly's manifest


@dataclass
class Pushed:
    registry: RegistryServer
    repository: str
    digests: dict[str, str]  # tag -> manifest digest, from `docker inspect`'s RepoDigests
    work: Path


def _push(registry: RegistryServer, repository: str, tags: dict[str, datetime], work: Path) -> dict[str, str]:
    """docker load + docker push each image; its digest as the Docker Engine reports it."""
    digests: dict[str, str] = {}
    for tag, created in tags.items():
        reference = f"{registry.host}/{repository}:{tag}"
        archive = work / f"{repository.replace('/', '_')}-{tag}.tar"
        image_archive(archive, reference, created, content=f"{repository}:{tag} slowdown={len(digests) * 0.05:.2f}")
        docker_cli("load", "-i", str(archive))
        digests[tag] = push_image(reference)
    return digests


@pytest.fixture(scope="module")
def work_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("triage-registry")


@pytest.fixture(scope="module")
def pushed(docker_engine: DockerEngine, open_registry: RegistryServer, work_dir: Path) -> Iterator[Pushed]:
    """The nightlies pushed by dockerd (and `latest` on the newest); removed from dockerd after."""
    try:
        digests = _push(open_registry, REPOSITORY, NIGHTLIES, work_dir)
        latest, newest = (f"{open_registry.host}/{REPOSITORY}:{tag}" for tag in ALIAS)
        docker_cli("tag", newest, latest)
        docker_cli("push", latest)
        yield Pushed(open_registry, REPOSITORY, digests, work_dir)
    finally:
        remove_local(open_registry)


def _api(registry: RegistryServer, method: str, path: str, body: bytes | None = None, **headers: str):
    url = f"{registry.url}{path}"  # http://127.0.0.1:<port>
    request = urllib.request.Request(url, data=body, method=method, headers=headers)  # noqa: S310 (loopback)
    return urllib.request.urlopen(request, timeout=10)  # noqa: S310 (loopback)


@pytest.mark.docker
def test_tags_between_ordered_by_created_with_docker_digests(pushed: Pushed) -> None:
    client = RegistryClient(pushed.registry.host)
    image_range = client.tags_between(pushed.repository, "nightly-20261201", "nightly-20261205")
    assert image_range.reason is None and image_range.unplaced == ()
    assert [c.tags for c in image_range.candidates] == [
        ("nightly-20261201",),
        ("nightly-20261202",),
        ("rebuild-20261202b",),
        ("nightly-20261203",),
        ("nightly-20261204",),
        ALIAS,  # one manifest, two tags: one candidate
    ]
    for candidate in image_range.candidates:
        tag = candidate.tags[-1]
        assert candidate.digest == pushed.digests[tag]
        assert candidate.pinned == f"{pushed.registry.host}/{pushed.repository}@{pushed.digests[tag]}"
        assert candidate.created == NIGHTLIES[tag]
        assert candidate.skip_reason is None and candidate.platform_digest is None
    # the pinned reference is what a run pulls: the Docker Engine resolves it to the same image
    pinned = image_range.candidates[3].pinned
    assert pinned is not None
    docker_cli("pull", pinned)
    ids = {
        docker_cli("inspect", "--format", "{{.Id}}", ref).stdout.strip()
        for ref in (pinned, f"{pushed.registry.host}/{pushed.repository}:nightly-20261203")
    }
    assert len(ids) == 1


@pytest.mark.docker
def test_range_between_a_digest_and_a_tag_either_way(pushed: Pushed) -> None:
    client = RegistryClient(pushed.registry.host)
    good = pushed.digests["nightly-20261202"]
    forward = client.tags_between(pushed.repository, good, "nightly-20261204")
    assert [c.tags for c in forward.candidates] == [
        ("nightly-20261202",),
        ("rebuild-20261202b",),
        ("nightly-20261203",),
        ("nightly-20261204",),
    ]
    assert forward.good.digest == good
    # an improvement triaged from a newer good image back to an older bad one: good first still
    backward = client.tags_between(pushed.repository, "nightly-20261204", good)
    assert [c.name for c in backward.candidates] == [
        "nightly-20261204",
        "nightly-20261203",
        "rebuild-20261202b",
        "nightly-20261202",
    ]
    # as provenance names them: RepoDigests[0] of each run's image
    from_provenance = candidates_between(
        f"{pushed.registry.host}/{pushed.repository}@{good}",
        f"{pushed.registry.host}/{pushed.repository}:nightly-20261204",
    )
    assert from_provenance.candidates == forward.candidates
    only_nightlies = client.tags_between(pushed.repository, good, "nightly-20261204", pattern="nightly-*")
    assert [c.name for c in only_nightlies.candidates] == ["nightly-20261202", "nightly-20261203", "nightly-20261204"]


@pytest.mark.docker
def test_all_tags_whatever_the_page_size(pushed: Pushed) -> None:
    """Debian's docker-registry 2.8.2 ignores ``n`` on tags/list: it answers every tag, unsorted,
    with no ``Link`` (tag pagination came with distribution 3.0). The client gets them all either
    way; its following of ``Link`` pages is tested against a paginating server in
    tests/unit/triage/test_registry.py."""
    with _api(pushed.registry, "GET", f"/v2/{pushed.repository}/tags/list?n=2") as answer:
        first_page = json.loads(answer.read())["tags"]
        link = answer.headers.get("Link")
    assert (len(first_page), link is not None) in ((2, True), (len(NIGHTLIES) + 1, False))
    client = RegistryClient(pushed.registry.host)
    every = sorted([*NIGHTLIES, ALIAS[0]])
    assert sorted(client.tags(pushed.repository, page_size=2)) == every
    assert sorted(client.tags(pushed.repository)) == every


@pytest.mark.docker
def test_an_index_resolves_to_its_linux_amd64_image(pushed: Pushed) -> None:
    client = RegistryClient(pushed.registry.host)
    amd64 = client.image(pushed.repository, "nightly-20261203")
    arm64 = client.image(pushed.repository, "nightly-20261201")

    def put_index(tag: str, entries: list[tuple[str, str, str]]) -> str:
        index = {
            "schemaVersion": 2,
            "mediaType": OCI_INDEX,
            "manifests": [
                {
                    "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                    "digest": digest,
                    "size": len(_manifest_body(pushed, digest)),
                    "platform": {"os": os_name, "architecture": arch},
                }
                for digest, os_name, arch in entries
            ],
        }
        body = json.dumps(index).encode()
        path = f"/v2/{pushed.repository}/manifests/{tag}"
        with _api(pushed.registry, "PUT", path, body, **{"Content-Type": OCI_INDEX}) as answer:
            return answer.headers["Docker-Content-Digest"]

    assert amd64.digest and arm64.digest
    index_digest = put_index("multi-20261206", [(arm64.digest, "linux", "arm64"), (amd64.digest, "linux", "amd64")])
    multi = client.image(pushed.repository, "multi-20261206")
    assert (multi.digest, multi.platform_digest) == (index_digest, amd64.digest)
    assert multi.created == NIGHTLIES["nightly-20261203"] and multi.skip_reason is None
    put_index("armonly-20261206", [(arm64.digest, "linux", "arm64")])
    arm_only = client.image(pushed.repository, "armonly-20261206")
    assert arm_only.skip_reason == "no linux/amd64 image in its index (has linux/arm64)"
    for tag in ("multi-20261206", "armonly-20261206"):  # leave the repository as the other tests expect
        digest = client.image(pushed.repository, tag).digest
        _api(pushed.registry, "DELETE", f"/v2/{pushed.repository}/manifests/{digest}").close()


def _manifest_body(pushed: Pushed, digest: str) -> bytes:
    accept = "application/vnd.docker.distribution.manifest.v2+json"
    with _api(pushed.registry, "GET", f"/v2/{pushed.repository}/manifests/{digest}", Accept=accept) as answer:
        return answer.read()


@pytest.mark.docker
def test_a_deleted_manifest_and_a_deleted_config_are_reported_gone(pushed: Pushed) -> None:
    """Deletion is on in the registry's config. A deleted manifest takes its tag with it; the good
    run's image, known by its digest, is gone with the registry's reason. A tag whose config blob
    is deleted cannot be placed in time and is reported with that reason, for the bisection to skip."""
    repository = "triage/deleted"
    tags = {t: NIGHTLIES[t] for t in ("nightly-20261201", "nightly-20261202", "nightly-20261203", "nightly-20261204")}
    digests = _push(pushed.registry, repository, tags, pushed.work)
    client = RegistryClient(pushed.registry.host)
    config = client.image(repository, "nightly-20261203")
    with _api(
        pushed.registry,
        "GET",
        f"/v2/{repository}/manifests/nightly-20261203",
        Accept="application/vnd.docker.distribution.manifest.v2+json",
    ) as answer:
        config_digest = json.loads(answer.read())["config"]["digest"]
    assert config.skip_reason is None
    _api(pushed.registry, "DELETE", f"/v2/{repository}/manifests/{digests['nightly-20261201']}").close()
    _api(pushed.registry, "DELETE", f"/v2/{repository}/blobs/{config_digest}").close()

    client = RegistryClient(pushed.registry.host)  # no cached config
    gone_end = client.tags_between(repository, digests["nightly-20261201"], "nightly-20261204")
    assert gone_end.candidates == ()
    assert gone_end.reason == (
        f"the good image {digests['nightly-20261201']}: manifest {digests['nightly-20261201']} "
        "is gone from the registry (404 MANIFEST_UNKNOWN)"
    )
    by_tag = client.tags_between(repository, "nightly-20261201", "nightly-20261204")
    assert by_tag.reason == (
        "the good image nightly-20261201: manifest nightly-20261201 is gone from the registry (404 MANIFEST_UNKNOWN)"
    )
    usable = client.tags_between(repository, "nightly-20261202", "nightly-20261204")
    assert [c.name for c in usable.candidates] == ["nightly-20261202", "nightly-20261204"]
    assert [(u.name, u.skip_reason) for u in usable.unplaced] == [
        ("nightly-20261203", f"its config blob {config_digest} is gone from the registry (BLOB_UNKNOWN)")
    ]
    assert usable.unplaced[0].digest == digests["nightly-20261203"]


@pytest.fixture(scope="module")
def basic_auth_registry(pushed: Pushed) -> Iterator[RegistryServer]:
    """A second registry over the same storage, behind Basic auth (a bcrypt htpasswd)."""
    htpasswd = pushed.work / "htpasswd"
    write_htpasswd(htpasswd, USERNAME, PASSWORD)
    server = start_registry(pushed.work / "basic", pushed.registry.root, htpasswd)
    yield server
    server.stop()


@pytest.mark.docker
def test_basic_auth_accepted_with_credentials_refused_without(
    pushed: Pushed, basic_auth_registry: RegistryServer
) -> None:
    host = basic_auth_registry.host
    with pytest.raises(urllib.error.HTTPError) as refused:  # the registry does ask for them
        _api(basic_auth_registry, "GET", f"/v2/{pushed.repository}/tags/list")
    assert refused.value.code == 401 and "Basic" in refused.value.headers["WWW-Authenticate"]

    with_credentials = RegistryClient(host, username=USERNAME, password=PASSWORD)
    image_range = with_credentials.tags_between(pushed.repository, "nightly-20261202", "nightly-20261203")
    assert [c.digest for c in image_range.candidates] == [
        pushed.digests[t] for t in ("nightly-20261202", "rebuild-20261202b", "nightly-20261203")
    ]

    with pytest.raises(RegistryAuthError) as none_given:
        RegistryClient(host).tags(pushed.repository)
    assert str(none_given.value) == (
        f"registry {host}, repository {pushed.repository}: needs credentials (Basic auth) and none were given"
    )
    with pytest.raises(RegistryAuthError) as wrong:
        RegistryClient(host, username=USERNAME, password="wrong-" + PASSWORD).tags(pushed.repository)
    message = str(wrong.value)
    assert message == f"registry {host}, repository {pushed.repository}: 401 unauthorized: the credentials were refused"
    assert "\n" not in message and PASSWORD not in message and USERNAME not in message


def test_unknown_repository_and_unreachable_registry_are_one_line(open_registry: RegistryServer) -> None:
    with pytest.raises(RepositoryNotFoundError) as unknown:
        RegistryClient(open_registry.host).tags_between("triage/no-such", "a", "b")
    assert str(unknown.value) == (
        f"registry {open_registry.host}, repository triage/no-such: no such repository (404 NAME_UNKNOWN)"
    )
    port = free_port()
    with pytest.raises(RegistryUnreachableError) as unreachable:
        RegistryClient(f"127.0.0.1:{port}", username=USERNAME, password=PASSWORD).tags_between(REPOSITORY, "a", "b")
    assert str(unreachable.value) == f"registry 127.0.0.1:{port}: unreachable at 127.0.0.1:{port} (connection refused)"


@pytest.mark.docker
def test_bearer_token_auth_through_the_registrys_token_server(pushed: Pushed) -> None:
    """A registry with `auth: token:` trusting a token server the test starts: the client follows
    the challenge (realm, service, scope) to a token per scope, with the credentials given."""
    token_server = TokenServer(pushed.work, USERNAME, PASSWORD)
    server = start_registry(pushed.work / "token", pushed.registry.root, token=token_server)
    try:
        client = RegistryClient(server.host, username=USERNAME, password=PASSWORD)
        image_range = client.tags_between(pushed.repository, "nightly-20261203", "nightly-20261204")
        assert [c.digest for c in image_range.candidates] == [
            pushed.digests["nightly-20261203"],
            pushed.digests["nightly-20261204"],
        ]
        assert {r.get("scope") for r in token_server.requests} == {None, f"repository:{pushed.repository}:pull"}
        assert all(r["service"] == TOKEN_SERVICE for r in token_server.requests)
        realm_host = token_server.realm.split("/")[2]
        with pytest.raises(RegistryAuthError) as wrong:
            RegistryClient(server.host, username=USERNAME, password="nope").tags(pushed.repository)
        assert str(wrong.value) == (
            f"registry {server.host}, repository {pushed.repository}: "
            f"the token server {realm_host} refused the credentials (401)"
        )
        with pytest.raises(RegistryAuthError) as bad_token:
            RegistryClient(server.host, token="not-a-jwt").tags(pushed.repository)
        assert str(bad_token.value) == (
            f"registry {server.host}, repository {pushed.repository}: 401 unauthorized: the token was refused"
        )
    finally:
        server.stop()
        token_server.stop()
