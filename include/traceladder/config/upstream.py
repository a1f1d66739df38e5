"""The table of upstream facts (docs/upstream.md): ``upstream/facts.csv`` beside this module, package
data that ``tools/upstream_facts.py`` regenerates from pinned commits of Primus, Megatron-LM, madengine,
rocm-trace-lite and rocprofiler-sdk. Standard library only.

``facts(kind)`` gives the rows, ``primus_keys()`` the names Primus takes as ``model_args`` (the
experiment's YAML chain and Megatron-LM's argparse dests), ``closest(name, candidates)`` the likely
meant name for a misspelt one.
"""

from __future__ import annotations

import csv
import difflib
import io
import re
from collections.abc import Iterable
from dataclasses import dataclass, fields
from functools import lru_cache
from importlib import resources

__all__ = ["KINDS", "UpstreamFact", "closest", "env_advice", "facts", "primus_keys"]

KINDS: tuple[str, ...] = (
    "primus_key",
    "primus_env",
    "rocprofv3_flag",
    "rtl_flag",
    "rtl_mode",
    "madengine_field",
    "madengine_tool",
    "log_segment",
)


@dataclass(frozen=True)
class UpstreamFact:
    """One row of facts.csv: what `name` is in `repo` at commit `ref`, read from `path`."""

    kind: str
    name: str
    repo: str
    path: str
    ref: str  # a full 40-hex commit
    default: str  # the upstream default as text; empty where there is none
    detail: str


COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(UpstreamFact))


@lru_cache(maxsize=1)
def _rows() -> tuple[UpstreamFact, ...]:
    text = resources.files("traceladder.config").joinpath("upstream", "facts.csv").read_text(encoding="utf-8")
    reader = csv.reader(io.StringIO(text))
    header = tuple(next(reader, ()))
    if header != COLUMNS:
        raise ValueError(f"upstream/facts.csv: header {header!r}, expected {COLUMNS!r}")
    rows = []
    for line, row in enumerate(reader, start=2):
        if len(row) != len(COLUMNS):
            raise ValueError(f"upstream/facts.csv line {line}: {len(row)} fields, expected {len(COLUMNS)}")
        rows.append(UpstreamFact(*row))
    return tuple(rows)


def facts(kind: str | None = None) -> list[UpstreamFact]:
    """Every row, or the rows of one kind (one of KINDS; another is a ValueError)."""
    if kind is not None and kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; the kinds are {', '.join(KINDS)}")
    return [f for f in _rows() if kind is None or f.kind == kind]


@lru_cache(maxsize=1)
def primus_keys() -> frozenset[str]:
    """The keys Primus accepts as overrides: each `primus_key` name, and for a dotted (nested) one
    its top-level key too (`torch_compile.enable` gives `torch_compile`)."""
    names = {f.name for f in facts("primus_key")}
    return frozenset(names | {n.split(".", 1)[0] for n in names})


def closest(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate most like `name` (difflib's ratio of at least 0.6), or None."""
    matches = difflib.get_close_matches(name, sorted(candidates), n=1)
    return matches[0] if matches else None


CLI_PATH = "primus-cli path"  # how a `primus_env` row's detail starts when primus-cli's path reads it
_INSTEAD = re.compile(r"set the config key (\w+) instead")


def env_advice(name: str) -> str | None:
    """What to do about a ladder's environment variable `name` that no file on primus-cli's path
    reads (only an example script does): the table's advice, naming the config key to set instead.
    None when primus-cli's path reads it, or when the table has no row for it (a site's own)."""
    rows = [f for f in facts("primus_env") if f.name == name]
    if not rows or any(f.detail.startswith(CLI_PATH) for f in rows):
        return None
    readers = ", ".join(sorted({f.path for f in rows}))
    key = next((m.group(1) for f in rows if (m := _INSTEAD.search(f.detail))), None)
    instead = f"set the config key {key} in model_args instead" if key else "primus-cli never sees it"
    return f"only {readers} reads it, not primus-cli's path: {instead}"
