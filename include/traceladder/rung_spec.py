"""The rung spec as the runner reads it: standard library only.

Inside the runner image (``docker/runner``, on ``rocm/primus:v26.7`` or on the test stand-in) the
runner may import only the standard library and boto3: the base images carry no pydantic 2 (Debian
bookworm ships pydantic 1, and Primus's own environment pins what it pins), so ``traceladder
run-rung --spec/--spec-json`` parses the spec here instead of through ``traceladder.plan.RungSpec``.

``RunnerSpec`` has the attributes and methods the runner uses (``primus_args``, ``profiled``,
``to_json``, ...), checks the same keys and basic types as ``RungSpec`` (unknown and missing keys
are errors naming the field), and renders Primus overrides exactly like ``plan.render_arg`` (a
unit test compares the two on every spec of the shipped ladders).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


class SpecError(ValueError):
    """A rung spec that does not parse; the message is one line, ``<field>: <reason>``."""


# field -> accepted JSON types (None means null is allowed)
_FIELDS: dict[str, tuple[type | None, ...]] = {
    "schema": (int,),
    "ladder": (str,),
    "rung": (str,),
    "parent": (str, None),
    "switch": (str, None),
    "value": (bool, int, str, None),
    "lens": (str,),
    "repeat": (int,),
    "block": (int,),
    "position": (int,),
    "purpose": (str,),
    "rung_id": (str,),
    "backend": (str,),
    "host": (str,),
    "pool": (str,),
    "image": (str,),
    "model_tag": (str,),
    "model_args": (dict,),
    "docker_env_vars": (dict,),
    "tools": (list,),
    "train_iters": (int,),
    "warmup_iters": (int,),
    "profile_window": (list, None),
    "timeout_s": (int,),
    "config_hash": (str,),
    "engine": (str,),
    "storage_prefix": (str,),
}
# Specs written before randomised blocks lack these; such a run was repeat k of a plain ladder.
_OPTIONAL = {"schema": 1, "block": 0, "position": 0, "purpose": "measure"}
_BACKENDS = ("local", "docker")
# names that become key parts or the command's identity: empty would fail later, mid-run
_NON_EMPTY = ("ladder", "rung", "rung_id", "lens", "storage_prefix")


def render_arg(value: Any) -> str:
    """Primus's override syntax: booleans ``True``/``False``, lists without spaces."""
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, list):
        return "[" + ",".join(render_arg(v) for v in value) + "]"
    return str(value)


def render_overrides(model_args: dict[str, Any]) -> list[str]:
    """``--key value`` pairs in the spec's order, as madengine's run.sh passes them."""
    out: list[str] = []
    for key, value in model_args.items():
        out += [f"--{key}", render_arg(value)]
    return out


def _nul_field(value: Any, where: str) -> str | None:
    """The first field holding a NUL byte: the OS refuses it in argv and the environment."""
    if isinstance(value, str):
        return where if "\x00" in value else None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for k, v in items:
        if isinstance(k, str) and "\x00" in k:
            return f"{where}.{k!r}"
        found = _nul_field(v, f"{where}.{k}" if isinstance(value, dict) else f"{where}[{k}]")
        if found:
            return found
    return None


def _check_runnable(full: dict[str, Any]) -> None:
    """What the runner would otherwise trip over after it started (found by fuzzing, issue 19)."""
    if full["backend"] not in _BACKENDS:
        raise SpecError(f"backend: must be one of {', '.join(_BACKENDS)}, got {full['backend']!r}")
    for key in _NON_EMPTY:
        if not full[key].strip("/"):
            raise SpecError(f"{key}: must not be empty")
    for key in full:
        found = _nul_field(full[key], key)
        if found:
            raise SpecError(f"{found}: contains a NUL byte")
    for name in full["docker_env_vars"]:
        if not name or "=" in name:
            raise SpecError(f"docker_env_vars: bad variable name {name!r}")
    if any(not k for k in full["model_args"]):
        raise SpecError("model_args: empty argument name")
    for key in ("warmup_iters", "train_iters", "repeat"):
        if full[key] < 0:
            raise SpecError(f"{key}: must not be negative")


def _type_ok(value: Any, allowed: tuple[type | None, ...]) -> bool:
    if value is None:
        return None in allowed
    if isinstance(value, bool):
        return bool in allowed
    return any(t is not None and t is not bool and isinstance(value, t) for t in allowed)


@dataclass(frozen=True)
class RunnerSpec:
    """One rung run, parsed from the JSON ``RungSpec.to_json()`` writes."""

    data: dict[str, Any] = field(repr=False)

    def __getattr__(self, name: str) -> Any:
        key = "schema" if name == "schema_" else name
        try:
            return self.__dict__["data"][key]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def profile_window(self) -> tuple[int, int] | None:
        window = self.data.get("profile_window")
        return (int(window[0]), int(window[1])) if window else None

    @property
    def profiled(self) -> bool:
        return self.data["lens"] != "none"

    def primus_args(self) -> list[str]:
        return render_overrides(self.data["model_args"])

    def to_json(self) -> str:
        return json.dumps(self.data, separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str | bytes) -> RunnerSpec:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise SpecError(f"(json): {exc}") from None
        if not isinstance(data, dict):
            raise SpecError("(top level): expected a JSON object")
        unknown = sorted(set(data) - set(_FIELDS))
        if unknown:
            raise SpecError(f"{unknown[0]}: unknown key")
        full = {**_OPTIONAL, **data}
        for key, allowed in _FIELDS.items():
            if key not in full:
                raise SpecError(f"{key}: missing")
            if not _type_ok(full[key], allowed):
                raise SpecError(f"{key}: wrong type {type(full[key]).__name__}")
        if not all(isinstance(v, str) for v in full["docker_env_vars"].values()):
            raise SpecError("docker_env_vars: values must be strings")
        window = full["profile_window"]
        if window is not None and (len(window) != 2 or not all(isinstance(v, int) for v in window)):
            raise SpecError("profile_window: expected [start, end]")
        if full["timeout_s"] < 1:
            raise SpecError("timeout_s: must be positive")
        _check_runnable(full)
        # keep the key order RungSpec writes (its field order), so spec.json is byte-identical
        ordered = {key: full[key] for key in _FIELDS}
        return cls(ordered)
