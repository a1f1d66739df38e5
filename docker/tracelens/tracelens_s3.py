#!/usr/bin/env python3
"""tracelens_s3.py TRACE_KEY OUT_PREFIX: run TraceLens on one stored trace, as the runner runs a
rung: fetch the trace from S3, run `tracelens-report TRACE OUT_DIR`, store every file it wrote
under OUT_PREFIX/ with a manifest.json (traceladder's layout: key, size, sha256 of each object,
sorted by key), and print a result JSON object as the last stdout line (XCom).

S3 from the environment, as the runner image reads it: TRACELADDER_S3_ENDPOINT (optional),
TRACELADDER_S3_BUCKET, AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION. A failure
exits 1 with one line on stderr. Standard library and boto3 only.
"""

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def fail(msg: str) -> None:
    print(f"tracelens_s3: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: tracelens_s3.py TRACE_KEY OUT_PREFIX", file=sys.stderr)
        return 2
    trace_key, out_prefix = argv[0], argv[1].rstrip("/")
    try:
        import boto3
    except ImportError:
        fail("boto3 is missing in the TraceLens image; rebuild docker/tracelens")
    bucket = os.environ.get("TRACELADDER_S3_BUCKET") or fail("TRACELADDER_S3_BUCKET is not set")
    s3 = boto3.client("s3", endpoint_url=os.environ.get("TRACELADDER_S3_ENDPOINT") or None)
    with tempfile.TemporaryDirectory(prefix="tracelens-") as tmp:
        name = trace_key.rsplit("/", 1)[-1]
        local = Path(tmp) / name
        try:
            body = s3.get_object(Bucket=bucket, Key=trace_key)["Body"].read()
        except Exception as exc:  # noqa: BLE001 - one line for any S3 failure
            fail(f"s3://{bucket}/{trace_key}: {exc}")
        local.write_bytes(body)
        out = Path(tmp) / "out"
        proc = subprocess.run(["tracelens-report", str(local), str(out)], capture_output=True, text=True)
        sys.stderr.write(proc.stderr[-4000:])
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
            fail(f"tracelens-report exited {proc.returncode}: {last}")
        entries = []
        for path in sorted(p for p in out.rglob("*") if p.is_file()):
            data = path.read_bytes()
            key = f"{out_prefix}/{path.relative_to(out).as_posix()}"
            s3.put_object(Bucket=bucket, Key=key, Body=data)
            entries.append({"key": key, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
        if not entries:
            fail("tracelens-report wrote no files")
        manifest = {"schema": 1, "objects": sorted(entries, key=lambda e: e["key"])}
        s3.put_object(
            Bucket=bucket,
            Key=f"{out_prefix}/manifest.json",
            Body=(json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode(),
        )
    print(
        json.dumps(
            {"trace": trace_key, "prefix": out_prefix, "files": [e["key"] for e in entries]}, separators=(",", ":")
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
