"""The warm launcher (workload/forkserver.py) and the runner's side of it (runner/forkserver_client.py).

Two launchers for the module: a probe launcher, the real Launcher in a driver process whose
workload main() is swapped for a probe that reports the child's state (what a fork must not
carry over), and the real one that runner/forkserver_client.py starts and that runs the tiny proxy with two
forked ranks. The driver dirties what it may before it serves (random, numpy's RNG, the
environment, the cwd) to show that a child gets none of it."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from testkit.tiny_proxy import TINY_MODEL

from traceladder.runner import forkserver_client as warm, orphans
from traceladder.rung_spec import render_overrides
from traceladder.runner.forkserver_client import WorkloadRun
from traceladder.runner.rung import _execute_workload
from tests.conftest import REPO_ROOT

INCLUDE = REPO_ROOT / "include"
# Every test here starts the warm launcher, a server process on a socket, itself (and most fork a
# real proxy from it): a service, left out of `make test-fast`.
pytestmark = pytest.mark.service

# The probe child: its state as JSON at args[0], then exit args[1] ("sleep" sleeps, "kill" SIGKILLs itself).
_DRIVER = r"""
import json, os, random, sys, time
sys.path.insert(0, sys.argv[3])
from traceladder.workload import forkserver as warm
import traceladder.workload.__main__ as entry

def fd_targets():
    targets = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            targets.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # the listing's own descriptor, closed by now
            pass
    return targets

def probe(args):
    import numpy, torch, torch.distributed
    state = {
        "pid": os.getpid(),
        "threads_at_start": len(os.listdir("/proc/self/task")),
        "random": random.random(),
        "numpy": float(numpy.random.random()),
        "torch_rng": torch.get_rng_state().tolist()[:64],
        "num_threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "env": dict(os.environ),
        "cwd": os.getcwd(),
        "profiler": bool(torch.autograd.profiler._is_profiler_enabled),
        "dist": torch.distributed.is_initialized(),
        "session_leader": os.getsid(0) == os.getpid() == os.getpgid(0),
        "rss_kb": int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024,
        "fds": fd_targets(),
    }
    if len(args) > 2:  # leave a mess the next child must not see
        big = torch.ones(64 * 1024 * 1024 // 4)
        torch.manual_seed(1234)
        torch.set_num_threads(1)
        random.seed(5)
        print(float(big.sum()))
    with open(args[0], "w") as fh:
        json.dump(state, fh)
    print("probe ran in", os.getcwd(), flush=True)
    print("probe stderr", file=sys.stderr, flush=True)
    if args[1] == "sleep":
        time.sleep(600)
    if args[1] == "kill":
        os.kill(os.getpid(), 9)
    return int(args[1])

entry.main = probe
random.random()
os.environ["LAUNCHER_ONLY"] = "1"
os.chdir("/")
sys.exit(warm.main([sys.argv[1], "--idle-s", sys.argv[2]]))
"""

_FRESH = r"""
import json, os, torch
print(json.dumps({"torch_rng": torch.get_rng_state().tolist()[:64], "num_threads": torch.get_num_threads(),
                  "interop_threads": torch.get_num_interop_threads()}))
"""


def _wait_serving(name: str, proc: subprocess.Popen[bytes], timeout_s: float = 90) -> None:
    until = time.monotonic() + timeout_s
    while time.monotonic() < until:
        assert proc.poll() is None, f"the launcher exited with {proc.returncode}"
        conn = warm._connect(name)
        if conn is not None:
            conn.close()
            return
        time.sleep(0.05)
    raise AssertionError(f"no launcher served {name} within {timeout_s} s")


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("warm-records")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRACELADDER_WORKLOADS_DIR", str(folder))
        mp.setenv("AIRFLOW_CTX_DAG_ID", "warm-test")
        mp.setenv("AIRFLOW_CTX_DAG_RUN_ID", f"run-{os.getpid()}")
        yield folder


def _start_driver(key: str, idle_s: float, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", _DRIVER, warm.socket_name(key), str(idle_s), str(INCLUDE)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    orphans.record_launcher(warm.key_hash(key), {"pid": proc.pid, "key": key, "idle_s": idle_s})
    return proc


@contextlib.contextmanager
def _serving_driver(key: str, idle_s: float, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A probe driver serving `key` (recorded as this key's launcher), killed when done."""
    proc = _start_driver(key, idle_s, log)
    try:
        _wait_serving(warm.socket_name(key), proc)
        yield proc
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def probe_launcher(records: Path) -> Iterator[str]:
    """The real Launcher with a probe for main(), serving this module's DAG run key."""
    key = warm.run_key()
    assert key is not None
    with _serving_driver(key, 300, records / "probe-launcher.log"):
        yield key


def _workload(
    args: list[str], cwd: Path, env: dict[str, str] | None = None, log: Path | None = None, deadline_s: float = 30
) -> WorkloadRun:
    """`python -m traceladder.workload <args>` in cwd (its log: cwd/log.txt unless named)."""
    argv = [sys.executable, "-m", "traceladder.workload", *args]
    return WorkloadRun(argv, env or {}, cwd, log or cwd / "log.txt", deadline_s)


def _probe(tmp: Path, name: str, code: str, *extra: str, deadline_s: float = 60) -> tuple[int | None, bool, dict, str]:
    out = tmp / f"{name}.json"
    (tmp / name).mkdir()
    log = tmp / f"{name}.log"
    env = {"REQUEST_ONLY": name, "OMP_NUM_THREADS": "1"}
    outcome = warm.run(_workload([str(out), code, *extra], tmp / name, env=env, log=log, deadline_s=deadline_s))
    assert outcome is not None, "the probe launcher did not take the request"
    state = json.loads(out.read_text()) if out.exists() else {}
    return outcome[0], outcome[1], state, log.read_text()


def test_a_child_inherits_no_state(probe_launcher: str, tmp_path: Path) -> None:
    code, timed_out, first, log = _probe(tmp_path, "first", "0", "mess")
    assert (code, timed_out) == (0, False)
    assert f"probe ran in {tmp_path / 'first'}" in log and "probe stderr" in log  # stdout and stderr, in the log
    code, _, second, _ = _probe(tmp_path, "second", "0")
    assert code == 0
    fresh = json.loads(
        subprocess.run(
            [sys.executable, "-c", _FRESH], env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, check=True
        ).stdout
    )
    for child in (first, second):
        assert child["threads_at_start"] == 1  # the launcher started none, so none was forked
        assert child["num_threads"] == fresh["num_threads"] == 1  # the request's OMP_NUM_THREADS
        assert child["interop_threads"] == fresh["interop_threads"]
        assert child["env"]["OMP_NUM_THREADS"] == "1" and "LAUNCHER_ONLY" not in child["env"]
        assert not child["profiler"] and not child["dist"]
        assert child["session_leader"]  # a group of its own: the deadline kills it whole
        # none of the launcher's descriptors: its listening socket, its epoll, a pidfd
        assert not [
            t for t in child["fds"] if t.startswith(("socket:", "anon_inode:[eventpoll]", "anon_inode:[pidfd]"))
        ]
    assert first["env"]["REQUEST_ONLY"] == "first" and second["env"]["REQUEST_ONLY"] == "second"
    assert first["cwd"] == str(tmp_path / "first") and second["cwd"] == str(tmp_path / "second")
    # Fresh entropy per child, as two interpreters would have (the driver drew from its own).
    assert first["random"] != second["random"] and first["numpy"] != second["numpy"]
    assert len({str(first["torch_rng"]), str(second["torch_rng"]), str(fresh["torch_rng"])}) == 3
    # The first child's 64 MiB tensor, seed and thread count stayed in the first child.
    assert abs(second["rss_kb"] - first["rss_kb"]) < 16 * 1024


def test_exit_codes_and_signals_reach_the_runner(probe_launcher: str, tmp_path: Path) -> None:
    assert _probe(tmp_path, "three", "3")[:2] == (3, False)
    assert _probe(tmp_path, "killed", "kill")[:2] == (-signal.SIGKILL, False)


def test_the_deadline_stops_the_childs_group(probe_launcher: str, tmp_path: Path) -> None:
    t0 = time.monotonic()
    code, timed_out, state, log = _probe(tmp_path, "slow", "sleep", deadline_s=2)
    assert timed_out and code == -signal.SIGTERM
    assert time.monotonic() - t0 < 15
    assert "deadline of 2 s reached" in log
    assert not list(orphans.records_dir().glob("*.json")), "the stopped workload's record stayed"


def test_a_stuck_launcher_falls_back_to_a_cold_run(
    probe_launcher: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = orphans.read_launcher(orphans.launcher_path(warm.key_hash(probe_launcher)))
    assert doc is not None
    pid = int(doc["pid"])  # type: ignore[arg-type]
    said: list[str] = []
    monkeypatch.setattr(warm, "REPLY_TIMEOUT_S", 1.0)
    os.kill(pid, signal.SIGSTOP)
    try:
        outcome = warm.run(_workload(["x", "0"], tmp_path), say=said.append)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    assert outcome is None
    assert len(said) == 1 and "running the workload cold" in said[0]
    assert _gone(pid), "a stuck launcher is stopped, so the next rung starts a fresh one"


def _in_dag_run(monkeypatch: pytest.MonkeyPatch, run_id: str) -> str:
    """This test runs as a task of DAG run `run_id` (of the module's DAG); that run's launcher key."""
    monkeypatch.setenv("AIRFLOW_CTX_DAG_RUN_ID", run_id)
    key = warm.run_key()
    assert key is not None
    return key


def _tiny_args() -> list[str]:
    return render_overrides({**TINY_MODEL, "train_iters": 6, "expert_model_parallel_size": 2, "global_batch_size": 2})


def test_the_real_launcher_runs_the_proxy_with_forked_ranks_and_counts_only_the_runs_memory(
    records: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = _in_dag_run(monkeypatch, f"real-{os.getpid()}")
    env = {"PRIMUS_WORKSPACE": str(tmp_path / "output"), "PYTHONPATH": str(INCLUDE)}
    try:
        outcome = warm.run(_workload(_tiny_args(), tmp_path, env=env, deadline_s=120))
        assert outcome == (0, False), (tmp_path / "log.txt").read_text()[-2000:]
        doc = orphans.read_launcher(orphans.launcher_path(warm.key_hash(key)))
        assert doc is not None and orphans.launcher_alive(doc)
        statm = Path(f"/proc/{doc['pid']}/statm").read_text().split()
        launcher_rss_gb = int(statm[1]) * os.sysconf("SC_PAGE_SIZE") / 1024**3
        t0 = time.monotonic()
        outcome = warm.run(_workload(_tiny_args(), tmp_path, env=env, deadline_s=120))
        second_s = time.monotonic() - t0
        log = (tmp_path / "log.txt").read_text()
        assert outcome == (0, False), log[-2000:]
        peaks = [float(x) for x in re.findall(r"rocm max mem usage/usage_ratio: ([0-9.]+)GB", log)]
        assert len(peaks) >= 3, log[-2000:]  # the lines past the averaging warm-up carry it
        # The launcher's pages (torch, the workload) are not the run's memory.
        assert launcher_rss_gb > 0.2 and max(peaks) < launcher_rss_gb / 2, (launcher_rss_gb, peaks)
        print(f"warm second run: {second_s:.2f} s request to exit; launcher RSS {launcher_rss_gb:.2f} GB")
    finally:
        assert warm.stop_run("warm-test", f"real-{os.getpid()}")
    assert warm.stop_run("warm-test", f"real-{os.getpid()}") is False  # its record went with it


def test_without_a_launcher_the_rung_runs_cold_with_one_line(
    records: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AIRFLOW_CTX_DAG_RUN_ID", f"broken-{os.getpid()}")
    monkeypatch.setattr(warm, "START_TIMEOUT_S", 0.0)  # it cannot serve in time: stopped, and cold
    spec = type("Spec", (), {"backend": "local"})()
    argv = [sys.executable, "-m", "traceladder.workload", *_tiny_args()]
    env = {"PRIMUS_WORKSPACE": str(tmp_path / "output"), "PYTHONPATH": str(INCLUDE)}
    code, timed_out = _execute_workload(spec, WorkloadRun(argv, env, tmp_path, tmp_path / "log.txt", 120, sys.stdout))  # type: ignore[arg-type]
    said = [line for line in capsys.readouterr().out.splitlines() if "warm launcher" in line]
    assert (code, timed_out) == (0, False)
    assert len(said) == 1 and "running the workload cold" in said[0], said
    assert "iteration        6/       6" in (tmp_path / "log.txt").read_text()
    assert not list(orphans.launchers_dir().glob("*.json")) or all(
        not orphans.launcher_alive(d)
        for d in (orphans.read_launcher(p) for p in orphans.launchers_dir().glob("*.json"))
        if d is not None and "broken" in str(d.get("key"))
    )


StandIn = Callable[..., subprocess.Popen[bytes]]


@pytest.fixture
def stand_in(records: Path) -> Iterator[StandIn]:
    """Starts a long-lived process to stand in for a launcher (the sweep judges the record, not
    the program), its output to `log` if given; each is killed after the test, and a launcher
    record naming it is dropped."""
    started: list[subprocess.Popen[bytes]] = []

    def start(log: Path | None = None) -> subprocess.Popen[bytes]:
        with log.open("ab") if log is not None else contextlib.nullcontext() as out:
            started.append(subprocess.Popen(["sleep", "600"], stdout=out, start_new_session=True))
        return started[-1]

    yield start
    for proc in started:
        proc.kill()
        proc.wait()
    pids = {proc.pid for proc in started}
    for path in orphans.launchers_dir().glob("*.json"):
        doc = orphans.read_launcher(path)
        if doc is not None and doc.get("pid") in pids:
            path.unlink(missing_ok=True)


def test_the_sweep_stops_a_stale_launcher_and_spares_a_used_one(
    stand_in: StandIn,
) -> None:
    stale, used = stand_in(), stand_in()
    stale_path = orphans.record_launcher("stale0000", {"pid": stale.pid, "key": "old/run", "idle_s": 5})
    used_path = orphans.record_launcher("used00000", {"pid": used.pid, "key": "this/run", "idle_s": 5})
    gone_path = orphans.record_launcher("gone00000", {"pid": stale.pid, "key": "gone/run", "idle_s": 5})
    assert stale_path and used_path and gone_path
    gone_path.write_text(json.dumps({**json.loads(gone_path.read_text()), "start": "0"}))  # a reused pid
    old = time.time() - 5 - orphans.LAUNCHER_GRACE_S - 1
    os.utime(stale_path, (old, old))
    lines: list[str] = []
    stopped = orphans.stop_orphans(lines.append)
    assert stopped == [stale.pid]
    assert stale.wait(timeout=5) == -signal.SIGTERM
    assert used.poll() is None and used_path.exists()
    assert not stale_path.exists() and not gone_path.exists()
    assert len(lines) == 1 and "old/run" in lines[0] and "past its idle limit" in lines[0]


def test_an_idle_launcher_exits_by_itself(records: Path) -> None:
    with _serving_driver("idle/run", 0.5, records / "idle-launcher.log") as proc:
        assert proc.wait(timeout=30) == 0
    assert "idle for 0.5 s: exiting" in (records / "idle-launcher.log").read_text()


def _serves(name: str) -> bool:
    """Whether a socket is bound to the abstract name (/proc/net/unix lists it as @NAME)."""
    return any(
        line.split()[-1] == "@" + name
        for line in Path("/proc/net/unix").read_text().splitlines()[1:]
        if line.split()[7:]
    )


def test_a_ping_renews_the_lease_and_keep_alive_starts_none(records: Path) -> None:
    """keep_alive (the adaptive `look` between blocks) holds a launcher past its idle limit; without
    it the launcher goes after the limit (the bound on a DAG run killed between tasks, #53)."""
    key = "lease/run"
    log = records / "lease-launcher.log"
    dag_id, run_id = key.split("/")
    with _serving_driver(key, 2.0, log) as proc:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 5.0:  # 2.5 limits, renewed every 0.5 s
            assert warm.keep_alive(dag_id, run_id), "the serving launcher did not answer the ping"
            assert proc.poll() is None
            time.sleep(0.5)
        pinged = time.monotonic()
        # the socket closes when the launcher stops serving (a connect to see it would renew it:
        # read the kernel's list); the driver's own exit after that tears down torch, which varies
        while _serves(warm.socket_name(key)) and time.monotonic() - pinged < 30:
            time.sleep(0.05)
        lapsed_s = time.monotonic() - pinged
        assert proc.wait(timeout=30) == 0
    assert 1.0 <= lapsed_s <= 2.0 + 1.0, lapsed_s  # the limit less the last 0.5 s sleep, plus its 0.2 s poll
    assert "idle for 2 s: exiting" in log.read_text()
    assert not warm.keep_alive(dag_id, run_id)  # none serves now, and none was started
    assert warm._connect(warm.socket_name(key)) is None


def test_the_sweep_spares_a_launcher_with_a_workload_however_long_unused(stand_in: StandIn) -> None:
    """A launcher's lease is short, so its record's age alone must not judge it while a long rung
    runs: one with a live child is in use."""
    busy = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys; subprocess.run(['sleep', '600'])"], start_new_session=True
    )
    try:
        path = orphans.record_launcher("busy00000", {"pid": busy.pid, "key": "long/rung", "idle_s": 2})
        assert path
        deadline = time.monotonic() + 10
        while not Path(f"/proc/{busy.pid}/task/{busy.pid}/children").read_text().split():
            assert time.monotonic() < deadline, "the stand-in's child did not start"
            time.sleep(0.05)
        old = time.time() - 2 - orphans.LAUNCHER_GRACE_S - 60
        os.utime(path, (old, old))
        assert busy.pid not in orphans.stop_orphans()
        assert busy.poll() is None and path.exists()
    finally:
        os.killpg(busy.pid, signal.SIGKILL)
        busy.wait()
        orphans.launcher_path("busy00000").unlink(missing_ok=True)


def test_the_sweep_stops_the_launcher_of_a_dag_run_that_is_over(
    stand_in: StandIn,
) -> None:
    over, unknown = stand_in(), stand_in()
    for name, proc, run_id in (("over00000", over, "done"), ("unknown00", unknown, "lookup-fails")):
        doc = {"pid": proc.pid, "key": f"d/{run_id}", "dag_id": "d", "run_id": run_id, "idle_s": 600}
        assert orphans.record_launcher(name, doc)

    def run_over(dag_id: str, run_id: str) -> bool:
        if run_id == "lookup-fails":
            raise RuntimeError("the API server is away")
        return (dag_id, run_id) == ("d", "done")

    lines: list[str] = []
    assert orphans.stop_orphans(lines.append, run_over) == [over.pid]
    assert over.wait(timeout=5) == -signal.SIGTERM and unknown.poll() is None  # unknown is not over
    assert len(lines) == 1 and "d/done" in lines[0] and "its DAG run is over" in lines[0]


def test_the_sweep_removes_a_gone_launchers_old_log_and_no_live_ones(stand_in: StandIn) -> None:
    orphans.launchers_dir().mkdir(parents=True, exist_ok=True)
    live, lingering = stand_in(), stand_in(orphans.launcher_log_path("lingering"))
    logs = {name: orphans.launcher_log_path(name) for name in ("norecord", "dead", "live", "fresh", "lingering")}
    for name, log in logs.items():
        with log.open("a") as out:
            out.write(f"[warm] launcher of {name}\n")
    assert orphans.record_launcher("dead", {"pid": live.pid, "key": "d/dead", "idle_s": 5})
    dead = orphans.launcher_path("dead")  # a reused pid: the launcher it names is gone
    dead.write_text(json.dumps({**json.loads(dead.read_text()), "start": "0"}))
    assert orphans.record_launcher("live", {"pid": live.pid, "key": "d/live", "idle_s": 600})
    old = time.time() - orphans.LAUNCHER_LOG_MAX_AGE_S - 60
    for name in ("norecord", "dead", "live", "lingering"):  # "fresh" was written just now
        os.utime(logs[name], (old, old))
    assert orphans.stop_orphans() == []  # nothing to stop: the live launcher is within its idle limit
    kept = {name for name, log in logs.items() if log.exists()}
    # "lingering" has no record but a process writes to it: a launcher between its log and its
    # record, or one still going after its record was dropped
    assert kept == {"live", "fresh", "lingering"}
    # (other tests' gone launchers may leave logs here too: only these five are judged)
    removed = set(orphans.remove_old_launcher_logs(max_age_s=0.0)) & set(logs.values())
    assert removed == {logs["fresh"]}  # gone, and now old enough
    lingering.kill()
    lingering.wait()
    assert orphans.remove_old_launcher_logs() == [logs["lingering"]]  # gone now
    assert logs["live"].exists()
    logs["live"].unlink()


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_a_launcher_killed_during_a_run_fails_the_rung_and_stops_its_workload(
    records: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = _in_dag_run(monkeypatch, f"killed-{os.getpid()}")
    with _serving_driver(key, 300, records / "killed-launcher.log") as proc:
        threading.Timer(2.0, proc.kill).start()
        code, timed_out, state, log = _probe(tmp_path, "orphaned", "sleep", deadline_s=60)
        assert (code, timed_out) == (None, False)
        assert "the warm launcher died during the run; the workload was stopped" in log
        until = time.monotonic() + 5
        while not _gone(state["pid"]) and time.monotonic() < until:
            time.sleep(0.05)
        assert _gone(state["pid"]), "the workload outlived its launcher"
        # The next rung runs cold, with one line; the dead launcher's record goes (the rung after
        # starts a fresh one).
        said: list[str] = []
        assert warm.run(_workload(["x", "0"], tmp_path), say=said.append) is None
        assert len(said) == 1 and "does not answer" in said[0] and "running the workload cold" in said[0]
        assert not orphans.launcher_path(warm.key_hash(key)).exists()
