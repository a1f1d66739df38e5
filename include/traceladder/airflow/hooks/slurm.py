"""The Slurm client of the slurm backend (issue 27): `sbatch`, `squeue`, `scontrol`, `scancel` and
`sinfo` on the cluster's login node over SSH, through apache-airflow-providers-ssh's `SSHHook`
(the worker side, in `SlurmHook`, connection type `slurm`) and `SSHHookAsync` (the trigger side).

The job script is rendered here, from the cluster's `slurm:` settings (config/models.py
`SlurmSettings`): `#SBATCH -N <nnodes> --exclusive --no-requeue --time=<minutes>`, the site's
partition/account/QoS/reservation, and one `srun` task per node that starts the runner (directly, or
in a docker/podman container per node as Primus's Slurm mode does) with torchrun's multi-node
environment: `NNODES`, `NODE_RANK`, `GPUS_PER_NODE`, `MASTER_ADDR` (the first node's `NodeAddr`)
and `MASTER_PORT` (a free port on that node).

The parsing helpers are pure functions, so the unit tests need no cluster.
"""

from __future__ import annotations

import hashlib
import math
import re
import shlex
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow.sdk import BaseHook

from traceladder.core.env_vars import NODE_DIR, SHARED_DIR, SPOOL_DIR
from traceladder.config.models import SlurmSettings
from traceladder.core.errors import TraceladderError, first_line

# Seconds the job's --time adds to the rung's timeout_s: the runner's own deadline (timeout_s)
# stays shorter than Slurm's, so a timed-out rung still uploads its log and partial traces.
UPLOAD_GRACE_S = 120
# States after which the job runs nothing more (squeue's long names).
TERMINAL_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "REVOKED",
        "SPECIAL_EXIT",
        "TIMEOUT",
    }
)
USABLE_NODE_STATES = frozenset({"IDLE", "MIXED", "ALLOCATED", "COMPLETING"})
_KV_RE = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/]*)=(\S*)")
JOB_ID_RE = re.compile(r"^\d+(?:;\S+)?$")


class SlurmError(TraceladderError, RuntimeError):
    """A Slurm command failed on the login node; the message is one line."""


def time_limit_minutes(timeout_s: int) -> int:
    """`--time` in whole minutes, rounded up, with the upload grace on top of the runner's deadline."""
    return max(1, math.ceil((timeout_s + UPLOAD_GRACE_S) / 60))


JOB_NAME_PREFIX = "traceladder-"


def job_name(dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> str:
    """The job's name, the same for every try of one task instance: a retry finds the job a
    dead worker submitted by this name (`squeue -n`) instead of submitting a second one."""
    digest = hashlib.sha1(f"{dag_id}|{run_id}|{task_id}|{map_index}".encode(), usedforsecurity=False).hexdigest()
    return f"{JOB_NAME_PREFIX}{digest[:16]}"


# A job's --comment names the task instance that submitted it, so that a later rung's preflight can
# tell an orphan (its task instance no longer runs) from a live job: `ti=<dag>/<run>/<task>/<map>`,
# each part percent-encoded (no spaces, no slashes inside a part).
OWNER_PREFIX = "ti="


@dataclass(frozen=True)
class JobOwner:
    """The task instance that submitted a job (from the job's comment)."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int = -1


def owner_comment(owner: JobOwner) -> str:
    parts = (owner.dag_id, owner.run_id, owner.task_id, str(owner.map_index))
    return OWNER_PREFIX + "/".join(urllib.parse.quote(p, safe="") for p in parts)


def parse_owner(comment: str) -> JobOwner | None:
    """The owner in a job's comment, or None for a job traceladder did not submit."""
    if not comment.startswith(OWNER_PREFIX):
        return None
    parts = [urllib.parse.unquote(p) for p in comment[len(OWNER_PREFIX) :].split("/")]
    if len(parts) != 4 or not parts[3].lstrip("-").isdigit():
        return None
    return JobOwner(parts[0], parts[1], parts[2], int(parts[3]))


def parse_fields(line: str) -> dict[str, str]:
    """`scontrol show job|node -o` output: one line of `Key=Value` pairs."""
    return {m.group(1): m.group(2) for m in _KV_RE.finditer(line.strip())}


def parse_job_id(sbatch_stdout: str) -> str:
    """`sbatch --parsable` prints `<id>` or `<id>;<cluster>`."""
    text = sbatch_stdout.strip().splitlines()[-1].strip() if sbatch_stdout.strip() else ""
    if not JOB_ID_RE.match(text):
        raise SlurmError(f"sbatch printed no job id: {sbatch_stdout.strip()[:200]!r}")
    return text.split(";", 1)[0]


@dataclass(frozen=True)
class JobState:
    """What `scontrol show job -o` says about one job."""

    job_id: str
    state: str  # RUNNING, PENDING, COMPLETED, NODE_FAIL, ... (the first word of JobState)
    nodes: str  # NodeList, e.g. n[1-2]; "(null)" while pending
    exit_code: str  # "0:0" (exit status:signal)
    reason: str

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    def to_json(self) -> dict[str, str]:
        return {
            "job_id": self.job_id,
            "state": self.state,
            "nodes": self.nodes,
            "exit_code": self.exit_code,
            "reason": self.reason,
        }


def parse_job(line: str) -> JobState:
    fields = parse_fields(line)
    if "JobId" not in fields or "JobState" not in fields:
        raise SlurmError(f"not a `scontrol show job -o` line: {line.strip()[:200]!r}")
    return JobState(
        job_id=fields["JobId"],
        state=fields["JobState"].split("+", 1)[0],
        nodes=fields.get("NodeList", ""),
        exit_code=fields.get("ExitCode", ""),
        reason=fields.get("Reason", ""),
    )


def unusable_nodes(sinfo_lines: str) -> dict[str, str]:
    """`sinfo -h -N -o '%N %T %E'` → the nodes that take no new job (drained, down, ...) and why."""
    out: dict[str, str] = {}
    for line in sinfo_lines.splitlines():
        parts = line.split(None, 2)
        if len(parts) < 2:
            continue
        state = parts[1].rstrip("*~#!%$@^-").upper()
        if state not in USABLE_NODE_STATES:
            out[parts[0]] = f"{parts[1]}" + (f" ({parts[2]})" if len(parts) > 2 and parts[2] != "none" else "")
    return out


def sbatch_script(
    settings: SlurmSettings,
    *,
    name: str,
    nnodes: int,
    timeout_s: int,
    job_dir: str,
    node_argv: Sequence[str],
    environment: Mapping[str, str],
    gpus_per_node: int | None,
    image: str | None,
    secrets_file: str | None = None,
    owner: JobOwner | None = None,
) -> str:
    """The batch script: `#SBATCH` options, the multi-node environment, one `srun` task per node.

    `node_argv` is the runner's command (`traceladder run-rung ...`); `environment` is exported to
    every node (no secrets: it is visible in the script); `secrets_file` (a 0600 file in the job's
    directory) is sourced and removed as the job starts, so keys never reach the controller's state.
    `owner` (the submitting task instance) goes into `--comment`, for the orphan sweep.
    """
    opts = [
        f"--job-name={name}",
        f"--nodes={nnodes}",
        "--ntasks-per-node=1",
        "--exclusive",
        "--no-requeue",
        f"--time={time_limit_minutes(timeout_s)}",
        f"--output={job_dir}/slurm-%j.out",
        f"--chdir={job_dir}",
        *([f"--comment={owner_comment(owner)}"] if owner else []),
    ]
    for flag, value in (
        ("partition", settings.partition),
        ("account", settings.account),
        ("qos", settings.qos),
        ("reservation", settings.reservation),
    ):
        if value:
            opts.append(f"--{flag}={value}")
    if gpus_per_node:
        opts.append(f"--gpus-per-node={gpus_per_node}")
    opts += settings.extra_sbatch
    exports = "\n".join(f"export {k}={shlex.quote(v)}" for k, v in sorted(environment.items()))
    node_cmd = _node_command(settings, node_argv, environment, image)
    lines = [
        "#!/bin/bash",
        *(f"#SBATCH {o}" for o in opts),
        "set -euo pipefail",
        "# traceladder (issue 27): one runner per node, torchrun's multi-node contract in the environment",
        exports,
    ]
    if secrets_file:
        lines += [f"set -a; . {shlex.quote(secrets_file)}; set +a; rm -f {shlex.quote(secrets_file)}"]
    lines += [
        'export NNODES="$SLURM_JOB_NUM_NODES"',
        *([f"export GPUS_PER_NODE={gpus_per_node}"] if gpus_per_node else []),
        'first_node="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"',
        # NodeAddr (default NodeHostname) is what the other nodes reach the first one at
        'export MASTER_ADDR="$(scontrol show node -o "$first_node" | sed -n \'s/.*NodeAddr=\\([^ ]*\\).*/\\1/p\')"',
        'export MASTER_PORT="$(python3 -c \'import socket; s=socket.socket(); s.bind(("", 0)); '
        "print(s.getsockname()[1])')\"",
        'echo "[traceladder] job $SLURM_JOB_ID on $SLURM_JOB_NODELIST: '
        'MASTER_ADDR=$MASTER_ADDR MASTER_PORT=$MASTER_PORT"',
        # a folder of the job's on the shared filesystem, where the nodes of a multi-node rung meet
        f"export TRACELADDER_NODE_DIR={shlex.quote(job_dir)}/nodes-$SLURM_JOB_ID",
        # no --kill-on-bad-exit: the last node records a peer's failure in the rung's metrics.json
        f"exec srun --nodes={nnodes} --ntasks-per-node=1 bash -c {shlex.quote(node_cmd)}",
        "",
    ]
    return "\n".join(lines)


def _node_command(
    settings: SlurmSettings, node_argv: Sequence[str], environment: Mapping[str, str], image: str | None
) -> str:
    """What each node's task runs: NODE_RANK from Slurm, then the runner, directly or in a container."""
    runner = " ".join(shlex.quote(a) for a in node_argv)
    if settings.container_runtime == "direct":
        return f'export NODE_RANK="$SLURM_NODEID"; exec {settings.runner_command} {runner}'
    if not image:
        raise SlurmError("a container runtime needs the runner image (the cluster's runner_image)")
    names = [
        *sorted(environment),
        "NNODES",
        "NODE_RANK",
        "GPUS_PER_NODE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "SLURM_JOB_ID",
        "SLURM_JOB_NODELIST",
        "SLURM_NODEID",
        NODE_DIR.name,
    ]
    spool = SPOOL_DIR.get(environment)
    shared = SHARED_DIR.get(environment)
    # madengine's ROCm docker run, host networking (MASTER_ADDR is a node address), one container per node
    argv = [
        settings.container_runtime,
        "run",
        "--rm",
        "--name",
        "traceladder-slurm-$SLURM_JOB_ID-$SLURM_NODEID",
        "--network=host",
        "--ipc=host",
        "--group-add=video",
        "--cap-add=SYS_PTRACE",
        "--security-opt=seccomp=unconfined",
        "--device=/dev/kfd",
        "--device=/dev/dri",
        *(["-v", f"{spool}:{spool}"] if spool else []),
        *(["-v", f"{shared}:{shared}"] if shared else []),
    ]
    env_flags = " ".join(f"-e {n}" for n in names)
    head = " ".join(a if "$" in a else shlex.quote(a) for a in argv)
    return f'export NODE_RANK="$SLURM_NODEID"; exec {head} {env_flags} {shlex.quote(image)} traceladder {runner}'


class SlurmHook(BaseHook):
    """Slurm commands on the cluster's login node, over SSH (host, port, login, key file).

    Its connection is either of type ``slurm`` (this hook's own, registered through the provider
    info with its form fields) or a plain ``ssh`` connection: both are read by the SSH provider's
    ``SSHHook``, which checks no connection type, so the ``ssh`` connections clusters.yaml names
    today keep working.

    :param ssh_conn_id: The Airflow connection of the cluster's login node.
    :param cmd_timeout: Seconds one command may take (sbatch under a busy controller is slow).
    """

    conn_name_attr = "ssh_conn_id"
    default_conn_name = "slurm_default"
    conn_type = "slurm"
    hook_name = "Slurm (login node over SSH)"

    def __init__(self, ssh_conn_id: str = default_conn_name, cmd_timeout: float = 60.0) -> None:
        super().__init__()
        self.ssh_conn_id = ssh_conn_id
        self.cmd_timeout = cmd_timeout
        self._ssh: Any = None

    @property
    def ssh(self) -> Any:
        if self._ssh is None:
            from airflow.providers.ssh.hooks.ssh import SSHHook

            self._ssh = SSHHook(ssh_conn_id=self.ssh_conn_id, cmd_timeout=self.cmd_timeout)
        return self._ssh

    def get_conn(self) -> Any:
        """The login node's paramiko client; SSHHook keeps one while its transport lives."""
        return self.ssh.get_conn()

    def run(self, command: str, check: bool = True) -> str:
        # SSHHook keeps one connection while its transport lives: one login per hook, not per command
        client = self.get_conn()
        rc, out, err = self.ssh.exec_ssh_client_command(client, command, get_pty=False, environment=None)
        if check and rc != 0:
            text = (err or out).decode(errors="replace").strip().splitlines()
            raise SlurmError(f"`{command.split()[0]}` on {self.ssh_conn_id} exited {rc}: {text[-1] if text else ''}")
        return out.decode(errors="replace")

    def close(self) -> None:
        if self._ssh is not None and self._ssh.client is not None:
            self._ssh.client.close()
            self._ssh.client = None

    def __enter__(self) -> SlurmHook:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def put_file(self, path: str, text: str, mode: str = "600") -> None:
        """Write a file on the login node (the shared filesystem), created with `mode` (never wider).
        The text goes through the command's stdin, never its command line: SSHHook logs command
        lines, and the secrets file holds keys."""
        target = shlex.quote(path)
        command = (
            f"umask 077 && mkdir -p {shlex.quote(path.rsplit('/', 1)[0])} && cat > {target} && chmod {mode} {target}"
        )
        stdin, stdout, stderr = self.ssh.get_conn().exec_command(command, timeout=self.cmd_timeout)
        stdin.write(text.encode())
        stdin.flush()
        stdin.channel.shutdown_write()
        rc = stdout.channel.recv_exit_status()
        if rc != 0:
            err = stderr.read().decode(errors="replace").strip().splitlines()
            raise SlurmError(f"writing {path} on {self.ssh_conn_id} exited {rc}: {err[-1] if err else ''}")

    def home(self) -> str:
        return self.run("echo $HOME").strip()

    def submit(self, script_path: str) -> str:
        return parse_job_id(self.run(f"sbatch --parsable {shlex.quote(script_path)}"))

    def find_job(self, name: str) -> str | None:
        """A job of this name the controller still knows (queued, running, or finished less than
        MinJobAge ago): the one a previous try submitted."""
        out = self.run(f"squeue -h --states=all --name={shlex.quote(name)} -o %i")
        ids = [line.strip() for line in out.splitlines() if line.strip()]
        return ids[-1] if ids else None

    def owned_jobs(self) -> list[tuple[str, str, JobOwner]]:
        """Every queued or running job that traceladder submitted: (job id, name, owner)."""
        out = self.run("squeue -h --states=PD,R,S,CF,RS -o '%i|%j|%k'")
        jobs = []
        for line in out.splitlines():
            parts = line.strip().split("|", 2)
            if len(parts) == 3 and parts[1].startswith(JOB_NAME_PREFIX):
                owner = parse_owner(parts[2])
                if owner is not None:
                    jobs.append((parts[0], parts[1], owner))
        return jobs

    def job(self, job_id: str) -> JobState:
        return parse_job(self.run(f"scontrol show job -o {shlex.quote(job_id)}"))

    def wait(self, job_id: str, poll_s: float, down_grace_s: float, timeout_s: float) -> JobState:
        """Poll the job until it ends (a synchronous caller's `SlurmJobTrigger`): failed polls are
        retried for `down_grace_s` (a controller restart, a login node reboot: the next poll logs in
        again); a job still not ended after `timeout_s` is a SlurmError naming its state."""
        started = time.monotonic()
        failing_since: float | None = None
        while True:
            try:
                state = self.job(job_id)
            except Exception as exc:  # noqa: BLE001 - ssh and Slurm failures alike: retry in the grace
                text = first_line(exc)
                if "Invalid job id" in text:  # ended longer than MinJobAge ago: the store says how
                    return JobState(job_id, "GONE", "", "", text)
                now = time.monotonic()
                failing_since = failing_since or now
                if now - failing_since > down_grace_s:
                    raise SlurmError(
                        f"Slurm job {job_id}: {self.ssh_conn_id} unreachable for {down_grace_s:.0f} s: {text}"
                    ) from None
                self.close()
                time.sleep(poll_s)
                continue
            failing_since = None
            if state.terminal:
                return state
            if time.monotonic() - started > timeout_s:
                waited = f"still {state.state} after {timeout_s:.0f} s ({state.reason})"
                raise SlurmError(f"Slurm job {job_id} on {self.ssh_conn_id} {waited}")
            time.sleep(poll_s)

    def cancel(self, job_id: str) -> None:
        self.run(f"scancel {shlex.quote(job_id)}", check=False)

    def unusable_nodes(self, partition: str | None, nodes: str | None = None) -> dict[str, str]:
        part = f" -p {shlex.quote(partition)}" if partition else ""
        if nodes:
            part += f" -n {shlex.quote(nodes)}"
        return unusable_nodes(self.run(f"sinfo -h -N{part} -o '%N %T %E'"))

    def usable_node_count(self, partition: str | None) -> int:
        part = f" -p {shlex.quote(partition)}" if partition else ""
        out = self.run(f"sinfo -h -N{part} -o '%N %T %E'")
        names = {line.split()[0] for line in out.splitlines() if line.strip()}
        return len(names) - len(unusable_nodes(out))


async def job_state_async(ssh_conn_id: str, job_id: str, timeout_s: float = 30.0) -> JobState:
    """`scontrol show job -o` through SSHHookAsync (asyncssh): never blocks the triggerer's loop."""
    from airflow.providers.ssh.hooks.ssh import SSHHookAsync

    rc, out, err = await SSHHookAsync(ssh_conn_id=ssh_conn_id).run_command(
        f"scontrol show job -o {shlex.quote(job_id)}", timeout=timeout_s
    )
    if rc != 0:
        text = (err or out).strip().splitlines()
        raise SlurmError(f"scontrol show job {job_id} exited {rc}: {text[-1] if text else ''}")
    return parse_job(out)


async def cancel_async(ssh_conn_id: str, job_id: str, timeout_s: float = 30.0) -> None:
    from airflow.providers.ssh.hooks.ssh import SSHHookAsync

    await SSHHookAsync(ssh_conn_id=ssh_conn_id).run_command(f"scancel {shlex.quote(job_id)}", timeout=timeout_s)
