"""Gather back-to-back real proxy runs and fit the execution-order noise model to them, into
testkit/simulation/proxy_noise.json (the runs, how they were made, and the fit).

    PYTHONPATH=$PWD/include python -m benchmarks.gather_proxy_noise --runs 48
    PYTHONPATH=$PWD/include python -m benchmarks.gather_proxy_noise --from-jsonl runs.jsonl
    PYTHONPATH=$PWD/include python -m benchmarks.gather_proxy_noise --refit FILE   (the fit only)

Each run is `traceladder run-rung --ladder proxy-local --rung recompute_off` in a fresh process,
one after the other with nothing between them, as a ladder's blocks run. `--from-jsonl` takes
lines of {"k", "t0", "loadavg", "result"} written by a shell loop doing the same."""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

from benchmarks.common import REPO, run_rung

TARGET = REPO / "testkit" / "simulation" / "proxy_noise.json"
COMMAND = (
    "PYTHONPATH=$PWD/include nice -n 10 python -m traceladder.cli run-rung --ladder proxy-local "
    "--rung recompute_off --run-id aaK --out DIR"
)
BLOCK_SIZE = 10  # proxy-local's rungs: one block of the ladder


def run_once(k: int, out: str) -> dict:
    t0 = time.time()
    load = open("/proc/loadavg").read().split()[:3]
    result = run_rung("--ladder", "proxy-local", "--rung", "recompute_off", "--run-id", f"aa{k}", out=out)
    return {"k": k, "t0": t0, "loadavg": " ".join(load), "result": result}


def write(lines: list[dict], note: str) -> dict:
    from testkit.simulation.noise import refit

    ok = [line for line in lines if line["result"]["status"] == "ok"]
    doc = {
        "how": (
            f"{len(ok)} back-to-back runs of proxy-local recompute_off, each a fresh process, nothing between them; "
            f"{note}. Fit: python -m benchmarks.gather_proxy_noise --refit THIS_FILE (docs/statistics.md)"
        ),
        "command": COMMAND,
        "machine": f"{platform.node()}, {os.cpu_count()} CPUs, shared with other jobs (load average per run below)",
        "date": time.strftime("%Y-%m-%d", time.gmtime(ok[0]["t0"])) if ok else None,
        "block_size": BLOCK_SIZE,
        "runs": [
            {
                "k": line["k"],
                "t0": round(line["t0"], 2),
                "loadavg": line["loadavg"],
                "step_ms": line["result"]["step_ms"],
                "step_ms_values": line["result"]["step_ms_values"],
            }
            for line in ok
        ],
    }
    doc["fit"] = refit(doc).as_dict()
    TARGET.write_text(json.dumps(doc, indent=1) + "\n")
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=48)
    ap.add_argument("--from-jsonl", type=Path)
    ap.add_argument("--refit", type=Path, help="refit this file's runs and write the fit into it")
    args = ap.parse_args(argv)
    if args.refit:
        from testkit.simulation.noise import refit_file

        print(json.dumps(refit_file(args.refit)))
        return 0
    if args.from_jsonl:
        lines = [json.loads(line) for line in args.from_jsonl.read_text().splitlines() if line.strip()]
        note = "gathered by a shell loop running the command below"
    else:
        with tempfile.TemporaryDirectory(prefix="traceladder-noise-") as out:
            lines = [run_once(k, out) for k in range(args.runs)]
        note = "gathered by benchmarks/gather_proxy_noise.py"
    doc = write(lines, note)
    print(json.dumps({k: v for k, v in doc["fit"].items() if k != "residuals"}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
