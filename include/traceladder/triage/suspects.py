"""A ladder run's suspects, each with its last good run and what differs between the two, field by
field: the image digest, the resolved rung spec (each run's stored `spec.json`, else its
`plan.json` entry: the ladder file may have changed since), the provenance and the build.

The suspects themselves come from the history's evaluation (stats/history.py `suspect`, recorded
in `summary.json`'s `history.suspects`); this module reads what each run stored to diff them."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from traceladder.core import env_vars, layout
from traceladder.core.documents import (
    DiffField,
    JSONObject,
    JSONValue,
    PlanDoc,
    RungResult,
    Summary,
    TriageSuspect,
    as_float,
    as_object,
    as_objects,
    spec_purpose,
)
from traceladder.core.errors import ArtifactStoreError, TraceladderError
from traceladder.core.summary_parts import model_fit
from traceladder.stats.decisions import NoiseHistory
from traceladder.stats.verdicts import VERDICT_METRICS
from traceladder.storage.artifacts import ArtifactSink

# Spec fields that name a run's place in its plan, not what it runs: never a difference.
PLACE_FIELDS = ("repeat", "block", "position", "rung_id", "purpose", "lens", "host", "pool", "config_hash")
# Spec fields expanded key by key, so a diff names the one override or variable that changed.
NESTED_FIELDS = ("model_args", "docker_env_vars")
# Provenance read from the machine: a cause that no bisection over images, builds or settings can
# localize (a driver, a host), reported with its values.
NOT_BISECTABLE = ("host", "gpu", "slurm", "python")
PROVENANCE_DIFF_FIELDS = (
    "host",
    "gpu",
    "rocm_version",
    "primus_commit",
    "tools",
    "python",
    "traceladder_version",
    "backend",
    "slurm",
)


class TriageInputError(TraceladderError, ValueError):
    """A suspect whose runs cannot be read (no stored spec or result): one line naming the key."""


@dataclass(frozen=True)
class RunSetup:
    """What one run of a rung ran: its resolved spec (a plan spec's JSON), its provenance, and the
    image digest the daemon gave (None on the local backend)."""

    run_id: str
    spec: JSONObject
    provenance: JSONObject

    @property
    def build(self) -> str | None:
        value = self.provenance.get("build")
        return str(value) if value else None

    @property
    def image_digest(self) -> str | None:
        value = self.provenance.get("image_digest")
        return str(value) if value else None

    @property
    def pinned_spec(self) -> JSONObject:
        """The spec with its image pinned by the digest the run recorded (`name@sha256:...`, the
        daemon's RepoDigests entry), so a confirm runs exactly that image even if its tag moved."""
        digest = self.image_digest
        return {**self.spec, "image": digest} if digest and "@" in digest else dict(self.spec)


def _read(store: ArtifactSink, key: str) -> bytes | None:
    try:
        return store.get_bytes(key) if store.exists(key) else None
    except ArtifactStoreError:
        return None


def run_setup(store: ArtifactSink, prefix: str, ladder: str, run_id: str, rung: str) -> RunSetup:
    """The rung's first measure run of `run_id`: its stored spec.json (else plan.json's spec) and
    its metrics.json provenance."""
    run = layout.run_prefix(prefix, ladder, run_id)
    plan_key = layout.join(run, layout.PLAN_OBJECT)
    raw = _read(store, plan_key)
    if raw is None:
        raise TriageInputError(f"{plan_key}: no plan stored for run {run_id}")
    plan = PlanDoc.from_json(raw, plan_key)
    specs = [s for s in plan.specs if s.get("rung") == rung and spec_purpose(s) == "measure"]
    if not specs:
        raise TriageInputError(f"{plan_key}: run {run_id} has no measure run of rung {rung!r}")
    for planned in sorted(specs, key=lambda s: (int(str(s.get("repeat", 0))), str(s.get("rung_id")))):
        rung_key = layout.rung_prefix(prefix, ladder, run_id, str(planned["rung_id"]))
        metrics = _read(store, layout.join(rung_key, layout.METRICS_OBJECT))
        if metrics is None:
            continue
        result = RungResult.from_json(metrics, layout.join(rung_key, layout.METRICS_OBJECT))
        if result.status != "ok":
            continue
        stored = _read(store, layout.join(rung_key, layout.SPEC_OBJECT))
        spec = as_object(json.loads(stored)) if stored is not None else planned
        return RunSetup(run_id, spec, result.provenance or {})
    raise TriageInputError(f"{run}: no ok measure run of rung {rung!r} stored")


def _flat_spec(spec: Mapping[str, JSONValue]) -> dict[str, JSONValue]:
    out: dict[str, JSONValue] = {}
    for key, value in spec.items():
        if key in PLACE_FIELDS or key == "schema":
            continue
        if key in NESTED_FIELDS and isinstance(value, dict):
            out.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            out[key] = value
    return out


def spec_changes(good: Mapping[str, JSONValue], bad: Mapping[str, JSONValue]) -> list[tuple[str, JSONValue, JSONValue]]:
    """(field, good value, bad value) for each resolved-spec field that differs, nested overrides
    and variables named one by one (`model_args.extra_work_pct`), in field order."""
    g, b = _flat_spec(good), _flat_spec(bad)
    keys = [*g, *(k for k in b if k not in g)]
    return [(k, g.get(k), b.get(k)) for k in keys if g.get(k) != b.get(k)]


def diff(good: RunSetup, bad: RunSetup) -> list[DiffField]:
    """Field by field, what differs between the last good run and the suspect run."""
    out: list[DiffField] = []
    if good.image_digest != bad.image_digest:
        out.append(DiffField(section="image", field="image_digest", good=good.image_digest, bad=bad.image_digest))
    if good.build != bad.build:
        out.append(DiffField(section="build", field="build", good=good.build, bad=bad.build))
    for key, g, b in spec_changes(good.spec, bad.spec):
        # the build's own variable is the build field above
        if key != f"docker_env_vars.{env_vars.BUILD.name}":
            out.append(DiffField(section="spec", field=key, good=g, bad=b))
    for key in PROVENANCE_DIFF_FIELDS:
        g, b = good.provenance.get(key), bad.provenance.get(key)
        if g != b:
            out.append(DiffField(section="provenance", field=key, good=g, bad=b, bisectable=key not in NOT_BISECTABLE))
    return out


def suspects_of(history: Mapping[str, JSONValue], run_id: str) -> list[JSONObject]:
    """The history's suspects of this run (summary.json's `history.suspects`)."""
    return [s for s in as_objects(history.get("suspects") or []) if s.get("run_id") == run_id]


Suspects = list[tuple[TriageSuspect, RunSetup, RunSetup]]  # (suspect, last good run's setup, its own)


def find_suspects(
    store: ArtifactSink, prefix: str, ladder: str, run_id: str, history: Mapping[str, JSONValue]
) -> Suspects:
    """Each suspect of this run with its last good run's setup and its own, largest change first."""
    out = []
    for s in suspects_of(history, run_id):
        rung, good_id = str(s["rung"]), str(s["good_run_id"])
        good = run_setup(store, prefix, ladder, good_id, rung)
        bad = run_setup(store, prefix, ladder, run_id, rung)
        suspect = TriageSuspect(
            rung=rung,
            run_id=run_id,
            good_run_id=good_id,
            reason=str(s["reason"]),
            direction=str(s["direction"]),
            delta_pct=as_float(s["delta_pct"]),
            diff=diff(good, bad),
        )
        out.append((suspect, good, bad))
    return sorted(out, key=lambda t: -abs(t[0].delta_pct))


def summary_key(prefix: str, ladder: str, run_id: str) -> str:
    """``<run>/summary/summary.json``: where a published run's suspects are."""
    return layout.join(layout.summary_prefix(layout.run_prefix(prefix, ladder, run_id)), layout.SUMMARY_JSON)


def history_noise(store: ArtifactSink, prefix: str, ladder: str, run_id: str, metric: str) -> NoiseHistory | None:
    """The run-to-run variance of log step time that a ladder run's block model measured (its
    summary's `model`: run sd and residual df), which a triage pools with its steps' own
    (stats/decisions.py). None when the run stored none, or its blocks left no residual df (a
    one-rung ladder)."""
    key = summary_key(prefix, ladder, run_id)
    try:
        summary = Summary.from_json(store.get_bytes(key), key)
    except ArtifactStoreError:
        return None
    fit = model_fit(summary.model, VERDICT_METRICS[metric][0])
    if fit is None or not fit.run_sd_pct or not fit.df or fit.df < 1:
        return None
    return NoiseHistory((fit.run_sd_pct / 100) ** 2, int(fit.df))


def stored_suspects(store: ArtifactSink, prefix: str, ladder: str, run_id: str) -> Suspects:
    """A published run's suspects (its summary's `history.suspects`), largest change first."""
    key = summary_key(prefix, ladder, run_id)
    summary = Summary.from_json(store.get_bytes(key), key)
    return find_suspects(store, prefix, ladder, run_id, summary.history or {})
