"""Issue 60: the stand-in collectors accept what the upstream table says the real ones accept, and
nothing else. rocprofv3: the `rocprofv3_flag` rows (names, the aliases their detail lists, the
`--output-format` choices). rtl (a v0.3.3 wheel): the `rtl_flag` rows and the `rtl_mode` rows
accepted by v0.3.3 (lite, default, full; not standard, not hip), from the checkout and from the
wheel docker/images.py builds."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from tests.conftest import REPO_ROOT

from testkit.standin import upstream_table
from traceladder.config import upstream

STANDIN = REPO_ROOT / "testkit" / "standin"
RTL_CLI = STANDIN / "rtl" / "rocm_trace_lite" / "cli.py"


def run(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=30, **kw)  # type: ignore[call-overload]


def test_the_stand_ins_read_the_table_as_the_package_does() -> None:
    assert upstream_table.primus_keys() == upstream.primus_keys()
    assert Path(upstream_table.table_path()).samefile(
        REPO_ROOT / "include" / "traceladder" / "config" / "upstream" / "facts.csv"
    )


def test_rocprofv3_accepts_each_table_flag(tmp_path: Path) -> None:
    rows = upstream.facts("rocprofv3_flag")
    fmt = next(f for f in rows if f.name == "--output-format")
    formats = upstream_table.choices(dataclasses.asdict(fmt))
    assert formats == ["csv", "json", "pftrace", "otf2", "rocpd"]
    out, args = tmp_path / "out", []
    for row in rows:  # every spelling in one call (a refused one exits 2 naming it)
        for spelling in (row.name, *upstream_table.aliases(dataclasses.asdict(row))):
            if spelling not in ("--", "--version", "-v"):
                args += [
                    spelling,
                    *(["csv", "json"] if row.name == "--output-format" else [str(out)] * bool(row.default)),
                ]
    assert len(args) > 20 and {"-d", "-f", "-r", "-s", "--marker-trace"} <= set(args)
    proc = run([str(STANDIN / "rocprofv3"), *args, "--", "true"])
    assert proc.returncode == 0, proc.stderr
    for version in ("--version", "-v"):
        assert "rocprofv3" in run([str(STANDIN / "rocprofv3"), version]).stdout
    proc = run(
        [str(STANDIN / "rocprofv3"), "--output-format=json", "--sys-trace", f"--output-directory={out}", "--", "true"]
    )
    assert proc.returncode == 0 and list(out.glob("*/*_results.json")), proc.stderr


@pytest.mark.parametrize(
    "args,error",
    [
        (["--bogus-trace"], "unrecognized option '--bogus-trace'"),
        (["--kernel-trace", "-f", "xml"], "argument -f: invalid choice: 'xml'"),
        (["--kernel-trace", "--output-format"], "argument --output-format: expected a value"),
        (["--kernel-trace", "--version=1"], "--version takes no value"),
    ],
)
def test_rocprofv3_refuses_anything_else(tmp_path: Path, args: list[str], error: str) -> None:
    proc = run([str(STANDIN / "rocprofv3"), *args, "-d", str(tmp_path), "--", "true"])
    assert (
        proc.returncode == 2 and proc.stderr.startswith(f"rocprofv3: error: {error}") and proc.stderr.count("\n") == 1
    )


def _rtl_modes(rtl: list[str], tmp_path: Path, **kw: object) -> dict[str, int]:
    codes = {}
    for mode in ("lite", "default", "full", "standard", "hip"):
        proc = run([*rtl, "trace", "--mode", mode, "-o", str(tmp_path / mode / "trace.db"), "--", "true"], **kw)
        assert proc.returncode == 0 or proc.stderr.count("\n") == 1, proc.stderr
        codes[mode] = proc.returncode
    return codes


V033 = {"lite": 0, "default": 0, "full": 0, "standard": 2, "hip": 2}


def test_rtl_takes_the_modes_v033_takes(tmp_path: Path) -> None:
    assert _rtl_modes([str(RTL_CLI)], tmp_path) == V033
    assert (tmp_path / "full" / "trace.db").is_file()
    proc = run([str(RTL_CLI), "trace", "--mode", "hip", "-o", str(tmp_path / "t.db"), "true"])
    assert proc.stderr == "rtl: error: argument --mode: invalid choice: 'hip' (choose from default, full, lite)\n"
    # the aliases the table lists, and `--version`
    proc = run([str(RTL_CLI), "trace", "-m", "full", "--output", str(tmp_path / "a" / "trace.db"), "true"])
    assert proc.returncode == 0, proc.stderr
    assert run([str(RTL_CLI), "--version"]).stdout == "rocm-trace-lite 0.3.3\n"
    proc = run([str(RTL_CLI), "trace", "--kernel-trace", "-o", str(tmp_path / "t.db"), "true"])
    assert (proc.returncode, proc.stderr) == (2, "rtl: error: unrecognized option '--kernel-trace'\n")


def test_the_rtl_wheel_carries_the_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = importlib.util.spec_from_file_location("images_under_test", REPO_ROOT / "docker" / "images.py")
    assert spec and spec.loader
    images = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(images)
    monkeypatch.setattr(images, "CACHE", tmp_path / "cache")
    wheel = images.build_rtl_standin_wheel()
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
        table = zf.read("rocm_trace_lite/upstream_facts.csv").decode()
    assert {line.split(",", 1)[0] for line in table.splitlines()[1:]} == {"rtl_flag", "rtl_mode"}
    env = {**os.environ, "PYTHONPATH": str(site)}
    assert _rtl_modes(["-m", "rocm_trace_lite.cli"], tmp_path / "w", env=env, cwd=tmp_path) == V033
