"""The upstream facts table as the stand-ins read it (docs/upstream.md, "What the stand-ins take from
the table"). Standard library only: it runs in the stand-in image's python3.

The table is ``upstream_facts.csv`` beside this file (the stand-in image's ``/opt/standin/``, where
docker/images.py stages it), else the checkout's ``include/traceladder/config/upstream/facts.csv``
(this file at ``testkit/standin/``).

* ``primus_keys()``: the override keys Primus takes (as ``traceladder.config.upstream.primus_keys``);
* ``aliases(row)``, ``choices(row)``, ``accepted_by(row)``: what a flag row's detail lists;
* ``render(snippet, values)``: a ``log_segment`` row's source snippet (``log_string += '...'.format(..)``,
  ``x = (f"..." f"...")``, several statements) evaluated to its text, the snippet's names and
  sub-expressions (``args.consumed_train_samples``, ``statistics.mean(self.recent_iteration_times)``)
  filled from ``values`` (keyed by their source text); no builtins, no names left;
* ``iteration_line(shape, figures)``: one per-iteration log line in a shape the table holds
  (``main``, ``v26.5.1``, ``v26.4.0``, ``v26.4.0-legacy``, ``megatron``), assembled from those
  segments in the order the shape prints them.
"""

from __future__ import annotations

import ast
import csv
import os
import re
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

HERE = os.path.dirname(os.path.realpath(__file__))
STAGED = os.path.join(HERE, "upstream_facts.csv")  # in the stand-in image
CHECKOUT = os.path.join(HERE, "..", "..", "include", "traceladder", "config", "upstream", "facts.csv")


def table_path() -> str:
    for path in (STAGED, CHECKOUT):
        if os.path.isfile(path):
            return os.path.normpath(path)
    raise FileNotFoundError(f"the upstream facts table: neither {STAGED} nor {os.path.normpath(CHECKOUT)}")


@lru_cache(maxsize=1)
def _rows() -> tuple[dict[str, str], ...]:
    with open(table_path(), encoding="utf-8", newline="") as f:
        return tuple(csv.DictReader(f))


def rows(kind: str) -> list[dict[str, str]]:
    """The table's rows of one kind (columns kind, name, repo, path, ref, default, detail)."""
    found = [r for r in _rows() if r["kind"] == kind]
    if not found:
        raise ValueError(f"{table_path()}: no {kind!r} rows")
    return found


def primus_keys() -> frozenset[str]:
    """Each `primus_key` name and, for a dotted one, its top-level key."""
    names = {r["name"] for r in rows("primus_key")}
    return frozenset(names | {n.split(".", 1)[0] for n in names})


def _listed(row: Mapping[str, str], label: str) -> list[str]:
    """The words after `label` in one `;`-separated part of the row's detail."""
    for part in row["detail"].split(";"):
        part = part.strip()
        if part.startswith(label + " "):
            return [w for w in re.split(r"[\s,]+", part[len(label) + 1 :]) if w]
    return []


def aliases(row: Mapping[str, str]) -> list[str]:
    return _listed(row, "aliases")


def choices(row: Mapping[str, str]) -> list[str]:
    return _listed(row, "choices")


def accepted_by(row: Mapping[str, str]) -> list[str]:
    return _listed(row, "accepted by")


# ---- log segments -------------------------------------------------------------------------------
# where one statement of a snippet starts (the table joins a segment's statements with spaces)
_STATEMENT = re.compile(r"\s+(?=[A-Za-z_][\w.]*(?:\[\w*\])?\s*\+?=[^=])")
_ALLOWED = (
    ast.Expression,
    ast.JoinedStr,
    ast.FormattedValue,
    ast.Constant,
    ast.BinOp,
    ast.UnaryOp,
    ast.operator,
    ast.unaryop,
    ast.Load,
    ast.Call,
    ast.Attribute,
)


def _statements(snippet: str) -> list[ast.stmt]:
    out: list[ast.stmt] = []
    text = ""
    for piece in _STATEMENT.split(snippet.strip()):
        text = f"{text} {piece}" if text else piece
        try:
            out.extend(ast.parse(text).body)
        except SyntaxError:
            continue  # the split fell inside a statement: join the next piece
        text = ""
    if text or not out:
        raise ValueError(f"not a Python statement: {snippet!r}")
    return out


class _Fill(ast.NodeTransformer):
    """Replace each sub-expression whose source text is a key of `values` by its value."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        self.values = values

    def visit(self, node: ast.AST) -> Any:
        if isinstance(node, ast.expr) and not isinstance(node, ast.Constant | ast.JoinedStr | ast.FormattedValue):
            text = ast.unparse(node)
            if text in self.values:
                return ast.copy_location(ast.Constant(self.values[text]), node)
        return super().visit(node)


@lru_cache(maxsize=256)
def _expressions(snippet: str) -> tuple[ast.expr, ...]:
    exprs = []
    for stmt in _statements(snippet):
        if not isinstance(stmt, ast.Assign | ast.AugAssign | ast.Expr):
            raise ValueError(f"not an assignment or expression: {ast.unparse(stmt)!r}")
        exprs.append(stmt.value)
    return tuple(exprs)


def render(snippet: str, values: Mapping[str, Any]) -> str:
    """The text a segment's statements print, concatenated (``log_string += ...`` statements add up;
    an assignment gives its value)."""
    out = []
    for expr in _expressions(snippet):
        tree = ast.fix_missing_locations(
            ast.Expression(_Fill(values).visit(ast.parse(ast.unparse(expr), mode="eval").body))
        )
        missing = sorted({n.id for n in ast.walk(tree) if isinstance(n, ast.Name)})
        if missing:
            raise KeyError(f"no value for {', '.join(missing)} in {snippet!r}")
        for node in ast.walk(tree):
            if not isinstance(node, _ALLOWED) or (
                isinstance(node, ast.Attribute) and not (node.attr == "format" and isinstance(node.value, ast.Constant))
            ):
                raise ValueError(f"{ast.unparse(node)!r}: not a format expression ({snippet!r})")
        out.append(eval(compile(tree, "<log_segment>", "eval"), {"__builtins__": {}}, {}))  # noqa: S307 (checked nodes)
    return "".join(out)


# A shape: which of a segment's rows it prints (Primus's training_log patch rewrites Megatron's line)
SHAPES: dict[str, Callable[[Mapping[str, str]], bool]] = {
    "main": lambda r: r["detail"].startswith("Primus main"),
    "v26.5.1": lambda r: r["detail"].startswith("tag v26.5.1"),
    "v26.4.0": lambda r: r["detail"].startswith("tag v26.4.0") and "training_log patch" in r["detail"],
    "v26.4.0-legacy": lambda r: r["detail"].startswith("tag v26.4.0") and "legacy trainer" in r["detail"],
    "megatron": lambda r: r["repo"] == "NVIDIA/Megatron-LM",
}
# Megatron-LM's training_log, in its order (throughput only with log_throughput)
MEGATRON_ORDER = (
    "iteration",
    "consumed_samples",
    "elapsed_time_per_iteration",
    "throughput_per_gpu",
    "learning_rate",
    "global_batch_size",
    "lm_loss",
    "loss_scale",
    "grad_norm",
    "skipped_iterations",
    "nan_iterations",
)
# Primus v26.4.0's legacy trainer (primus/modules/trainer/megatron/trainer.py), in its order
LEGACY_ORDER = (
    "iteration",
    "consumed_samples",
    "elapsed_time_per_iteration",
    "hip_mem",
    "rocm_mem",
    "rocm_max_mem",
    "throughput_per_gpu",
    "tokens_per_gpu_arith",
    *MEGATRON_ORDER[4:],
)
TOKENS = {"main": "tokens_per_gpu_harmonic", "v26.5.1": "tokens_per_gpu_harmonic", "v26.4.0": "tokens_per_gpu_arith"}


def segment(name: str, shape: str) -> str:
    """The snippet that prints segment `name` in `shape`; Megatron's where the shape keeps Megatron's."""
    found = [r for r in rows("log_segment") if r["name"] == name]
    for pick in (SHAPES[shape], SHAPES["megatron"]):
        mine = [r for r in found if pick(r)]
        if mine:
            return mine[0]["default"]
    raise KeyError(f"no log_segment row {name!r} for {shape}")


GIB = 1024**3


def _values(f: Mapping[str, Any]) -> dict[str, Any]:
    """The snippets' names and sub-expressions for one iteration's figures (memory in GB)."""
    hip_used, hip_total = f["hip_used_gb"] * GIB, f["hip_total_gb"] * GIB
    r_used, r_total, max_used = f["rocm_used_gb"] * GIB, f["rocm_total_gb"] * GIB, f["max_used_gb"] * GIB
    ms, tok, tok_avg = f["elapsed_ms"], f.get("tokens"), f.get("tokens_avg")
    return {
        "iteration": f["iteration"],
        "args.train_iters": f["train_iters"],
        "args.consumed_train_samples": f["consumed_samples"],
        # Megatron and the legacy trainer: seconds; the patch: the printed ms
        "elapsed_time_per_iteration": ms / 1000.0,
        "elapsed_value": ms,
        "avg_elapsed_ms": f.get("elapsed_ms_avg"),
        "statistics.mean(self.recent_iteration_times)": f.get("elapsed_ms_avg"),
        "throughput": f.get("tflops"),
        "tflops_value": f.get("tflops"),
        "avg_tflops": f.get("tflops_avg"),
        "statistics.mean(self.recent_tflop_throughputs)": f.get("tflops_avg"),
        "token_value": tok,
        "avg_tokens": tok_avg,
        "token_throughput": tok,
        "statistics.mean(self.recent_token_throughputs)": tok_avg,
        "learning_rate": f["learning_rate"],
        "batch_size": f["global_batch_size"],
        "key": "lm loss",
        "avg": f["lm_loss"],
        "loss_scale": f.get("loss_scale", 1.0),
        "grad_norm": f.get("grad_norm", 1.0),
        "total_loss_dict[skipped_iters_key]": f.get("skipped", 0),
        "total_loss_dict[nan_iters_key]": f.get("nan", 0),
        # the patch (bytes)
        "hip_used": hip_used,
        "hip_free": hip_total - hip_used,
        "hip_total": hip_total,
        "hip_ratio": hip_used / hip_total,
        "r_used": r_used,
        "r_free": r_total - r_used,
        "r_total": r_total,
        "r_ratio": r_used / r_total,
        "max_rank": f["max_rank"],
        "max_r_used": max_used,
        # the legacy trainer (bytes)
        "hip_used_mem": hip_used,
        "hip_free_mem": hip_total - hip_used,
        "hip_total_mem": hip_total,
        "hip_mem_usage": hip_used / hip_total,
        "rocm_used_mem": r_used,
        "rocm_free_mem": r_total - r_used,
        "rocm_total_mem": r_total,
        "rocm_mem_usage": r_used / r_total,
        "max_usage": max_used / r_total,
    }


def iteration_line(shape: str, figures: Mapping[str, Any], prefix: str = "") -> str:
    """One iteration's line as `shape` prints it after `prefix` (a timestamp, a logger's prefix).

    `figures`: iteration, train_iters, consumed_samples, elapsed_ms, learning_rate,
    global_batch_size, lm_loss, loss_scale, grad_norm; for every shape but `megatron` also
    elapsed_ms_avg, tflops, tflops_avg, tokens, tokens_avg, hip_used_gb, hip_total_gb,
    rocm_used_gb, rocm_total_gb, max_rank, max_used_gb. `megatron` prints throughput only where
    `tflops` is given (log_throughput) and no memory."""
    raw = {"hip_used_gb": 0.0, "hip_total_gb": 1.0, "rocm_used_gb": 0.0, "rocm_total_gb": 1.0, "max_used_gb": 0.0}
    values = _values({"max_rank": 0, **raw, **figures} if shape == "megatron" else figures)
    if shape == "v26.4.0-legacy":
        return prefix + "".join(render(segment(name, shape), values) for name in LEGACY_ORDER)
    names = [n for n in MEGATRON_ORDER if n != "throughput_per_gpu" or figures.get("tflops") is not None]
    megatron = prefix + "".join(render(segment(name, "megatron"), values) for name in names)
    if shape == "megatron":
        return megatron
    # Primus's training_log patch: Megatron's line split at '|', segments rewritten, memory appended
    segments = [s.strip() for s in megatron.split("|")]
    at = {name: i for i, s in enumerate(segments) for name, head in _HEADS.items() if s.startswith(head)}
    segments[at["elapsed"]] = render(segment("elapsed_time_per_iteration", shape), values)
    segments[at["throughput"]] = render(segment("throughput_per_gpu", shape), values)
    segments[at["throughput"]] = render(
        segment(TOKENS[shape], shape), {**values, "parsed.segments[idx]": segments[at["throughput"]]}
    )
    hip = render(segment("hip_mem", shape), values)
    rocm = render(segment("rocm_mem", shape), values)  # rocm mem and the ranks' max, one statement
    segments.append(" ".join(s for s in (hip, rocm) if s).strip())
    return " | ".join(s for s in segments if s)


_HEADS = {"elapsed": "elapsed time per iteration (ms):", "throughput": "throughput per GPU (TFLOP/s/GPU):"}
