"""The docker path's launch, provenance parsing, perf.csv and the week-over-week provenance check,
without a Docker Engine (the docker tests in tests/integration run the same code in containers)."""

from __future__ import annotations

import csv
import io
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from testkit.results import typed
from traceladder.config import find_ladder, load_ladder
from traceladder.config.loader import load_clusters
from traceladder.plan.build import build_plan
from traceladder.runner import provenance
from traceladder.runner.backends import docker as docker_backend
from traceladder.runner.requirements import missing_import
from traceladder.stats.history import provenance_changes, run_points
from traceladder.summary.render.perf_csv import HEADER, perf_csv


def seed_specs():
    return build_plan(load_ladder(find_ladder("deepseek-v4-flash-mi350x")))


def test_launch_from_the_primus_root_with_absolute_paths(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("PRIMUS_PATH", raising=False)
    spec = next(s for s in seed_specs() if s.lens == "rocm_trace_lite")
    workspace = tmp_path / "rel" / ".." / "output"
    argv, env = docker_backend.command(spec, workspace)
    assert docker_backend.workdir(spec, tmp_path) == Path("/workspace/Primus")
    rtl_end = argv.index("/workspace/Primus/primus-cli")
    assert argv[:rtl_end] == [
        "rtl",
        "trace",
        "--mode",
        "lite",
        "-o",
        str((tmp_path / "output").resolve() / "rocm_trace_lite_output" / "trace.db"),
    ]
    primus = argv[rtl_end:]
    assert primus[1:3] == ["direct", "--log_file"] and Path(primus[3]).is_absolute() and ".." not in primus[3]
    assert primus[4:8] == ["train", "pretrain", "--config", spec.model_args["config_path"]] and "--" not in argv
    # the ladder's warm-up, as every backend passes it (rung_spec.SpecFields.primus_overrides)
    assert primus[8:10] == ["--log_avg_skip_iterations", str(spec.warmup_iters)]
    assert primus[-2:] == ["--use_rocm_mem_info", "True"] and env["PRIMUS_WORKSPACE"] == str(
        (tmp_path / "output").resolve()
    )
    # the cluster's launch settings beat the ladder's GPUS_PER_NODE
    cluster = load_clusters().clusters["mi350x"]
    assert {
        k: spec.docker_env_vars[k] for k in ("GPUS_PER_NODE", "NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT")
    } == cluster.launch_env()
    # a ladder that sets use_rocm_mem_info keeps its value; PRIMUS_PATH moves the checkout
    monkeypatch.setenv("PRIMUS_PATH", "/opt/Primus")
    other = spec.model_copy(update={"model_args": {**spec.model_args, "use_rocm_mem_info": False}})
    argv, _ = docker_backend.command(other, tmp_path)
    assert argv.count("--use_rocm_mem_info") == 1 and argv[argv.index("--use_rocm_mem_info") + 1] == "False"
    assert "/opt/Primus/primus-cli" in argv and docker_backend.workdir(other, tmp_path) == Path("/opt/Primus")


def test_lens_preflight_names_the_fix(monkeypatch) -> None:
    spec = next(s for s in seed_specs() if s.lens == "rocm_trace_lite")
    monkeypatch.setenv("PATH", "/nonexistent")
    try:
        docker_backend.lens_preflight(spec)
    except docker_backend.LensUnavailable as exc:
        assert str(exc).startswith(
            "lens rocm_trace_lite: rtl is not in the runner image: put the rocm_trace_lite wheel"
        )
    else:
        raise AssertionError("no LensUnavailable")


def test_amd_smi_shapes_and_primus_commit_without_git(tmp_path: Path, monkeypatch) -> None:
    rows = [
        {
            "gpu": 0,
            "asic": {"market_name": "AMD Instinct MI350X", "target_graphics_version": "gfx950"},
            "driver": {"version": "6.14.14"},
        }
    ]
    assert provenance.amd_smi_rows(json.dumps({"gpu_data": rows})) == rows == provenance.amd_smi_rows(json.dumps(rows))
    assert provenance.amd_smi_rows("not json") == [] and provenance.amd_smi_rows(None) == []
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "amd-smi"
    fake.write_text(f"#!{sys.executable}\nimport json\nprint(json.dumps({json.dumps({'gpu_data': rows * 2})}))\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    assert provenance.gpu_info() == {
        "product": "AMD Instinct MI350X",
        "arch": "gfx950",
        "driver_version": "6.14.14",
        "count": 2,
    }
    git = tmp_path / "Primus" / ".git"
    (git / "refs" / "heads").mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    sha = "fd1eeabb" + "0" * 32
    (git / "packed-refs").write_text(f"# pack-refs with: peeled\n{sha} refs/heads/main\n")
    monkeypatch.setenv("PATH", str(bindir))  # no git: .git is read directly
    assert provenance.primus_commit(tmp_path / "Primus") == sha
    rocm = tmp_path / "rocm" / ".info"
    rocm.mkdir(parents=True)
    (rocm / "version").write_text("7.1.0-20\n")
    assert provenance.rocm_version({"ROCM_PATH": str(tmp_path / "rocm")}) == "7.1.0-20"


def test_runner_import_check_is_one_line() -> None:
    assert missing_import() is None  # this venv has boto3
    code = (
        "import sys; sys.modules['boto3'] = None; "
        "from traceladder.runner.requirements import missing_import; print(missing_import())"
    )
    # find_spec of a module set to None in sys.modules raises ValueError: reported as missing
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ}, check=True)
    assert out.stdout.strip().startswith(
        "runner image: Python package 'boto3' is missing: put boto3 and its dependencies in docker/wheels/"
    )


def _plan_and_results():
    specs = [json.loads(s.to_json()) for s in seed_specs()]
    plan = {"ladder": "deepseek-v4-flash-mi350x", "run_id": "r1", "specs": specs}
    prov = {
        "image_id": "sha256:abc",
        "image_digest": None,
        "primus_commit": "fd1e",
        "gpu": {"arch": "gfx950"},
        "host": "mi350x-01",
    }
    results = {}
    for i, s in enumerate(specs):
        ok = s["rung"] != "fusions"
        results[s["rung_id"]] = {
            "rung_id": s["rung_id"],
            **{k: s[k] for k in ("rung", "lens", "repeat")},
            "status": "ok" if ok else "failed",
            "tokens_per_sec_per_gpu": 1000.0 + i if ok else None,
            "tflops": 500.0 + i if ok else None,
            "wall_s": 10.0,
            "provenance": prov,
        }
    return plan, results, specs


def test_perf_csv_has_madengines_header_and_one_row_per_rung_and_metric() -> None:
    plan, results, specs = _plan_and_results()
    text = perf_csv(plan, typed(results))
    assert text.splitlines()[0] == ",".join(HEADER)
    rows = list(csv.DictReader(io.StringIO(text)))
    rungs = list(dict.fromkeys(s["rung"] for s in specs if s["lens"] == "none"))
    assert len(rows) == 2 * len(rungs) and [r["metric"] for r in rows[:2]] == ["tokens_per_second", "tflops"]
    base = next(r for r in rows if r["model"].endswith("/baseline") and r["metric"] == "tokens_per_second")
    expected = [
        results[s["rung_id"]]["tokens_per_sec_per_gpu"]
        for s in specs
        if s["rung"] == "baseline" and s["lens"] == "none"
    ]
    assert float(base["performance"]) == sum(expected) / len(expected)
    assert (
        base["model"] == f"{specs[0]['model_tag']}/baseline"
        and base["status"] == "SUCCESS"
        and base["docker_sha"] == "sha256:abc"
    )
    assert base["n_gpus"] == "8" and base["training_precision"] == "BF16" and base["gpu_architecture"] == "gfx950"
    failed = [r for r in rows if r["model"].endswith("/fusions")]
    assert [(r["status"], r["performance"]) for r in failed] == [("FAILURE", ""), ("FAILURE", "")]


def test_week_over_week_flags_a_repushed_tag_and_a_new_driver() -> None:
    prov = {
        "image": "registry/traceladder/runner:0.1.0",
        "image_id": "sha256:aaa",
        "image_digest": "registry/x@sha256:111",
        "rocm_version": "7.1.0",
        "gpu": {"product": "MI350X", "arch": "gfx950", "driver_version": "6.14.14", "count": 8},
        "primus_commit": "fd1e",
        "tools": {"rtl": "rocm-trace-lite 0.3.3"},
    }
    before = {"run_id": "w1", "rungs": [], "provenance": prov}
    after = {
        "run_id": "w2",
        "rungs": [],
        "provenance": {
            **prov,
            "image_id": "sha256:bbb",
            "image_digest": "registry/x@sha256:222",
            "gpu": {**prov["gpu"], "driver_version": "6.16.0"},
        },
    }
    changes = provenance_changes([run_points(before), run_points(after)])[1]
    assert [c.split(":")[0] for c in changes] == ["image_digest", "image_id", "gpu"]
    assert provenance_changes([run_points(before), run_points(before)])[1] == []


def test_engine_tracelens_needs_the_clusters_tracelens_daemon(tmp_path: Path) -> None:
    import pytest
    import yaml

    from traceladder.config import LadderConfigError
    from traceladder.config.loader import CONFIG_DIR

    path = tmp_path / "tl.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "schema": 1,
                "extends": str(CONFIG_DIR / "ladders" / "deepseek-v4-flash-mi350x.yaml"),
                "ladder": "tl",
                "engine": "tracelens",
            }
        )
    )
    with pytest.raises(LadderConfigError, match=r"'tracelens' needs clusters\.mi350x\.tracelens\.docker_url"):
        load_ladder(path)
    clusters = load_clusters()
    from traceladder.config.models import AnalysisDaemon

    clusters.clusters["mi350x"] = clusters.clusters["mi350x"].model_copy(
        update={"tracelens": AnalysisDaemon(docker_url="tcp://a:2376")}
    )
    assert load_ladder(path, clusters).ladder.engine == "tracelens"
