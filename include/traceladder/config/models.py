"""Pydantic models of a ladder file (schema 1) and of the clusters file.

A ladder names its switches (one per optimisation family, plus `lens`), the value each switch
takes at the root, and what every value sets. Rungs form a tree: the root sets nothing, every other
rung changes exactly one switch of its parent. The cross-field rules live in `validate.py`, so these
models only describe shapes.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal, Union

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    StringConstraints,
    Tag,
    model_validator,
)
from pydantic_core import PydanticCustomError

from traceladder.core import env_vars
from traceladder.core.env_vars import MAX_REPEATS, DurationError, duration

# A switch value as YAML gives it: `true:`, `16:` or `turbo:`.
SwitchValue = Union[bool, int, str]
# A Primus override value: rendered `True`/`False`, `[0,4]` or as text.
ArgValue = Union[bool, int, float, str, list[Union[int, float, str]]]

Name = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=80)]

LENS_NAMES: tuple[str, ...] = ("none", "torch_rank0", "torch_all_ranks", "rocm_trace_lite", "rocprofv3")
# The CPU proxy has no HSA runtime to intercept, so only the PyTorch profiler lenses run locally.
LENSES_BY_BACKEND: dict[str, tuple[str, ...]] = {
    "local": ("none", "torch_rank0", "torch_all_ranks"),
    "docker": LENS_NAMES,
    # Primus in a container per node (or direct) collects what it does on the docker path
    "slurm": LENS_NAMES,
}
LENS_SWITCH = "lens"
BUCKET_ENV = env_vars.S3_BUCKET.name


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Tool(Strict):
    """A madengine tool entry of `--additional-context`, e.g. `{"name": "rocprofv3"}`."""

    name: Name
    cmd: str | None = None


class RungOverrides(Strict):
    """What a switch value (or the ladder's base) sets."""

    model_args: dict[str, ArgValue] = Field(default_factory=dict)
    docker_env_vars: dict[str, str] = Field(default_factory=dict)
    tools: list[Tool] = Field(default_factory=list)


class Switch(Strict):
    default: SwitchValue
    values: dict[SwitchValue, RungOverrides]


class Rung(Strict):
    name: Name
    parent: Name | None = None
    set: dict[str, SwitchValue] = Field(default_factory=dict)
    description: str = ""


class LensPlan(Strict):
    """Which rung the lenses run on, and which lenses (`none` is the rung itself); each lens
    repeat is its own block. `every_rung` adds one profiled run of every rung, in a block of its
    own, for rung-to-rung attribution (left out of the step-time estimates). `every_rung_steps`
    profiles only the last N steps of that lens's window there: attribution compares per step, and
    each profiled step's trace export costs seconds."""

    rung: Name | None = None
    use: list[str] = Field(default_factory=lambda: ["none"])
    repeats: int | None = Field(default=None, ge=1, le=MAX_REPEATS)
    every_rung: str | None = None
    every_rung_steps: int | None = Field(default=None, ge=1)


class AdaptiveRepeats(Strict):
    """`repeats: {min, max, target_mde_pct, budget_s}`: plan `max` blocks and stop after a block
    from `min` on once every non-root rung's MDE is at or below the target, or (with `budget_s`)
    once another block would end more than `budget_s` seconds after the plan
    (docs/statistics-adaptive.md)."""

    min: int = Field(ge=2, le=MAX_REPEATS)  # two blocks at least: a verdict needs two runs a side
    max: int = Field(ge=2, le=MAX_REPEATS)
    target_mde_pct: float = Field(gt=0, lt=100)
    budget_s: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _max_not_below_min(self) -> AdaptiveRepeats:
        if self.max < self.min:
            raise PydanticCustomError(
                "max_below_min", "max ({max}) must be at least min ({min})", {"max": self.max, "min": self.min}
            )
        return self


# A plain integer keeps its meaning (that many blocks); a mapping is adaptive. The tags name the
# branch for pydantic only: the loader leaves `<...>` parts out of an error's field path.
Repeats = Annotated[
    Union[
        Annotated[Annotated[int, Field(ge=1, le=MAX_REPEATS)], Tag("<int>")],
        Annotated[AdaptiveRepeats, Tag("<adaptive>")],
    ],
    Discriminator(lambda v: "<adaptive>" if isinstance(v, (dict, AdaptiveRepeats)) else "<int>"),
]


class RetryPolicy(Strict):
    """Retries with exponential backoff (issue 19). Analysis, summary and publish (and the plan
    and trace collection) are safe to retry; a rung retries only on infrastructure failure
    (preflight, S3), never when its workload failed."""

    tasks: int = Field(default=3, ge=0, le=10)
    rung_infra: int = Field(default=2, ge=0, le=10)
    delay_s: int = Field(default=30, ge=1)
    max_delay_s: int = Field(default=600, ge=1)


class WhatsLeft(Strict):
    """The summary's "What's left" (docs/whats-left.md): an op's recoverable time is what it
    would save at this share of its roofline bound."""

    share: float = Field(default=0.7, gt=0, le=1)


class Build(Strict):
    """One entry of the build catalog (issue 51): on the local backend, where there is no image, a
    build is a named set of changes with its creation time. The bisection orders builds by it."""

    name: Name
    created: datetime
    description: str = ""
    # what the build changes: Primus overrides (e.g. extra_work_pct with extra_work_region, real
    # work inside a named region) and environment, applied on top of every rung's settings
    changes: RungOverrides = Field(default_factory=RungOverrides)


class TriageSettings(Strict):
    """`triage:` (issues 51, 58): each step's budget (blocks of one A and one B run, and seconds),
    the whole triage's budget (runs, and device-hours: run hours times the run's GPUs, CPU-hours on
    the proxy), the two-sided level, the most culprits a search names, whether a person approves
    the bisection, and an explicit ordered candidate list (image tags or build names) that
    overrides the registry or the catalog."""

    budget_blocks: int = Field(default=16, ge=3, le=MAX_REPEATS)
    budget_s: float | None = Field(default=None, gt=0)
    budget_runs: int | None = Field(default=None, ge=6)
    budget_device_hours: float | None = Field(default=None, gt=0)
    max_culprits: int = Field(default=3, ge=1, le=10)
    alpha: float = Field(default=0.05, gt=0, lt=0.5)
    approve: bool = False
    # which finished triages get a notice of their own: `alerts` (a confirmed change) or `all`
    # (`not reproduced` and `insufficient data` too; else one line in the next weekly notice)
    notices: Literal["alerts", "all"] = "alerts"
    candidates: list[Annotated[str, StringConstraints(min_length=1, max_length=300)]] = Field(default_factory=list)


class Ladder(Strict):
    schema_: Literal[1] = Field(alias="schema")
    ladder: Name
    description: str = ""
    model_tag: str
    image: str
    backend: Literal["local", "docker", "slurm"]
    cluster: Name
    # Nodes per rung (`#SBATCH -N`); more than one needs backend: slurm (config/loader.py says so).
    nnodes: int = Field(default=1, ge=1, le=1024)
    schedule: str | None = None
    repeats: Repeats = 3
    # The block order's seed; unset, each run derives one from the ladder and its run id.
    seed: int | None = Field(default=None, ge=0)
    # Iterations Primus keeps out of its averages (log_avg_skip_iterations); the runner skips them too.
    warmup_iters: int = Field(default=2, ge=0)
    # What the verdicts judge: `wall` (step_ms; tokens/s/GPU for batch rungs) or `cpu` (the
    # slowest rank's compute-thread CPU time, step_cpu_ms; tokens per CPU-second for batch rungs),
    # which the CPU proxy logs and which the machine's other tenants move far less.
    metric: Literal["wall", "cpu"] = "wall"
    # Drift terms in the verdicts' block model: a time polynomial of this degree inside each block
    # (docs/statistics.md, "Drift inside a block"), for a machine whose speed moves within a block.
    drift: Literal["none", "linear", "quadratic"] = "none"
    # How the verdicts control false calls over the ladder's comparisons (docs/statistics.md, "Calls
    # over the whole ladder"): Holm's family-wise rate (the default: a demo must make no false call),
    # Benjamini-Hochberg's false discovery rate, or each rung tested on its own at 5%.
    # stats/sequential.CORRECTIONS holds the same names.
    correction: Literal["benjamini_hochberg", "holm", "per_rung"] = "holm"
    timeout_s: int = Field(default=1800, ge=10)
    # What the ladder's figures do not say (its write-up's limits): printed at the top of the
    # summary, report.html and the Ladders page; each a non-empty line of text.
    caveats: list[Annotated[str, Field(min_length=1, pattern=r"\S")]] = Field(default_factory=list)
    engine: Literal["builtin", "tracelens"] = "builtin"
    base: RungOverrides = Field(default_factory=RungOverrides)
    switches: dict[Name, Switch]
    rungs: list[Rung] = Field(min_length=1)
    lenses: LensPlan | None = None
    retries: RetryPolicy = Field(default_factory=RetryPolicy)
    whats_left: WhatsLeft = Field(default_factory=WhatsLeft, alias="headroom")  # the ladder file's key
    # the build catalog (local backend) and the build this ladder runs now (its provenance records it)
    builds: list[Build] = Field(default_factory=list)
    build: Name | None = None
    triage: TriageSettings = Field(default_factory=TriageSettings)

    def catalog_build(self, name: str | None) -> Build | None:
        return next((b for b in self.builds if b.name == name), None)

    @property
    def adaptive(self) -> AdaptiveRepeats | None:
        return self.repeats if isinstance(self.repeats, AdaptiveRepeats) else None

    @property
    def planned_blocks(self) -> int:
        """The measure blocks a run plans: `repeats`, or an adaptive ladder's `max`."""
        return self.repeats.max if isinstance(self.repeats, AdaptiveRepeats) else self.repeats

    @property
    def repeats_label(self) -> str:
        """How the repeats read on a page: `3`, `3-8 adaptive`, or `3-11 adaptive, 450 s budget`."""
        a = self.adaptive
        if a is None:
            return str(self.repeats)
        return f"{a.min}-{a.max} adaptive" + (f", {a.budget_s:g} s budget" if a.budget_s else "")

    @property
    def lens_repeats(self) -> int:
        """Lens blocks per run unless `lenses.repeats` says: `repeats`, or an adaptive ladder's
        `min` (lens overheads do not adapt)."""
        return self.repeats.min if isinstance(self.repeats, AdaptiveRepeats) else self.repeats


def _duration(value: object) -> str:
    """``8w`` / ``30d`` / ``12h`` (retention and spool ages); the loader names the field."""
    try:
        duration(value, "duration")
    except DurationError:
        raise PydanticCustomError(
            "duration", "'{value}' is not a duration such as 8w, 30d or 12h", {"value": value}
        ) from None
    return str(value)


Duration = Annotated[str, BeforeValidator(_duration)]


class RetentionSettings(Strict):
    """How long traces and logs stay in S3 (docs/operations.md); an unset kind is kept for ever."""

    traces: Duration | None = None  # everything under <rung_id>/traces/
    heavy_traces: Duration | None = None  # the traces of rocprofv3 and rocm_trace_lite rungs
    logs: Duration | None = None  # <rung_id>/log.txt.gz


class SpoolSettings(Strict):
    # A sealed spool folder older than this is reported by the preflight, and removed once uploaded.
    max_age: Duration = "7d"


class StorageSettings(Strict):
    conn_id: str = "traceladder_s3"
    bucket: str = env_vars.DEFAULT_BUCKET
    prefix: Name = "traceladder"
    # The endpoint the worker containers reach; never loopback on a real cluster.
    worker_endpoint_url: str | None = None
    retention: RetentionSettings | None = None

    @property
    def effective_bucket(self) -> str:
        """The bucket, unless the deployment overrides it with TRACELADDER_S3_BUCKET."""
        return env_vars.S3_BUCKET.over(self.bucket)


class Host(Strict):
    name: Name
    pool: Name
    docker_url: str | None = None
    tls_conn_id: str | None = None
    devices: list[str] = Field(default_factory=list)
    # backend: slurm: the Airflow SSH connection of the cluster's login node (host, port, user, key)
    ssh_conn_id: str | None = None


class SlurmSettings(Strict):
    """How rungs reach a Slurm cluster (backend: slurm): the job's `#SBATCH` options, how each
    node starts the runner, and where the job's files live on the cluster's shared filesystem."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    reservation: str | None = None
    # docker/podman: the runner image in a container per node, as Primus's Slurm mode starts one;
    # direct: `runner_command` on the node itself (the test cluster; a site with the runner installed).
    container_runtime: Literal["docker", "podman", "direct"] = "docker"
    # The runner's command on a node for `direct`; the container's entry is `traceladder`.
    runner_command: str = "traceladder"
    # What the runner starts on the nodes: Primus (the docker path's command) or the CPU proxy.
    workload: Literal["primus", "proxy"] = "primus"
    # A directory on the login node and every compute node (a shared filesystem): job scripts,
    # per-job output and the runner's spool.
    work_dir: str = "~/traceladder"
    # Extra `#SBATCH` lines for what a site needs beyond these (`--constraint=mi350x`).
    extra_sbatch: list[str] = Field(default_factory=list)
    # Seconds between the trigger's `scontrol show job` polls.
    poll_s: float = Field(default=15.0, gt=0)


class AnalysisDaemon(Strict):
    """The Docker daemon that runs the TraceLens image for `engine: tracelens` (no GPU needed)."""

    docker_url: str
    tls_conn_id: str | None = None
    image: str = "traceladder/tracelens:1.0.0"


class Cluster(Strict):
    backend: Literal["local", "docker", "slurm"]
    description: str = ""
    runner_image: str | None = None
    storage: StorageSettings = Field(default_factory=StorageSettings)
    hosts: list[Host] = Field(min_length=1)
    # Primus's torchrun launch (docker backend): GPUS_PER_NODE (also what the GPU preflight
    # expects to find idle), NNODES and MASTER_ADDR. Single node only: one rung is one container.
    gpus_per_node: int | None = Field(default=None, ge=1)
    nnodes: Literal[1] = 1
    master_addr: str = "localhost"
    master_port: int = 1234
    tracelens: AnalysisDaemon | None = None
    slurm: SlurmSettings | None = None
    spool: SpoolSettings = Field(default_factory=SpoolSettings)

    def launch_env(self) -> dict[str, str]:
        """Environment that primus-cli direct reads for torchrun; it beats the ladder's values."""
        env = {
            "NNODES": str(self.nnodes),
            "NODE_RANK": "0",
            "MASTER_ADDR": self.master_addr,
            "MASTER_PORT": str(self.master_port),
        }
        if self.gpus_per_node is not None:
            env["GPUS_PER_NODE"] = str(self.gpus_per_node)
        return env


class AlertSettings(Strict):
    """`alerts:` (issue 59): where the deployment's alerts live, one place for every ladder
    (whatever their own prefixes or buckets): `<prefix>/alerts/<id>.json` in `bucket`, through
    `conn_id`. `base_url`: the Airflow UI's address the notices link to (the api-server's
    `[api] base_url` when unset). `recover_after`: the runs in a row back inside the good
    segment's 99% bound that mark an alert recovered."""

    conn_id: str = "traceladder_s3"
    bucket: str = env_vars.DEFAULT_BUCKET
    prefix: Name = "traceladder-alerts"
    base_url: str | None = None
    recover_after: int = Field(default=3, ge=1, le=20)

    @property
    def effective_bucket(self) -> str:
        """The bucket, unless the deployment overrides it with TRACELADDER_S3_BUCKET."""
        return env_vars.S3_BUCKET.over(self.bucket)


class Clusters(Strict):
    schema_: Literal[1] = Field(alias="schema")
    clusters: dict[Name, Cluster]
    alerts: AlertSettings = Field(default_factory=AlertSettings)
