"""`python -m traceladder.workload [Primus overrides]`: the CPU stand-in for Primus `train pretrain`."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from .launch import run_local, spawn
from .proxy_config import ProxyConfigError, bf16_fallback, parse


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        settings = parse(argv)
    except ProxyConfigError as err:
        print(err, file=sys.stderr)
        return 2
    if settings.ignored_keys:
        print(f"[proxy] ignoring unmodelled keys: {', '.join(settings.ignored_keys)}", file=sys.stderr)
    if bf16_fallback(argv, settings):
        print("[proxy] --bf16 ignored: this CPU has neither avx512_bf16 nor amx_bf16; running fp32", file=sys.stderr)
    if settings.world_size == 1:
        return run_local(settings)
    return spawn(settings)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: with torch loaded (world size 1) it takes ~0.7 s and does nothing
    # we need (traces are written, output flushed).
    os._exit(code)
