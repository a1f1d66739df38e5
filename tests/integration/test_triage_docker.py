"""The docker triage (issue 51) end to end on real parts: Debian's docker-registry on loopback, the
real Docker Engine, real S3 (SeaweedFS), and the triage's own docker run block (RungDockerOperator
through `triage_tasks.triage_suspects`, the body of the triage DAG's task).

The nightly images are the stand-in runner image re-committed with `STANDIN_EXTRA_WORK_PCT` in
their ENV: the stand-in primus-cli's extra-work control, real sha256 work in every iteration whose
measured time the reported step includes (testkit/standin/primus-cli). They are pushed under
nightly tags and removed from the daemon, so every run pulls its image from the registry, pinned
by digest. The confirm, the bisection over the registry's real tags and the explanation then run
the images; the bisection must name the tag that injected the work.

What these tests cannot show: the Airflow task context is a stand-in here (`_TaskInstance`: the
task-instance identity the containers are labelled with, and a `get_ti_count` that calls every
task alive, so no other test's container is stopped); the DAG around it runs in
test_triage_scheduler.py on the local backend."""

from __future__ import annotations

import json
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator

import pytest
import yaml

from tests.integration.conftest import DockerEngine, StandinImages, docker_cli, standin_docker_cluster
from tests.integration.registry_server import RegistryServer, push_image, remove_local

pytestmark = [pytest.mark.triage, pytest.mark.docker, pytest.mark.service]

LADDER, CLUSTER, HOST = "triage-docker", "triage-docker", "triage-dockerd"
GOOD_RUN, BAD_RUN, GONE_RUN = "week-good", "week-bad", "week-bad-gone"
# tag -> the extra work its image injects (% of the stand-in's iteration): the 4th is the first bad
NIGHTLIES = {"nightly-1": 0, "nightly-2": 0, "nightly-3": 0, "nightly-4": 100, "nightly-5": 120}
INJECTED = "nightly-4"
NOFILE = 16384  # this sandbox's dockerd has a hard limit of 20000


class _TaskInstance:
    """The triage task's instance as the run block reads it: its identity (the containers' labels)
    and the two Task SDK calls the operator makes."""

    dag_id, run_id, task_id, map_index = "traceladder-triage", "manual__triage-docker", "triage", -1

    def __init__(self) -> None:
        self.pushed: dict[str, object] = {}

    def xcom_push(self, key: str, value: object) -> None:
        self.pushed[key] = value

    def get_ti_count(self, **_: Any) -> int:
        return 1  # every task instance alive: this test never stops another test's container


@dataclass
class Nightlies:
    registry: RegistryServer
    repository: str
    digests: dict[str, str]  # tag -> manifest digest

    def ref(self, tag: str) -> str:
        return f"{self.registry.host}/{self.repository}:{tag}"

    def pinned(self, tag: str) -> str:
        return f"{self.registry.host}/{self.repository}@{self.digests[tag]}"


def push_nightlies(registry: RegistryServer, runner: str, repository: str, slowdowns: dict[str, int]) -> Nightlies:
    """Each nightly: the runner image committed with its STANDIN_EXTRA_WORK_PCT (a new config, so a
    new digest and `created`), pushed, then removed from the daemon."""
    digests = {}
    for tag, pct in slowdowns.items():
        reference = f"{registry.host}/{repository}:{tag}"
        container = docker_cli("create", runner).stdout.strip()
        try:
            docker_cli("commit", "--change", f"ENV STANDIN_EXTRA_WORK_PCT={pct}", container, reference)
        finally:
            docker_cli("rm", "-f", container, check=False)
        digests[tag] = push_image(reference)
        time.sleep(0.01)  # distinct `created` times, in push order
    remove_local(registry)
    return Nightlies(registry, repository, digests)


@pytest.fixture
def triage_ladder(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    airflow_home: Path,
    s3_server: Any,
    docker_engine: DockerEngine,
    standin_images: StandinImages,
    open_registry: RegistryServer,
) -> Any:
    """A docker ladder of one rung on this machine's dockerd (clusters + ladders in tmp), with a
    torch lens for the explanation and a small triage budget; the registry's Airflow connection
    (no credentials: the test registry is open) as a deployment sets it."""
    from traceladder.config import find_ladder, load_ladder
    from traceladder.config.loader import CONFIG_DIR

    host = {"name": HOST, "pool": f"traceladder-{HOST}", "docker_url": docker_engine.unix_url}
    clusters = {"schema": 1, "clusters": {CLUSTER: standin_docker_cluster(standin_images.runner, s3_server, [host])}}
    (tmp_path / "clusters.yaml").write_text(yaml.safe_dump(clusters, sort_keys=False))
    (tmp_path / "ladders").mkdir()
    ladder = {
        "schema": 1,
        "extends": str(CONFIG_DIR / "ladders" / "deepseek-v4-flash-mi350x.yaml"),
        "ladder": LADDER,
        "cluster": CLUSTER,
        "repeats": 1,
        "timeout_s": 120,
        "schedule": None,
        "base": {"model_args": {"train_iters": 10}},
        "rungs": [{"name": "baseline"}],
        "lenses": {"rung": "baseline", "use": ["none", "torch_rank0"]},
        "triage": {"budget_blocks": 8},
    }
    (tmp_path / "ladders" / f"{LADDER}.yaml").write_text(yaml.safe_dump(ladder, sort_keys=False))
    monkeypatch.setenv("TRACELADDER_CLUSTERS_FILE", str(tmp_path / "clusters.yaml"))
    monkeypatch.setenv("TRACELADDER_LADDERS_DIR", str(tmp_path / "ladders"))
    monkeypatch.setenv("TRACELADDER_CONTAINER_NOFILE", str(NOFILE))
    host_name, port = open_registry.host.split(":")
    registry = {"conn_type": "traceladder_registry", "host": host_name, "port": int(port)}
    monkeypatch.setenv("AIRFLOW_CONN_TRACELADDER_REGISTRY", json.dumps(registry))
    return load_ladder(find_ladder(LADDER))


@pytest.fixture
def nightlies(open_registry: RegistryServer, standin_images: StandinImages) -> Iterator[Nightlies]:
    try:
        yield push_nightlies(open_registry, standin_images.runner, "triage/docker-bisect", NIGHTLIES)
    finally:
        remove_local(open_registry)


def _suspect_group(loaded: Any, images: Nightlies, good_tag: str, bad_tag: str, bad_run: str = BAD_RUN) -> list[Any]:
    """One suspect as the weekly run would record it: the rung's resolved spec with the good and the
    bad run's image, each run's provenance naming the digest the daemon pulled."""
    from testkit.triage_docs import suspect_between
    from traceladder.plan.build import build_plan
    from traceladder.triage.suspects import RunSetup

    (spec,) = build_plan(loaded, rungs=["baseline"], lens="none", repeats=1)
    base = json.loads(spec.to_json())
    good = RunSetup(GOOD_RUN, {**base, "image": images.ref(good_tag)}, {"image_digest": images.pinned(good_tag)})
    bad = RunSetup(bad_run, {**base, "image": images.ref(bad_tag)}, {"image_digest": images.pinned(bad_tag)})
    return [(suspect_between(good, bad, "baseline", reason="manual", delta_pct=100.0), good, bad)]


def _triage(loaded: Any, group: list[Any], bad_run: str = BAD_RUN) -> Any:
    """triage_suspects on the group (its triage.json under `bad_run`: one per test, the S3 server
    is the session's)."""
    from traceladder.airflow.ladders import ladder_store
    from traceladder.workflows.triage_tasks import TRIAGE_DAG_ID, triage_suspects

    _loaded, store = ladder_store(LADDER)
    context = {"dag": SimpleNamespace(dag_id=TRIAGE_DAG_ID), "ti": _TaskInstance()}
    (doc,) = triage_suspects(loaded, store, bad_run, group, context, approved=True)
    return doc


def test_the_bisection_over_the_registrys_tags_finds_the_injected_nightly(
    triage_ladder: Any, nightlies: Nightlies
) -> None:
    started = time.monotonic()
    doc = _triage(triage_ladder, _suspect_group(triage_ladder, nightlies, "nightly-1", "nightly-5"))
    wall_s = time.monotonic() - started
    steps = [(s.kind, s.good.rsplit(":", 1)[-1], s.candidate.rsplit(":", 1)[-1], s.verdict) for s in doc.steps]
    assert doc.state == "done" and doc.label == "confirmed regression", (doc.label, doc.conclusion, steps)
    # every tag of the repository, in push (created) order, each pinned by its registry digest
    assert [c.name for c in doc.candidates] == [nightlies.ref(t) for t in NIGHTLIES]
    assert [(c.kind, c.image) for c in doc.candidates] == [("image", nightlies.pinned(t)) for t in NIGHTLIES]
    assert [c.digest for c in doc.candidates] == [nightlies.digests[t] for t in NIGHTLIES]
    assert doc.first_bad == nightlies.ref(INJECTED), (doc.conclusion, steps)
    assert doc.last_good == nightlies.ref("nightly-3"), (doc.conclusion, steps)
    assert steps[0] == ("confirm", GOOD_RUN, BAD_RUN, "confirmed")
    # each step against the range's good end (decisions by size), then the culprit's pair directly
    assert [s for s in steps if s[0] in ("bisect", "pair")] == [
        ("bisect", "nightly-1", "nightly-3", "not reproduced"),
        ("bisect", "nightly-1", "nightly-4", "confirmed"),
        ("pair", "nightly-3", "nightly-4", "confirmed"),
    ], steps
    assert [(c.name, c.last_good) for c in doc.culprits] == [(nightlies.ref(INJECTED), nightlies.ref("nightly-3"))]
    confirmed = doc.steps[-1]
    assert confirmed.delta_pct is not None and confirmed.delta_pct > 20.0, confirmed
    # the explanation: one profiled run of each end through the same run block
    e = doc.explanation
    assert e is not None and e.error is None, e
    assert (e.good, e.bad) == (nightlies.ref("nightly-3"), nightlies.ref(INJECTED))
    # the injected work is the one op that appeared (the stand-in's trace shows it as an op and its kernel)
    assert [(op.name, op.status) for op in e.top_ops[:1]] == [("standin::extra_work", "appeared")], e.top_ops
    assert e.sentence and "standin_extra_work_kernel" in e.sentence, e.sentence
    print(
        f"docker triage: {len(doc.steps)} steps, first bad {INJECTED} at {confirmed.delta_pct:+.1f}% "
        f"{confirmed.interval_pct}, {wall_s:.1f} s wall"
    )


def test_the_good_runs_image_gone_from_the_registry_and_the_daemon_is_insufficient(
    triage_ladder: Any, open_registry: RegistryServer, standin_images: StandinImages
) -> None:
    images = push_nightlies(open_registry, standin_images.runner, "triage/docker-gone", {"good": 0, "bad": 100})
    try:
        url = f"{open_registry.url}/v2/{images.repository}/manifests/{images.digests['good']}"
        urllib.request.urlopen(urllib.request.Request(url, method="DELETE"), timeout=10).close()  # noqa: S310 (loopback)
        doc = _triage(triage_ladder, _suspect_group(triage_ladder, images, "good", "bad", GONE_RUN), GONE_RUN)
    finally:
        remove_local(open_registry)
    assert (doc.state, doc.label) == ("done", "insufficient data"), (doc.label, doc.conclusion)
    (step,) = doc.steps
    assert (step.kind, step.verdict) == ("confirm", "skipped")
    reason = doc.conclusion or ""
    assert "\n" not in reason and images.pinned("good") in reason, reason
    assert reason.startswith(f"{GOOD_RUN} did not run: "), reason
