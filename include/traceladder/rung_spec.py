"""The rung spec's schema, and the runner's reader of it: standard library only.

``SpecFields`` is the one definition of a rung spec: its fields in JSON key order, their types,
their defaults and their limits. Two classes are built on it:

- ``plan.RungSpec`` (pydantic), which the planner writes and the Airflow side reads: it takes the
  fields from ``SpecFields`` and narrows two types to the config's (``model_args`` values,
  ``tools``);
- ``RunnerSpec`` here, which ``traceladder run-rung --spec/--spec-json`` reads inside the runner
  image (``docker/runner``, on ``rocm/primus:v26.7`` or on the test stand-in). There the runner
  may import only the standard library and boto3: the base images carry no pydantic 2 (Debian
  bookworm ships pydantic 1, and Primus's own environment pins what it pins).

Both refuse unknown and missing keys, wrong types and the schema's limits (``check_spec``), with
an error naming the field; the runner is the stricter about JSON types (pydantic's lax mode takes
``"10"`` for an int, ``RunnerSpec`` does not). Both write the same JSON, byte for byte (a test
compares them on every spec of the shipped ladders).

``RunnerSpec`` is the runner spec's document class (``spec.json``, and each spec in ``plan.json``),
as ``core.documents`` holds the others: a frozen dataclass, standard library only, with
``to_json``/``from_json``/``to_dict`` and a schema version (``SPEC_SCHEMA``, the ``schema`` key).
It is not a ``core.documents.Document``, on purpose: a spec is an instruction, not a record, so an
unknown key is refused (an older runner would silently drop what it does not know) instead of
kept. It stays here, the module the runner image and the local backend import by this path.
"""

from __future__ import annotations

import json
import types
from dataclasses import MISSING, Field, dataclass, field, fields
from functools import cache
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from traceladder.core.documents import JSONObject, default_purpose
from traceladder.core.errors import TraceladderError

Purpose = Literal["measure", "lens", "profile"]
SPEC_SCHEMA = 1  # the runner spec's version (spec.json, and each spec in plan.json)
# Primus's override for the iterations its averages leave out; the spec's warmup_iters sets it
WARMUP_ARG = "log_avg_skip_iterations"
Backend = Literal["local", "docker"]


class SpecError(TraceladderError, ValueError):
    """A rung spec that does not parse; the message is one line, ``<field>: <reason>``."""


def _limit(*, key: str | None = None, least: int | None = None, non_empty: bool = False) -> dict[str, bool | int | str]:
    """A field's metadata: its JSON key where it differs from the attribute, its least value, and
    whether it must hold more than slashes (names that become key parts or the command's identity:
    empty would fail later, mid-run)."""
    out: dict[str, bool | int | str] = {"non_empty": non_empty}
    if key is not None:
        out["json"] = key
    if least is not None:
        out["min"] = least
    return out


@dataclass(frozen=True, kw_only=True)
class SpecFields:
    """Everything one run of one rung needs. The field order is the JSON key order. A default marks
    a key that specs written before randomised blocks lack (such a run was repeat k of a plain
    ladder)."""

    # `schema` would shadow pydantic's BaseModel.schema; the JSON key stays "schema"
    schema_: int = field(default=SPEC_SCHEMA, metadata=_limit(key="schema"))
    ladder: str = field(metadata=_limit(non_empty=True))
    rung: str = field(metadata=_limit(non_empty=True))
    parent: str | None
    switch: str | None  # the one switch this rung changed against its parent
    value: bool | int | str | None
    lens: str = field(metadata=_limit(non_empty=True))
    repeat: int = field(metadata=_limit(least=0))
    block: int = 0  # the randomised complete block this run belongs to (execution order of blocks)
    position: int = 0  # 0-based place inside its block
    # measure: step-time estimates; lens: a lens block; profile: every-rung lens. No field default:
    # a spec read without the key gets the one rule, default_purpose(lens) (with_read_defaults).
    purpose: Purpose
    rung_id: str = field(metadata=_limit(non_empty=True))
    backend: Backend
    host: str
    pool: str
    image: str
    model_tag: str
    model_args: dict[str, Any]  # Primus overrides (config.models.ArgValue values)
    docker_env_vars: dict[str, str]
    tools: list[Any]  # madengine tool entries (config.models.Tool; dicts in the runner)
    train_iters: int = field(metadata=_limit(least=0))
    warmup_iters: int = field(metadata=_limit(least=0))
    profile_window: tuple[int, int] | None
    timeout_s: int = field(metadata=_limit(least=1))
    config_hash: str
    engine: str
    storage_prefix: str = field(metadata=_limit(non_empty=True))

    @property
    def profiled(self) -> bool:
        return self.lens != "none"

    def primus_overrides(self) -> dict[str, Any]:
        """What Primus is told to override: first `log_avg_skip_iterations = warmup_iters`, so
        Primus's own averages, the runner's step time and the proxy's extra-work calibration
        (workload/extra.py, at the last warm-up iteration) leave out the same iterations; then the
        model args. Every backend renders these."""
        return {WARMUP_ARG: self.warmup_iters, **self.model_args}

    def primus_args(self) -> list[str]:
        """Primus command-line overrides, `--key value`, as madengine's run.sh passes them."""
        return render_overrides(self.primus_overrides())

    def to_json(self) -> str:
        raise NotImplementedError  # each spec class writes the same bytes its own way

    def to_dict(self) -> JSONObject:
        """The spec as ``plan.json`` holds it: the JSON ``to_json`` writes, as data."""
        doc: JSONObject = json.loads(self.to_json())
        return doc


def with_read_defaults(data: JSONObject) -> JSONObject:
    """A spec's JSON with what a spec written before specs carried a ``purpose`` lacks: the purpose
    its lens implies (``core.documents.default_purpose``, the rule the summary reads it by). Both
    spec classes read through this."""
    if "purpose" not in data:
        return {**data, "purpose": default_purpose(data.get("lens"))}
    return data


def json_name(attr: str) -> str:
    """A field's JSON key (pydantic's alias generator for ``RungSpec``)."""
    return str(_schema()[attr].metadata.get("json", attr))


@cache
def _schema() -> dict[str, Field[Any]]:
    return {f.name: f for f in fields(SpecFields)}


@cache
def _hints() -> dict[str, Any]:
    return get_type_hints(SpecFields)


def _json_types(hint: Any) -> tuple[type | None, ...]:
    """The JSON types a field's annotation accepts (None: null)."""
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        return tuple(t for arg in get_args(hint) for t in _json_types(arg))
    if hint is type(None):
        return (None,)
    if origin is Literal:
        return tuple(dict.fromkeys(type(v) for v in get_args(hint)))
    if origin in (list, tuple):
        return (list,)
    if origin is dict:
        return (dict,)
    return (hint,)


def _is_tuple(hint: Any) -> bool:
    args = get_args(hint) if get_origin(hint) in (Union, types.UnionType) else (hint,)
    return any(get_origin(arg) is tuple for arg in args)


def _type_ok(value: Any, allowed: tuple[type | None, ...]) -> bool:
    if value is None:
        return None in allowed
    if isinstance(value, bool):
        return bool in allowed
    return any(t is not None and t is not bool and isinstance(value, t) for t in allowed)


def _shape_error(hint: Any, value: Any) -> str | None:
    """What the JSON type alone does not say: a Literal's values, a dict's value type, a tuple's
    length and item type."""
    for arg in get_args(hint) if get_origin(hint) in (Union, types.UnionType) else (hint,):
        origin = get_origin(arg)
        if origin is Literal and isinstance(value, str) and value not in get_args(arg):
            return f"must be one of {', '.join(get_args(arg))}, got {value!r}"
        if origin is dict and isinstance(value, dict) and get_args(arg)[1] is str:
            if not all(isinstance(v, str) for v in value.values()):
                return "values must be strings"
        if origin is tuple and isinstance(value, list):
            items = get_args(arg)
            if len(value) != len(items) or not all(_type_ok(v, (t,)) for v, t in zip(value, items)):
                return "expected [" + ", ".join(t.__name__ for t in items) + "]"
    return None


def _nul_field(value: Any, where: str) -> str | None:
    """The first field holding a NUL byte: the OS refuses it in argv and the environment."""
    if isinstance(value, str):
        return where if "\x00" in value else None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (list, tuple)) else ()
    for k, v in items:
        if isinstance(k, str) and "\x00" in k:
            return f"{where}.{k!r}"
        found = _nul_field(v, f"{where}.{k}" if isinstance(value, dict) else f"{where}[{k}]")
        if found:
            return found
    return None


def check_spec(spec: SpecFields) -> None:
    """The schema's limits, and what the runner would otherwise trip over after it started (found
    by fuzzing, issue 19). Both spec classes run it."""
    for name, f in _schema().items():
        value = getattr(spec, name)
        key = json_name(name)
        if f.metadata.get("non_empty") and not value.strip("/"):
            raise SpecError(f"{key}: must not be empty")
        low = f.metadata.get("min")
        if low is not None and value < low:
            raise SpecError(f"{key}: must not be negative" if low == 0 else f"{key}: must be positive")
        found = _nul_field(value, key)
        if found:
            raise SpecError(f"{found}: contains a NUL byte")
    for env in spec.docker_env_vars:
        if not env or "=" in env:
            raise SpecError(f"docker_env_vars: bad variable name {env!r}")
    if any(not k for k in spec.model_args):
        raise SpecError("model_args: empty argument name")


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


@dataclass(frozen=True, kw_only=True)
class RunnerSpec(SpecFields):
    """One rung run, parsed from the JSON ``RungSpec.to_json()`` writes."""

    def to_json(self) -> str:
        doc = {json_name(name): getattr(self, name) for name in _schema()}
        return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str | bytes) -> RunnerSpec:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise SpecError(f"(json): {exc}") from None
        if not isinstance(data, dict):
            raise SpecError("(top level): expected a JSON object")
        data = with_read_defaults(data)
        attrs = {json_name(name): name for name in _schema()}
        unknown = sorted(set(data) - set(attrs))
        if unknown:
            raise SpecError(f"{unknown[0]}: unknown key")
        values: dict[str, Any] = {}
        for key, name in attrs.items():
            f, hint = _schema()[name], _hints()[name]
            if key not in data and f.default is MISSING:
                raise SpecError(f"{key}: missing")
            value = data.get(key, f.default)
            if not _type_ok(value, _json_types(hint)):
                raise SpecError(f"{key}: wrong type {type(value).__name__}")
            problem = _shape_error(hint, value)
            if problem:
                raise SpecError(f"{key}: {problem}")
            values[name] = tuple(value) if isinstance(value, list) and _is_tuple(hint) else value
        if values["schema_"] != SPEC_SCHEMA:  # no older version exists yet; a newer one may add meaning
            raise SpecError(
                f"schema: version {values['schema_']} is not the one this traceladder reads ({SPEC_SCHEMA})"
            )
        spec = cls(**values)
        check_spec(spec)
        return spec
