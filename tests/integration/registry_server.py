"""A real Docker registry on loopback for the triage's tests: Debian's ``docker-registry`` package
(the distribution registry, ``docker-registry serve <config.yml>``), started from a temp folder on a
free port with its storage there, and stopped at the end. Its system service is never used.

``images`` writes small real images (one file, a chosen ``created`` time) as ``docker load``
archives, so the tests push images whose creation order they set, through a real Docker Engine.

In CI (CI=true) a missing ``docker-registry`` binary FAILS the tests (testkit/needs.py);
elsewhere it is a skip naming the package."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import tarfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from testkit.needs import unavailable
from traceladder.core.ports import free_port

BINARY = "docker-registry"
START_TIMEOUT_S = 30.0


@dataclass
class RegistryServer:
    """One running registry: ``host`` is ``127.0.0.1:<port>``."""

    host: str
    root: Path
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    def log_tail(self, lines: int = 10) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def registry_binary() -> str:
    path = shutil.which(BINARY)
    if path is None:
        unavailable(f"no {BINARY} on PATH (apt-get install -y docker-registry: Debian's distribution registry)")
    return path


def config_yaml(port: int, storage: Path, htpasswd: Path | None = None, token: TokenServer | None = None) -> str:
    """The registry's config: loopback only, filesystem storage in the temp folder, deletion on
    (the tests delete a manifest and a config blob), no upload purging, and Basic auth from an
    htpasswd file, or Bearer tokens from a token server, when given. Written as JSON, which is
    YAML."""
    config: dict[str, object] = {
        "version": "0.1",
        "log": {"level": "warn", "accesslog": {"disabled": True}},
        "storage": {
            "filesystem": {"rootdirectory": str(storage)},
            "delete": {"enabled": True},
            "maintenance": {"uploadpurging": {"enabled": False}},
        },
        "http": {"addr": f"127.0.0.1:{port}", "secret": hashlib.sha256(str(storage).encode()).hexdigest()},
    }
    if htpasswd is not None:
        config["auth"] = {"htpasswd": {"realm": "traceladder-test", "path": str(htpasswd)}}
    elif token is not None:
        config["auth"] = {
            "token": {
                "realm": token.realm,
                "service": TOKEN_SERVICE,
                "issuer": TOKEN_ISSUER,
                "rootcertbundle": str(token.cert_path),
            }
        }
    return json.dumps(config, indent=2) + "\n"


def start_registry(
    folder: Path, storage: Path, htpasswd: Path | None = None, token: TokenServer | None = None
) -> RegistryServer:
    """Start ``docker-registry serve`` on a free loopback port; wait until ``/v2/`` answers."""
    binary = registry_binary()
    port = free_port()
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "config.yml"
    config.write_text(config_yaml(port, storage, htpasswd, token))
    log_path = folder / "registry.log"
    with log_path.open("ab") as log:
        process = subprocess.Popen([binary, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT, cwd=folder)
    server = RegistryServer(f"127.0.0.1:{port}", storage, process, log_path)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{BINARY} exited {process.returncode}: {server.log_tail()}")
        try:
            with urllib.request.urlopen(f"{server.url}/v2/", timeout=2):  # noqa: S310 (http://127.0.0.1)
                return server
        except urllib.error.HTTPError as answer:
            if answer.code == 401:  # up, and asking for credentials
                return server
        except OSError:
            pass
        time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"{BINARY} did not answer on {server.host} within {START_TIMEOUT_S:.0f} s: {server.log_tail()}")


def push_image(reference: str) -> str:
    """``docker push`` a local image to its registry; its manifest digest as the Docker Engine
    reports it (the ``RepoDigests`` entry of that repository)."""
    from tests.integration.conftest import docker_cli

    docker_cli("push", reference)
    repository = reference.rsplit(":", 1)[0]
    repo_digests = json.loads(docker_cli("inspect", "--format", "{{json .RepoDigests}}", reference).stdout)
    return next(d for d in repo_digests if d.startswith(f"{repository}@")).split("@")[1]


def remove_local(registry: RegistryServer) -> None:
    """Remove the Docker Engine's local images of this registry (tags and digests), so the next
    run of one pulls it from the registry."""
    from tests.integration.conftest import docker_cli

    listed = docker_cli("images", "--digests", "--format", "{{.Repository}} {{.Tag}} {{.Digest}}", check=False)
    ours = set()
    for line in listed.stdout.splitlines():
        repository, tag, digest = (line.split() + ["", "", ""])[:3]
        if repository.startswith(f"{registry.host}/"):
            ours.add(f"{repository}:{tag}" if tag not in ("", "<none>") else f"{repository}@{digest}")
    if ours:
        docker_cli("rmi", "-f", *sorted(ours), check=False)


def write_htpasswd(path: Path, username: str, password: str) -> None:
    """A bcrypt htpasswd line (the registry reads bcrypt only)."""
    import bcrypt

    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=5)).decode()
    path.write_text(f"{username}:{hashed}\n")


def image_archive(path: Path, reference: str, created: datetime, content: str) -> None:
    """A ``docker load`` archive of a one-layer image holding ``/content.txt``, whose config says
    ``created``: the tests choose each image's creation time, which ``docker build`` would not."""
    layer = io.BytesIO()
    data = content.encode()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        info = tarfile.TarInfo("content.txt")
        info.size, info.mtime, info.mode = len(data), int(created.timestamp()), 0o644
        tar.addfile(info, io.BytesIO(data))
    layer_bytes = layer.getvalue()
    stamp = created.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": stamp,
        "config": {"Cmd": ["/content.txt"], "Labels": {"traceladder.test": content}},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer_bytes).hexdigest()]},
        "history": [{"created": stamp, "created_by": "tests/integration/registry_server.py"}],
    }
    config_bytes = json.dumps(config, sort_keys=True).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    manifest = [{"Config": config_name, "RepoTags": [reference], "Layers": ["layer/layer.tar"]}]
    with tarfile.open(path, mode="w") as archive:
        for name, blob in (
            (config_name, config_bytes),
            ("layer/layer.tar", layer_bytes),
            ("manifest.json", json.dumps(manifest).encode()),
        ):
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(blob), int(created.timestamp())
            archive.addfile(info, io.BytesIO(blob))


# ---- Bearer tokens: a token server the registry trusts (its `auth: token:` config) ------------------
TOKEN_SERVICE = "traceladder-test-registry"
TOKEN_ISSUER = "traceladder-test-issuer"


class TokenServer:
    """The token side of the registry's Bearer auth (distribution's token spec): ``GET
    /token?service=..&scope=repository:<name>:pull`` with Basic credentials answers a JWT, RS256,
    whose ``x5c`` header carries the signing certificate, the one in the registry's
    ``rootcertbundle``. Wrong credentials get 401; every request is recorded."""

    def __init__(self, folder: Path, username: str, password: str) -> None:
        import base64
        import datetime as dt
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        import jwt
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import rsa
        from cryptography.x509.oid import NameOID

        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "traceladder-test-token-signer")])
        now = dt.datetime.now(dt.timezone.utc)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256())
        )
        self.cert_path = folder / "token-signer.pem"
        self.cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        x5c = [base64.b64encode(cert.public_bytes(serialization.Encoding.DER)).decode()]
        self.requests: list[dict[str, str]] = []
        expected = "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                import urllib.parse

                query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.path).query))
                server.requests.append(query)
                if self.headers.get("Authorization") != expected:
                    self.send_response(401)
                    self.end_headers()
                    return
                access = []
                if query.get("scope"):
                    kind, repo, actions = query["scope"].split(":")
                    access.append({"type": kind, "name": repo, "actions": actions.split(",")})
                issued = int(time.time())
                claims = {
                    "iss": TOKEN_ISSUER,
                    "sub": username,
                    "aud": query.get("service", ""),
                    "iat": issued,
                    "nbf": issued - 60,
                    "exp": issued + 300,
                    "jti": f"t{issued}-{len(server.requests)}",
                    "access": access,
                }
                token = jwt.encode(claims, key, algorithm="RS256", headers={"x5c": x5c})
                body = json.dumps({"token": token, "expires_in": 300}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.realm = f"http://127.0.0.1:{self._http.server_address[1]}/token"
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()
