"""Task retry arguments from a ladder's `retries:` policy (config.models.RetryPolicy).

Which failures retry is decided where they are raised: a rung whose workload failed, and a trace
that cannot be analysed, raise AirflowFailException (never retried); S3 and preflight errors
raise plain exceptions, which retry with these arguments."""

from __future__ import annotations

from datetime import timedelta
from typing import TypedDict

from traceladder.config.models import RetryPolicy


class RetryArgs(TypedDict):
    """A task's retry keyword arguments (BaseOperator's)."""

    retries: int
    retry_delay: timedelta
    retry_exponential_backoff: bool
    max_retry_delay: timedelta


def _backoff(policy: RetryPolicy, retries: int) -> RetryArgs:
    return {
        "retries": retries,
        "retry_delay": timedelta(seconds=policy.delay_s),
        "retry_exponential_backoff": True,
        "max_retry_delay": timedelta(seconds=policy.max_delay_s),
    }


def safe_task_args(policy: RetryPolicy | None = None) -> RetryArgs:
    """Plan, trace collection, analysis, rank join, summary and publish: idempotent, same keys."""
    policy = policy or RetryPolicy()
    return _backoff(policy, policy.tasks)


def rung_task_args(policy: RetryPolicy | None = None) -> RetryArgs:
    """Rungs: retried only for infrastructure failures (the failure type decides)."""
    policy = policy or RetryPolicy()
    return _backoff(policy, policy.rung_infra)
