"""A real, throwaway Slurm cluster on this machine for the `slurm` tests (issue 27).

Debian's slurm-wlm 22.05 is built with multiple-slurmd support, so one host runs one `slurmctld`
and two `slurmd -N n1|n2` as separate nodes. Everything lives in one temporary directory: a munge
key and socket of the test's own (`munged --key-file --socket`, and slurm.conf's
`AuthInfo=socket=`), a slurm.conf without accounting, and an `sshd` on a free loopback port with a
temporary host key and authorized_keys, which plays the cluster's login node. Nothing of the
machine's own Slurm, munge or sshd configuration is read or written; `stop()` ends every process
`start()` began (by its pid) and removes the directory.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from traceladder.core.ports import free_port

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "sshd", "ssh-keygen")
SBIN = ("/usr/sbin", "/usr/bin", "/sbin", "/bin")
NODES = ("n1", "n2")


class ClusterError(RuntimeError):
    """The test cluster could not start; the message names the part and its log's last lines."""


def which(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for folder in SBIN:  # sshd/munged live in sbin, often off a non-root PATH
        candidate = Path(folder) / name
        if candidate.exists():
            return str(candidate)
    return None


def missing_binaries() -> list[str]:
    return [b for b in BINARIES if which(b) is None]


def job_pids(job_id: str) -> list[int]:
    """This host's processes of one Slurm job: its slurmstepd (`slurmstepd: [<id>.<step>]`) and
    every process whose environment carries SLURM_JOB_ID=<id> (the batch script, srun, the tasks)."""
    found = []
    stepd = f"slurmstepd: [{job_id}.".encode()
    env = f"\0SLURM_JOB_ID={job_id}\0".encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if (proc / "cmdline").read_bytes().startswith(stepd) or env in b"\0" + (
                proc / "environ"
            ).read_bytes() + b"\0":
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def _tail(path: Path, lines: int = 5) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return "(no log)"


@dataclass
class SlurmCluster:
    """One controller, two nodes, munge and a login sshd, all under `root`."""

    root: Path
    slurmd_timeout_s: int = 5
    ctld_port: int = field(default_factory=free_port)
    node_ports: dict[str, int] = field(default_factory=lambda: {n: free_port() for n in NODES})
    ssh_port: int = field(default_factory=free_port)
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    # ---- paths
    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        return self.root / "munge" / "munge.socket"

    @property
    def client_key(self) -> Path:
        return self.root / "ssh" / "id_ed25519"

    def ssh_connection(self) -> dict[str, object]:
        """The login node as an Airflow SSH connection (host, port, user, key file)."""
        return {
            "conn_type": "ssh",
            "host": "127.0.0.1",
            "port": self.ssh_port,
            "login": "root",
            "extra": {"key_file": str(self.client_key), "no_host_key_check": True},
        }

    @property
    def host(self) -> str:
        return socket.gethostname()

    @property
    def env(self) -> dict[str, str]:
        """What a local Slurm client command needs to reach this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    # ---- lifecycle
    def start(self, timeout_s: float = 60.0) -> SlurmCluster:
        try:
            self._start_munge()
            self._write_slurm_conf()
            self._spawn("slurmctld", [which("slurmctld") or "slurmctld", "-D", "-c", "-f", str(self.conf)])
            self._wait_for(lambda: self.scontrol("ping").returncode == 0, "slurmctld", self.root / "ctld.log", 30)
            for node in NODES:
                self.start_node(node)
            self.wait_idle(timeout_s)
            self._start_sshd()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            self._cancel_all()
        for name in reversed(list(self.procs)):
            self._end(name)
        shutil.rmtree(self.root, ignore_errors=True)

    def _cancel_all(self, timeout_s: float = 15.0) -> None:
        """Cancel this cluster's jobs and wait until their steps are gone, so no job process
        outlives the slurmds that would have reaped it."""
        self.run(which("scancel") or "scancel", "--user=root")
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            out = self.run(which("squeue") or "squeue", "-h", "-t", "PD,R,CG,S", "-o", "%i").stdout
            if not out.strip():
                return
            time.sleep(0.3)

    def start_node(self, node: str) -> None:
        self._spawn(
            f"slurmd-{node}", [which("slurmd") or "slurmd", "-D", "-f", str(self.conf), "-N", node], env=self.env
        )

    def kill_node(self, node: str, job_id: str | None = None) -> list[int]:
        """SIGKILL a node's slurmd and, with `job_id`, that job's processes (its slurmstepd and
        tasks), as a node losing power takes them: both "nodes" share this host, so the job
        must be on `node` alone. Returns the job pids killed."""
        self._end(f"slurmd-{node}", sig=signal.SIGKILL)
        pids = job_pids(job_id) if job_id else []
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
        return pids

    def restart_ctld(self) -> None:
        """Stop and start slurmctld on its saved state (no -c), as an operator's restart does."""
        self._end("slurmctld")
        self._spawn("slurmctld", [which("slurmctld") or "slurmctld", "-D", "-f", str(self.conf)])
        self._wait_for(lambda: self.scontrol("ping").returncode == 0, "slurmctld", self.root / "ctld.log", 30)

    def stop_ctld(self) -> None:
        self._end("slurmctld")

    # ---- commands
    def run(self, *argv: str, timeout: float = 20) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=timeout)

    def scontrol(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run(which("scontrol") or "scontrol", *args)

    def node_states(self) -> dict[str, str]:
        out = self.run(which("sinfo") or "sinfo", "-h", "-N", "-o", "%N %T").stdout
        return dict(line.split()[:2] for line in out.splitlines() if line.strip())

    def wait_idle(self, timeout_s: float = 60.0) -> None:
        self._wait_for(
            lambda: all(self.node_states().get(n, "").rstrip("*") == "idle" for n in NODES),
            "slurmd n1/n2 (nodes never became idle)",
            self.root / "d-n2.log",
            timeout_s,
        )

    def ssh_argv(self) -> list[str]:
        """An ssh command line onto the login node, for tests that check it by hand."""
        return [
            "ssh",
            "-p",
            str(self.ssh_port),
            "-i",
            str(self.client_key),
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            f"UserKnownHostsFile={self.root / 'ssh' / 'known_hosts'}",
            "-o",
            "BatchMode=yes",
            "root@127.0.0.1",
        ]

    # ---- parts
    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        log = (self.root / f"{name}.out").open("wb")
        self.procs[name] = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=env or self.env, start_new_session=True
        )
        log.close()

    def _end(self, name: str, sig: int = signal.SIGTERM) -> None:
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(sig)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)

    def _wait_for(self, ready, what: str, log: Path, timeout_s: float) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if ready():
                return
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise ClusterError(f"{name} exited {proc.returncode}: {_tail(self.root / f'{name}.out')}")
            time.sleep(0.3)
        raise ClusterError(f"{what} not ready after {timeout_s:.0f} s: {_tail(log)}")

    def _start_munge(self) -> None:
        folder = self.root / "munge"
        folder.mkdir(mode=0o700)
        key = folder / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        argv = [
            which("munged") or "munged",
            "--foreground",
            "--force",
            f"--key-file={key}",
            f"--socket={self.munge_socket}",
            f"--pid-file={folder / 'munged.pid'}",
            f"--log-file={folder / 'munged.log'}",
            f"--seed-file={folder / 'munged.seed'}",
        ]
        self._spawn("munged", argv)
        self._wait_for(self.munge_socket.exists, "munged", folder / "munged.log", 15)

    def _write_slurm_conf(self) -> None:
        root, host = self.root, self.host
        (root / "state").mkdir()
        nodes = "\n".join(
            f"NodeName={n} NodeHostname={host} NodeAddr=127.0.0.1 Port={self.node_ports[n]} CPUs=1 RealMemory=500"
            for n in NODES
        )
        self.conf.write_text(
            f"""# traceladder's throwaway test cluster (tests/integration/slurm_cluster.py)
ClusterName=traceladder
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={self.ctld_port}
SlurmdPort={self.node_ports[NODES[0]]}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self.munge_socket}
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=1
SlurmdTimeout={self.slurmd_timeout_s}
SlurmctldTimeout=10
MessageTimeout=5
KillWait=3
InactiveLimit=0
MinJobAge=300
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
StateSaveLocation={root / "state"}
SlurmdSpoolDir={root}/spool-%n
SlurmctldPidFile={root}/ctld.pid
SlurmctldLogFile={root}/ctld.log
SlurmdPidFile={root}/d-%n.pid
SlurmdLogFile={root}/d-%n.log
SlurmctldDebug=info
SlurmdDebug=info
{nodes}
PartitionName=p Nodes={",".join(NODES)} Default=YES MaxTime=30 State=UP
"""
        )

    def _start_sshd(self) -> None:
        folder = self.root / "ssh"
        folder.mkdir(mode=0o700)
        keygen = which("ssh-keygen") or "ssh-keygen"
        for path in (folder / "host_ed25519", self.client_key):
            subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True, capture_output=True)
        (folder / "authorized_keys").write_text((folder / "id_ed25519.pub").read_text())
        (folder / "authorized_keys").chmod(0o600)
        (folder / "sshd_config").write_text(
            f"""ListenAddress 127.0.0.1
Port {self.ssh_port}
HostKey {folder / "host_ed25519"}
AuthorizedKeysFile {folder / "authorized_keys"}
PidFile {folder / "sshd.pid"}
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
PermitRootLogin prohibit-password
UsePAM no
StrictModes no
# The login node's users reach this cluster's controller, as /etc/slurm/slurm.conf would give them.
SetEnv SLURM_CONF={self.conf}
"""
        )
        # Debian's sshd refuses to start without its privilege-separation directory (normally
        # made by the package's service unit); an empty directory, no configuration.
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        sshd = which("sshd") or "/usr/sbin/sshd"  # sshd re-executes itself: an absolute path
        self._spawn("sshd", [sshd, "-D", "-e", "-f", str(folder / "sshd_config")])
        # A roomy probe: a login that is slow (root's shell rc files, a loaded box) must not be
        # killed halfway, which can leave the rc files' locks behind (pyenv's rehash lock here).
        self._wait_for(
            lambda: subprocess.run([*self.ssh_argv(), "true"], capture_output=True, timeout=60).returncode == 0,
            "sshd (login node)",
            self.root / "sshd.out",
            90,
        )


def start_cluster(slurmd_timeout_s: int = 5) -> SlurmCluster:
    return SlurmCluster(Path(tempfile.mkdtemp(prefix="traceladder-slurm-")), slurmd_timeout_s).start()
