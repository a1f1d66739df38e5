"""The execution-order noise model of a rung's runs, on the log of step time (docs/statistics.md "Noise model").

For the run at execution index t, in position p of its block, with m iterations j:

    log iter_tj = mu_rung + u_t + w_t + pi_p + r_tj
    u_t = phi * u_{t-1} + eta_t,  eta_t ~ N(0, sigma_eta^2)    slow spells (AR(1) over consecutive runs)
    w_t ~ N(0, sigma_white^2)                                    the run's own offset
    pi_p                                                          position-in-block effect (fixed per position)
    r_tj                                                          iteration noise, resampled from real runs

The run's figure is the median of its iterations, so its log is mu + u_t + w_t + pi_p + median_j(r_tj).

`fit_noise` estimates it from back-to-back runs of one rung (`proxy_noise.json` holds 48 real proxy
runs and the fit: `python -m benchmarks.gather_proxy_noise --refit FILE` refits it), and `simulate_runs` replays
it on a real schedule: the order the plan runs its blocks in.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from importlib import resources
from typing import NamedTuple

import numpy as np

from traceladder.core.documents import (
    JSONObject,
    JSONValue,
    as_float,
    as_int,
    as_list,
    as_object,
    as_objects,
    spec_purpose,
)
from traceladder.stats.model import Run

DATA_FILE = "proxy_noise.json"


class Slot(NamedTuple):
    """One run of the schedule, in execution order."""

    block: int
    position: int
    treatment: str


@dataclass(frozen=True)
class NoiseModel:
    level: float  # mean log step time (log ms) of the fitted runs
    phi: float
    sigma_eta: float
    sigma_white: float
    position_effects: tuple[float, ...]
    residuals: tuple[float, ...] = field(repr=False)  # pooled within-run log deviations
    iterations: int = 6

    @property
    def median_var(self) -> float:
        """Var of the median of `iterations` draws from the residual pool (Monte Carlo, fixed seed)."""
        return _median_var(np.asarray(self.residuals), self.iterations)

    @property
    def run_sd(self) -> float:
        """Stationary sd of one run's log figure, all parts together."""
        pos = np.var(self.position_effects) if self.position_effects else 0.0
        return math.sqrt(self.sigma_eta**2 / (1 - self.phi**2) + self.sigma_white**2 + self.median_var + pos)

    def scaled(self, run_sd: float) -> NoiseModel:
        """The same shape with every log-scale part scaled so that run_sd equals `run_sd`
        (e.g. GPU-like 1-2% noise for week-over-week replays)."""
        k = run_sd / self.run_sd
        return replace(
            self,
            sigma_eta=self.sigma_eta * k,
            sigma_white=self.sigma_white * k,
            position_effects=tuple(p * k for p in self.position_effects),
            residuals=tuple(r * k for r in self.residuals),
        )

    def as_dict(self) -> JSONObject:
        d: JSONObject = asdict(self)
        d["residuals"] = [round(r, 6) for r in self.residuals]
        d["position_effects"] = [round(p, 6) for p in self.position_effects]
        d["run_sd"] = self.run_sd
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, JSONValue]) -> NoiseModel:
        return cls(
            level=as_float(d["level"]),
            phi=as_float(d["phi"]),
            sigma_eta=as_float(d["sigma_eta"]),
            sigma_white=as_float(d["sigma_white"]),
            position_effects=tuple(as_float(x) for x in as_list(d["position_effects"])),
            residuals=tuple(as_float(x) for x in as_list(d["residuals"])),
            iterations=as_int(d["iterations"]),
        )


def _median_var(pool: np.ndarray, m: int, draws: int = 20000) -> float:
    if pool.size == 0:
        return 0.0
    rng = np.random.default_rng(12345)
    return float(np.var(np.median(rng.choice(pool, size=(draws, m)), axis=1)))


def _ar1_white_loglik(z: np.ndarray, phi: float, s_eta: float, s_w: float) -> float:
    """Kalman-filter log-likelihood of z_t = x_t + e_t, x_t = phi x_{t-1} + eta_t (stationary start)."""
    q, r = s_eta**2, s_w**2
    x, p = 0.0, q / (1 - phi**2)
    ll = 0.0
    for t, obs in enumerate(z):
        if t:
            x, p = phi * x, phi**2 * p + q
        s = p + r
        v = obs - x
        ll -= 0.5 * (math.log(2 * math.pi * s) + v * v / s)
        k = p / s
        x, p = x + k * v, (1 - k) * p
    return ll


def fit_noise(runs: Sequence[Sequence[float]], block_size: int) -> NoiseModel:
    """Fit from runs of one rung in execution order; each run is its iteration times (ms).

    1. residuals: each run's log iterations minus their mean, pooled;
    2. position effects: runs cut into consecutive pseudo-blocks of `block_size`, the mean log
       median by position minus the overall mean (back-to-back runs have no real block boundary,
       so these are mostly noise: kept as a nuisance the design must survive);
    3. (phi, sigma_eta, sigma_white) by maximum likelihood on the log medians less their mean and
       position effect, with the median's own iteration variance as a known part of the white noise.
    """
    from scipy.optimize import minimize

    logs = [np.log(np.asarray(r, dtype=float)) for r in runs if len(r) > 0]
    m = int(round(float(np.median([len(v) for v in logs]))))
    pool = np.concatenate([v - v.mean() for v in logs if len(v) > 1])
    z = np.array([float(np.median(v)) for v in logs])
    level = float(z.mean())
    pos = np.arange(len(z)) % block_size
    effects = np.array([z[pos == p].mean() - level if np.any(pos == p) else 0.0 for p in range(block_size)])
    effects -= effects.mean()
    resid = z - level - effects[pos]
    med_var = _median_var(pool, m)

    def nll(theta: np.ndarray) -> float:
        phi = math.tanh(theta[0])
        s_eta, s_w = math.exp(theta[1]), math.exp(theta[2])
        return -_ar1_white_loglik(resid, phi, s_eta, math.sqrt(s_w**2 + med_var))

    sd = float(np.std(resid)) or 1e-3
    best = None
    for phi0 in (0.0, 0.5, 0.9):
        for split in (0.25, 0.75):
            theta0 = np.array([math.atanh(phi0), math.log(sd * split + 1e-6), math.log(sd * (1 - split) + 1e-6)])
            res = minimize(nll, theta0, method="Nelder-Mead", options={"xatol": 1e-6, "fatol": 1e-8, "maxiter": 4000})
            if best is None or res.fun < best.fun:
                best = res
    assert best is not None
    phi, s_eta, s_w = math.tanh(best.x[0]), math.exp(best.x[1]), math.exp(best.x[2])
    # A white part below 1e-4 (0.01%) is the optimiser's way of saying zero.
    return NoiseModel(
        level=level,
        phi=phi,
        sigma_eta=s_eta,
        sigma_white=s_w if s_w > 1e-4 else 0.0,
        position_effects=tuple(float(e) for e in effects),
        residuals=tuple(float(r) for r in pool),
        iterations=m,
    )


def simulate_runs(
    model: NoiseModel,
    schedule: Sequence[Slot],
    effects: dict[str, float],
    rng: np.random.Generator,
    iterations: int | None = None,
) -> list[Run]:
    """One ladder's runs under the model: `effects` maps a treatment to its true log shift."""
    n = len(schedule)
    m = iterations or model.iterations
    u = np.empty(n)
    u_prev = rng.normal(0.0, model.sigma_eta / math.sqrt(1 - model.phi**2))
    eta = rng.normal(0.0, model.sigma_eta, size=n)
    for t in range(n):
        u_prev = model.phi * u_prev + eta[t] if t else u_prev
        u[t] = u_prev
    white = rng.normal(0.0, model.sigma_white, size=n) if model.sigma_white else np.zeros(n)
    iters = rng.choice(np.asarray(model.residuals), size=(n, m))
    pe = model.position_effects
    base = (
        model.level
        + u
        + white
        + np.array([effects.get(s.treatment, 0.0) + (pe[s.position % len(pe)] if pe else 0.0) for s in schedule])
    )
    logs = base[:, None] + iters
    medians = np.median(logs, axis=1)
    return [
        Run(slot.block, slot.treatment, float(medians[t]), tuple(logs[t].tolist()), at=float(t))
        for t, slot in enumerate(schedule)
    ]


def blocked_schedule(treatments: Sequence[str], blocks: int, seed: int) -> list[Slot]:
    """A randomised complete block schedule: each block every treatment once, shuffled."""
    rng = np.random.default_rng(seed)
    out = []
    for b in range(blocks):
        order = list(treatments)
        rng.shuffle(order)
        out += [Slot(b, p, t) for p, t in enumerate(order)]
    return out


def schedule_from_plan(
    plan: Mapping[str, JSONValue], purposes: tuple[str, ...] = ("measure",)
) -> tuple[list[Slot], bool]:
    """The plan's execution order as slots (treatment = rung name), and whether it came from a
    recorded design (`plan["design"]["blocks"]`). Without one, the spec order with block = repeat."""
    plan_specs = as_objects(plan["specs"])
    specs = {s["rung_id"]: s for s in plan_specs}
    design = as_object(plan.get("design") or {}).get("blocks")
    if design:
        slots = []
        for b, ids in enumerate(as_list(design)):
            for p, rid in enumerate(as_list(ids)):
                spec = specs[rid]
                if spec_purpose(spec) in purposes:
                    slots.append(Slot(as_int(spec.get("block", b)), as_int(spec.get("position", p)), str(spec["rung"])))
        return slots, True
    if all("position" in s for s in plan_specs):  # specs carry the design without plan.json's record
        ordered = sorted(plan_specs, key=lambda s: (as_int(s["block"]), as_int(s["position"])))
        return [
            Slot(as_int(s["block"]), as_int(s["position"]), str(s["rung"]))
            for s in ordered
            if spec_purpose(s) in purposes
        ], True
    seen: dict[int, int] = {}
    slots = []
    for spec in plan_specs:
        if spec_purpose(spec) in purposes:
            b = as_int(spec.get("block", spec["repeat"]))
            slots.append(Slot(b, seen.get(b, 0), str(spec["rung"])))
            seen[b] = seen.get(b, 0) + 1
    return slots, False


def load_proxy_noise() -> NoiseModel:
    """The model fitted to real proxy runs, shipped with the package."""
    doc = json.loads(resources.files("testkit.simulation").joinpath(DATA_FILE).read_text())
    return NoiseModel.from_dict(doc["fit"])


def refit(doc: Mapping[str, JSONValue]) -> NoiseModel:
    runs = [[as_float(v) for v in as_list(r["step_ms_values"])] for r in as_objects(doc["runs"])]
    return fit_noise(runs, as_int(doc["block_size"]))


def refit_file(path: str | Path) -> JSONObject:
    """Refit the runs of a noise file (proxy_noise.json) and write the fit into it; the fit less its
    residuals (`python -m benchmarks.gather_proxy_noise --refit FILE`)."""
    doc = json.loads(Path(path).read_text())
    doc["fit"] = refit(doc).as_dict()
    Path(path).write_text(json.dumps(doc, indent=1) + "\n")
    return {k: v for k, v in doc["fit"].items() if k != "residuals"}
