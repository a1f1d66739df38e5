"""``SlurmJobTrigger``: the deferred side of ``SlurmRungOperator`` (airflow/operators/slurm.py).

It polls ``scontrol show job -o`` through ``SSHHookAsync`` (asyncssh: the triggerer's event loop
never blocks), keeps polling while slurmctld or the login node is unreachable (up to
``down_grace_s``), and serialises only ids and numbers, never a secret. Its ``on_kill`` (a user
marked the deferred task failed/succeeded, or cleared it) cancels the job with ``scancel``; a
triggerer restart calls no ``on_kill``, so the job keeps running and the next triggerer polls it
again."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

from airflow.triggers.base import BaseTrigger, TriggerEvent

from traceladder.airflow.hooks.slurm import cancel_async, job_state_async
from traceladder.core.documents import JSONObject
from traceladder.core.errors import first_line

TRIGGER_PATH = "traceladder.airflow.triggers.slurm.SlurmJobTrigger"


class SlurmJobTrigger(BaseTrigger):
    """Fires once the Slurm job has ended (or the controller no longer knows it).

    :param job_id: The Slurm job id.
    :param ssh_conn_id: The Airflow SSH connection of the login node (the secrets stay in it).
    :param poll_s: Seconds between polls.
    :param down_grace_s: How long polls may fail in a row (slurmctld restarting, the login node
        rebooting) before the trigger gives up with an ``error`` event.
    """

    def __init__(self, job_id: str, ssh_conn_id: str, poll_s: float = 15.0, down_grace_s: float = 600.0) -> None:
        super().__init__()
        self.job_id = str(job_id)
        self.ssh_conn_id = ssh_conn_id
        self.poll_s = float(poll_s)
        self.down_grace_s = float(down_grace_s)

    def serialize(self) -> tuple[str, JSONObject]:
        return TRIGGER_PATH, {
            "job_id": self.job_id,
            "ssh_conn_id": self.ssh_conn_id,
            "poll_s": self.poll_s,
            "down_grace_s": self.down_grace_s,
        }

    async def run(self) -> AsyncIterator[TriggerEvent]:
        failing_since: float | None = None
        while True:
            try:
                state = await job_state_async(self.ssh_conn_id, self.job_id)
            except Exception as exc:  # noqa: BLE001 - ssh, asyncssh and Slurm failures alike: retry
                text = first_line(exc)
                if "Invalid job id" in text:  # finished longer than MinJobAge ago: the store says how
                    yield TriggerEvent({"status": "gone", "job_id": self.job_id, "error": text})
                    return
                now = time.monotonic()
                failing_since = failing_since or now
                if now - failing_since > self.down_grace_s:
                    yield TriggerEvent({"status": "error", "job_id": self.job_id, "error": text})
                    return
                self.log.warning("job %s: poll failed (%s); retrying", self.job_id, text)
                await asyncio.sleep(self.poll_s)
                continue
            failing_since = None
            if state.terminal:
                yield TriggerEvent({"status": "done", **state.to_json()})
                return
            await asyncio.sleep(self.poll_s)

    async def on_kill(self) -> None:
        self.log.info("cancelling Slurm job %s", self.job_id)
        await cancel_async(self.ssh_conn_id, self.job_id)
