#!/usr/bin/env python3
"""Build traceladder's images with nothing but a local Docker Engine (no registry, no network).

    python3 docker/images.py runner   [--base rocm/primus:v26.7] [--tag traceladder/runner:0.1.0]
    python3 docker/images.py standin  # the test images: stand-in base, stand-in Primus, runner on it
    python3 docker/images.py tracelens [--tag traceladder/tracelens:1.0.0]   (needs network: pip, git)

Images for the tests (``standin``), each tagged by a hash of its inputs so that a rerun with the
same inputs builds nothing:

* ``traceladder/standin-base:<h>``: ``debootstrap --variant=minbase --include=python3,python3-boto3
  bookworm`` from the machine's Debian mirror, ``docker import``ed. The root filesystem tarball is
  cached in ``.traceladder/images/`` (git-ignored), so a new Docker data root re-imports in seconds.
* ``traceladder/standin-primus:<h>``: that plus ``testkit/standin/`` (``primus-cli``, ``rocprofv3``,
  ``rtl`` with the real command-line contracts, and a Primus checkout stub with the seed config) and
  the upstream facts table they take their options, keys and log lines from (``/opt/standin/``).
* ``traceladder/runner-standin:<version>-<h>``: ``docker/runner/Dockerfile`` built with ``BASE_IMAGE`` =
  the stand-in Primus image and a stand-in ``rocm_trace_lite`` wheel (built here from
  ``testkit/standin/rtl``) as an extra wheel, as a site puts the real one in ``docker/wheels/``;
  and the same runner without any extra wheel (``RUNNER_IMAGE_NO_RTL``), for the lens preflight.
* ``traceladder/standin-tracelens:<h>``: ``docker/tracelens``'s scripts on the stand-in base with a
  stand-in TraceLens CLI that checks its arguments (``engine: tracelens`` in the tests).

The runner's build context is staged in ``.traceladder/images/ctx-runner/``: the Dockerfile, its
install script, a wheel of this package (``pip wheel --no-deps``, for bases with pip) and the
package source (for bases without pip). Prints the built tag(s) as ``NAME=TAG`` lines on stdout.
Only the standard library is imported, so it runs from any Python 3.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
STANDIN = REPO / "testkit" / "standin"  # the test doubles the stand-in images carry
UPSTREAM_FACTS = REPO / "include" / "traceladder" / "config" / "upstream" / "facts.csv"  # what they accept
CACHE = Path(os.environ.get("TRACELADDER_IMAGE_CACHE", REPO / ".traceladder" / "images"))
SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-boto3")
VERSION = "0.1.0"
CHECKOUT = hashlib.sha256(str(REPO).encode()).hexdigest()[:12]  # labels the test images this checkout built


def log(msg: str) -> None:
    print(f"images: {msg}", file=sys.stderr, flush=True)


def run(argv: list[str], **kw) -> subprocess.CompletedProcess:
    log("$ " + " ".join(argv))
    return subprocess.run(argv, check=True, **kw)


def docker(*args: str, capture: bool = False, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], check=check, text=True, capture_output=capture)


def image_exists(tag: str) -> bool:
    return docker("image", "inspect", tag, capture=True, check=False).returncode == 0


def image_id(tag: str) -> str:
    return docker("image", "inspect", "--format", "{{.Id}}", tag, capture=True).stdout.strip()


def hash_inputs(*parts: str | bytes | Path) -> str:
    h = hashlib.sha256()
    for part in parts:
        if isinstance(part, Path):
            files = (
                sorted(p for p in part.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
                if part.is_dir()
                else [part]
            )
            for f in files:
                h.update(str(f.relative_to(REPO) if REPO in f.parents else f.name).encode())
                h.update(f.read_bytes())
        else:
            h.update(part if isinstance(part, bytes) else part.encode())
        h.update(b"\0")
    return h.hexdigest()[:12]


def debian_mirror() -> str:
    """The Debian mirror the machine's apt sources name (deb822 or one-line format)."""
    texts = []
    for path in ["/etc/apt/sources.list", *sorted(glob.glob("/etc/apt/sources.list.d/*"))]:
        try:
            texts.append(Path(path).read_text())
        except OSError:
            continue
    for text in texts:
        for m in re.finditer(r"^URIs:\s*(\S+)", text, re.M):
            if "security" not in m.group(1):
                return m.group(1)
        for m in re.finditer(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+" + SUITE + r"\s", text, re.M):
            return m.group(1)
    return "http://deb.debian.org/debian"


# ---- stand-in base ------------------------------------------------------------------------------
def debootstrap_tarball(tarball: Path, packages: tuple[str, ...], mirror: str, who: str) -> Path:
    """A minbase debootstrap of SUITE with ``packages``, as a tar (cached at ``tarball``); apt's
    lists and caches, which no image needs, are dropped. ``who`` names the caller in errors."""
    if tarball.exists():
        return tarball
    if not shutil.which("debootstrap"):
        raise SystemExit(f"{who}: debootstrap is missing: apt-get install -y debootstrap")
    CACHE.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix=f"{who}-root-", dir=CACHE))
    try:
        run(
            ["debootstrap", "--variant=minbase", f"--include={','.join(packages)}", SUITE, str(root), mirror],
            stdout=subprocess.DEVNULL,
        )
        for sub in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for p in (root / sub).glob("*"):
                if p.is_file():
                    p.unlink()
        part = tarball.with_suffix(".tar.part")
        run(["tar", "-C", str(root), "-cf", str(part), "."])
        part.replace(tarball)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return tarball


def standin_base() -> str:
    mirror = debian_mirror()
    key = hash_inputs(SUITE, ",".join(BASE_PACKAGES), "minbase", mirror)
    tag = f"traceladder/standin-base:{key}"
    if image_exists(tag):
        log(f"{tag} is present")
        return tag
    tarball = debootstrap_tarball(CACHE / f"standin-base-{key}.tar", BASE_PACKAGES, mirror, "images")
    with tarball.open("rb") as f:
        log(f"$ docker import - {tag} < {tarball}")
        subprocess.run(["docker", "import", "-", tag], stdin=f, check=True, stdout=subprocess.DEVNULL)
    return tag


def standin_primus(base: str) -> str:
    """testkit/standin plus the upstream facts table, staged as one build context (the Dockerfile
    puts the table and upstream_table.py, the stand-ins' reader of it, in /opt/standin/)."""
    tag = f"traceladder/standin-primus:{hash_inputs(image_id(base), STANDIN, UPSTREAM_FACTS)}"
    if image_exists(tag):
        log(f"{tag} is present")
        return tag
    ctx = CACHE / "ctx-standin-primus"
    shutil.rmtree(ctx, ignore_errors=True)
    shutil.copytree(STANDIN, ctx, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy2(UPSTREAM_FACTS, ctx / "upstream_facts.csv")
    run(
        ["docker", "build", "--network", "host", "-q", "--build-arg", f"BASE_IMAGE={base}", "-t", tag, str(ctx)],
        stdout=subprocess.DEVNULL,
    )
    return tag


def standin_tracelens(base: str) -> str:
    """docker/tracelens's scripts on the stand-in base, with a stand-in TraceLens CLI."""
    src = STANDIN / "tracelens"
    scripts = [HERE / "tracelens" / "tracelens-report", HERE / "tracelens" / "tracelens_s3.py"]
    tag = f"traceladder/standin-tracelens:{hash_inputs(image_id(base), src, *scripts)}"
    if image_exists(tag):
        log(f"{tag} is present")
        return tag
    ctx = CACHE / "ctx-tracelens"
    shutil.rmtree(ctx, ignore_errors=True)
    shutil.copytree(src, ctx)
    for script in scripts:
        shutil.copy2(script, ctx / script.name)
    run(
        ["docker", "build", "--network", "host", "-q", "--build-arg", f"BASE_IMAGE={base}", "-t", tag, str(ctx)],
        stdout=subprocess.DEVNULL,
    )
    return tag


# ---- runner -------------------------------------------------------------------------------------
def _package_sources() -> Path:
    return REPO / "include" / "traceladder"


WHEELS = HERE / "wheels"  # a site's offline wheels: rocm-trace-lite, boto3 for a base without it


def site_wheels() -> list[Path]:
    return sorted(WHEELS.glob("*.whl"))


def build_rtl_standin_wheel() -> Path:
    """A wheel of the stand-in rocm-trace-lite (testkit/standin/rtl), written with zipfile: the
    `rtl` console script, as the GitHub-release wheel provides it, with the upstream table's rtl rows
    (`rocm_trace_lite/upstream_facts.csv`) and their reader (`upstream_table.py`) beside it, so it
    accepts the flags and modes the table says v0.3.3 accepts. Deterministic bytes."""
    import base64
    import csv
    import io
    import zipfile

    src = STANDIN / "rtl"
    version = "0.3.3"
    out = CACHE / "wheels-standin" / f"rocm_trace_lite-{version}-py3-none-any.whl"
    out.parent.mkdir(parents=True, exist_ok=True)
    info = f"rocm_trace_lite-{version}.dist-info"
    files = {str(f.relative_to(src)): f.read_bytes() for f in sorted(src.rglob("*.py")) if "__pycache__" not in f.parts}
    files["rocm_trace_lite/upstream_table.py"] = (STANDIN / "upstream_table.py").read_bytes()
    table = io.StringIO()
    writer = csv.writer(table, lineterminator="\n")
    with UPSTREAM_FACTS.open(newline="", encoding="utf-8") as f:
        writer.writerows(row for n, row in enumerate(csv.reader(f)) if n == 0 or row[0] in ("rtl_flag", "rtl_mode"))
    files["rocm_trace_lite/upstream_facts.csv"] = table.getvalue().encode()
    files[f"{info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: rocm-trace-lite\nVersion: {version}\nSummary: stand-in (tests)\n".encode()
    )
    files[f"{info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: traceladder-images\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    files[f"{info}/entry_points.txt"] = b"[console_scripts]\nrtl = rocm_trace_lite.cli:main\n"
    record = [
        f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}"
        for name, data in files.items()
    ]
    files[f"{info}/RECORD"] = ("\n".join(record + [f"{info}/RECORD,,"]) + "\n").encode()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0)), data)
    return out


def stage_runner_context(extra_wheels: list[Path]) -> Path:
    """Dockerfile + install scripts + wheel + package source + extra wheels, in a fresh folder."""
    ctx = CACHE / "ctx-runner"
    shutil.rmtree(ctx, ignore_errors=True)
    (ctx / "wheels" / "extra").mkdir(parents=True)
    for name in ("Dockerfile", "install.sh", "install_wheels.py"):
        shutil.copy2(HERE / "runner" / name, ctx / name)
    for wheel in extra_wheels:
        shutil.copy2(wheel, ctx / "wheels" / "extra" / wheel.name)
    shutil.copytree(
        _package_sources(), ctx / "lib" / "traceladder", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    python = os.environ.get("TRACELADDER_WHEEL_PYTHON") or str(REPO / ".venv" / "bin" / "python")
    if not Path(python).exists():
        python = sys.executable
    with tempfile.TemporaryDirectory() as build_dir:
        # --no-build-isolation: setuptools from the venv, no network; a copy of the tree keeps
        # build/ and *.egg-info out of the repository.
        src = Path(build_dir) / "src"
        shutil.copytree(
            REPO,
            src,
            ignore=shutil.ignore_patterns(
                ".venv",
                ".git",
                ".traceladder",
                "__pycache__",
                "*.egg-info",
                "tests",
                "docker",
                "test-artifacts",
                "build",
                "dist",
            ),
        )
        run(
            [
                python,
                "-m",
                "pip",
                "wheel",
                "-q",
                "--no-deps",
                "--no-build-isolation",
                "--no-index",
                "-w",
                str(ctx / "wheels"),
                str(src),
            ],
            stdout=subprocess.DEVNULL,
        )
    return ctx


def runner(base: str, tag: str | None, extra_wheels: list[Path] | None = None, rtl_wheel_url: str = "") -> str:
    extra_wheels = site_wheels() if extra_wheels is None else extra_wheels
    key = hash_inputs(
        image_id(base) if image_exists(base) else base,
        HERE / "runner",
        _package_sources(),
        REPO / "include" / "configs",  # the package's configs/ (a symlink, which rglob does not follow)
        REPO / "pyproject.toml",
        *extra_wheels,
        rtl_wheel_url,
    )
    # test runners live in their own repository, apart from the production traceladder/runner tags
    tag = tag or f"traceladder/runner-standin:{VERSION}-{key}"
    if image_exists(tag) and ":" in tag and tag.endswith(key):
        log(f"{tag} is present")
        return tag
    ctx = stage_runner_context(extra_wheels)
    run(
        [
            "docker",
            "build",
            "--network",
            "host",
            "-q",
            "--build-arg",
            f"BASE_IMAGE={base}",
            "--build-arg",
            f"RTL_WHEEL={rtl_wheel_url}",
            "--label",
            f"traceladder.inputs={key}",
            "--label",
            f"traceladder.checkout={CHECKOUT}",
            "-t",
            tag,
            str(ctx),
        ],
        stdout=subprocess.DEVNULL,
    )
    return tag


def drop_stale(keep: list[str], tag_prefix: str = "") -> None:
    """Remove the tags of older inputs that this checkout built in the repositories of ``keep``
    (same repository, a tag starting with ``tag_prefix``, another hash); other checkouts sharing
    the daemon keep theirs."""
    for repo in dict.fromkeys(tag.rsplit(":", 1)[0] for tag in keep):
        listed = docker(
            "images",
            "--format",
            "{{.Repository}}:{{.Tag}}",
            "--filter",
            f"label=traceladder.checkout={CHECKOUT}",
            repo,
            capture=True,
        ).stdout.split()
        for stale in listed:
            if stale not in keep and stale.startswith(f"{repo}:{tag_prefix}"):
                docker("rmi", stale, capture=True, check=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("runner", help="the runner image on BASE_IMAGE (default rocm/primus:v26.7)")
    p.add_argument("--base", default="rocm/primus:v26.7")
    p.add_argument("--tag", default=f"traceladder/runner:{VERSION}")
    p.add_argument(
        "--rtl-wheel-url",
        default="",
        help="a rocm-trace-lite wheel URL to pip-install (needs network); or put the wheel in docker/wheels/",
    )
    sub.add_parser("standin", help="the stand-in images the tests use")
    p = sub.add_parser("tracelens", help="the TraceLens analysis image (needs network)")
    p.add_argument("--tag", default="traceladder/tracelens:1.0.0")
    args = parser.parse_args(argv)
    if args.what == "runner":
        print(f"RUNNER_IMAGE={runner(args.base, args.tag, rtl_wheel_url=args.rtl_wheel_url)}")
    elif args.what == "standin":
        base = standin_base()
        primus = standin_primus(base)
        print(f"STANDIN_BASE={base}")
        print(f"STANDIN_PRIMUS={primus}")
        pair = [runner(primus, None, [build_rtl_standin_wheel()]), runner(primus, None, [])]
        drop_stale(pair, tag_prefix=f"{VERSION}-")  # the test runners of older inputs
        print(f"RUNNER_IMAGE={pair[0]}")
        print(f"RUNNER_IMAGE_NO_RTL={pair[1]}")
        print(f"STANDIN_TRACELENS={standin_tracelens(base)}")
    else:
        run(["docker", "build", "-t", args.tag, str(HERE / "tracelens")])
        print(f"TRACELENS_IMAGE={args.tag}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
