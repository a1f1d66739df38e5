"""What every fuzz target checks, and the bounded hypothesis settings they share.

The contract (issue 19): an input either works, or fails with the parser's own error whose text is
one line naming the file (or the spec) and the field; no other exception, no hang. A hang shows up
as hypothesis's deadline being exceeded (each example is timed)."""

from __future__ import annotations

import contextlib
import io
import os
from hypothesis import HealthCheck, settings

# Bounded so that the whole fuzz set stays well under a minute on this 2-core machine; CI may
# raise it with TRACELADDER_FUZZ_EXAMPLES (a soak run locally).
EXAMPLES = int(os.environ.get("TRACELADDER_FUZZ_EXAMPLES", "0")) or None


def fuzz_settings(examples: int, deadline_ms: int = 3000) -> settings:
    return settings(
        max_examples=EXAMPLES or examples,
        deadline=deadline_ms,
        derandomize=True,  # the same inputs in every run: CI stays reproducible
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
        database=None,
    )


def assert_one_line(message: str, starts_with: str | None = None) -> None:
    assert message, "empty error message"
    assert "\n" not in message.strip(), f"error is more than one line: {message!r}"
    assert "Traceback" not in message, message
    if starts_with is not None:
        assert message.startswith(starts_with), f"error does not name {starts_with!r}: {message!r}"


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """``traceladder`` in-process (the console script's own ``main``): (exit code, stdout, stderr)."""
    from traceladder.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def cli_contract(argv: list[str], file: str) -> int:
    """Run the CLI; 0, or 2 with one stderr line naming ``file``."""
    code, _out, err = run_cli(argv)
    assert code in (0, 2), f"exit {code}: {err!r}"
    if code == 2:
        assert_one_line(err.strip(), starts_with=file)
    return code
