# slurm-hetero: `make demo` and `make test` do all set-up on a fresh Debian machine (as root).
SHELL := /bin/bash
# PY builds .venv (the CLI and root's daemons). What runs as a job's user (TaskProlog,
# container wrapper) runs under Debian's /usr/bin/python3 instead: a PY under a private
# folder (pyenv in a 0700 /root) is not runnable by users.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
INTEGRATION_WORKERS ?= 3
# The integration tests' pytest in INTEGRATION_WORKERS processes under a fresh short
# --basetemp ($$base, for the recipe to remove once they pass); the tests to run follow.
define run-integration
base=$$(mktemp -d /tmp/sh-XXXXXX) && \
	$(BIN)/pytest -q -n $(INTEGRATION_WORKERS) --dist loadfile --no-loadscope-reorder --basetemp=$$base
endef
# Debian packages the project needs (Slurm 22.05 on Debian 12, 24.11 on Debian 13).
DEB_PKGS := slurm-wlm slurmd slurmctld slurmdbd slurm-client munge mariadb-server \
	libslurm-dev slurm-wlm-basic-plugins-dev runc busybox-static gcc make lua5.1 \
	chromium prometheus faketime python3 python3-venv

.PHONY: all deps venv spank demo test check lint unit integration fuzz clean golden bench test-24.11

all: venv spank

# Checks each package (fast) and installs only what is missing.
deps:
	@if [ "$$(id -u)" != 0 ]; then echo "make deps: run as root (installs Debian packages)"; exit 2; fi
	@missing=$$(for p in $(DEB_PKGS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages: $$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

venv: $(VENV)/.stamp
$(VENV)/.stamp: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@touch $@

spank: deps
	$(MAKE) -s -C spank

demo: deps venv spank
	$(BIN)/slurm-hetero demo

lint: venv
	$(BIN)/ruff check .
	$(BIN)/mypy

unit: venv
	$(BIN)/pytest -q tests/unit tests/lua

# Before every commit (about two minutes on 2 cores): lint, types, the C option tests, the
# unit and Lua tests spread over the cores. No cluster, no root needed beyond the venv.
check: venv
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(MAKE) -s -C spank test
	$(BIN)/pytest -q -n auto tests/unit tests/lua

integration: deps venv spank
	$(run-integration) $(or $(ARGS),tests/integration) && rm -rf $$base

test: deps venv spank lint
	$(MAKE) -s -C spank test
# Unit, Lua and doctests side by side on every core; then the integration tests in
# INTEGRATION_WORKERS processes, each with its own booted cluster, a test file at a time
# (the tests of a file share their module's cluster), the longest files first
# (tests/integration/conftest.py). They mostly wait on Slurm's timers (a clean run used a
# fifth of two cores), so three run well on two. A short --basetemp: a replay cluster's step sockets live under
# it (at most 107 characters); kept when a test failed. --durations and the time per test file
# (scripts/durations.py): the next cuts.
	$(BIN)/pytest -q -n auto --durations=15 --ignore=tests/integration
	$(run-integration) --durations=40 --junitxml=$$base/integration.xml tests/integration && \
		$(BIN)/python scripts/durations.py $$base/integration.xml && rm -rf $$base

# The integration suite against Slurm 24.11 (Debian 13's packages in a debootstrapped trixie
# root, reused; as root): make test-24.11 ARGS='tests/integration/test_bridge.py -x'
test-24.11:
	scripts/test-slurm-24.11.sh -- $(ARGS)

# Regenerate golden files after an intended change to the templates or the demo site.
golden: venv
	$(BIN)/python -m tests.unit.test_render --regenerate

# Benchmarks print figures (never asserted in tests); each script's docstring says what.
bench: deps venv spank
	@for b in benchmarks/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

fuzz: deps
	$(MAKE) -C spank fuzz && spank/fuzz/run.sh 600

clean:
	rm -rf $(VENV) spank/build .pytest_cache .mypy_cache .ruff_cache
