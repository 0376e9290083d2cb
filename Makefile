# specctl: `make demo` runs the embedded default, `make test` the whole suite. Both set up everything.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha256sum | cut -c1-16)
HUB := $(CURDIR)/.cache/hub
SGLANG_VENV := $(CURDIR)/.venv-sglang
SGLANG_WHEELS := $(CURDIR)/.cache/sglang-wheels
# The fast tier on four workers (two cores: 85-90 s against 93 s on three and 95 s on six, measured
# 2026-12-05), the labs on two, each lab file on one worker in its order (its
# tests share the worker's session labs, and some leave state the next clears; tests/conftest.py groups
# them, the long groups first). Three lab workers took 8.6 min against 10-10.4 and failed the demo's
# comparison of two measured speedups (the CPU shared three ways). `make test PYTEST_WORKERS=
# LAB_WORKERS=` runs both serially.
PYTEST_WORKERS ?= -n 4 --dist loadgroup
LAB_WORKERS ?= -n 2 --dist loadgroup
# A hung test fails with every thread's stack, far above the slowest (fast tier 10 s, labs 60 s).
FAST_TIMEOUT := --timeout 180
LAB_TIMEOUT := --timeout 900
# Bytecode is cached (a shell that sets PYTHONDONTWRITEBYTECODE would have every test, engine and CLI
# process compile specctl, pytest's rewritten tests and sglang from source: 10 s of collection alone).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: all demo test test-fast lint typecheck schema bench sglang-env sglang-wheels system-deps clean

all: test

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check -U pip
	$(BIN)/python -m pip install -q --disable-pip-version-check torch==2.13.0 numpy
	$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[test,reference,plots]' --config-settings editable_mode=compat
	rm -f $(VENV)/.installed-*
	touch $@

$(HUB)/.built: $(STAMP) examples/models.json examples/hub.py
	$(BIN)/python examples/hub.py $(HUB) >/dev/null
	touch $@

# The embedded default, the product's own workflow on this machine (the tiny models on the reference
# engine, the `local` host): deploy v1 (verified), baseline, deploy v2 with a wrong capture list
# (verify fails, automatic rollback), runs, diff and the check that would have refused v2 (see README).
demo: $(HUB)/.built
	$(BIN)/specctl demo
	@echo; echo "\$$ specctl check profiles/kimi-k2.5-tp8-broken.yaml   # the seed incident, on real model metadata"
	@HF_HUB_CACHE=$(HUB) HF_HUB_OFFLINE=1 $(BIN)/specctl check profiles/kimi-k2.5-tp8-broken.yaml || true

# The CPU-only sglang environment for the conformance tier (cached; a no-op when unchanged).
sglang-env:
	bash scripts/sglang-cpu/setup.sh $(SGLANG_VENV)

# The sglang release wheels the conformance tier reads (scripts/sglang-cpu/wheels.lock: pip download
# --no-deps, each checked against its sha256; cached, so a no-op when unchanged).
sglang-wheels: $(SGLANG_WHEELS)/.verified

$(SGLANG_WHEELS)/.verified: scripts/sglang-cpu/wheels.lock scripts/sglang-cpu/wheels.py
	$(PYTHON) scripts/sglang-cpu/wheels.py $(SGLANG_WHEELS)
	touch $@

# OpenSSH server (and nftables), Slurm (slurmctld, slurmd, the client commands) and MUNGE for the
# integration tests (tests/integration/sshd.py, slurm.py): installed when missing and run as root.
system-deps:
	@pkgs=""; \
	command -v /usr/sbin/sshd >/dev/null 2>&1 || pkgs="$$pkgs openssh-server"; \
	command -v nft >/dev/null 2>&1 || pkgs="$$pkgs nftables"; \
	for f in /usr/sbin/slurmctld /usr/sbin/slurmd /usr/bin/sbatch /usr/bin/squeue /usr/bin/scontrol /usr/bin/scancel \
	         /usr/bin/srun /usr/bin/sinfo /usr/bin/sacct; do [ -x $$f ] || { pkgs="$$pkgs slurm-wlm"; break; }; done; \
	[ -x /usr/sbin/munged ] || pkgs="$$pkgs munge"; \
	if [ -n "$$pkgs" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$pkgs >/dev/null; \
	  else echo "missing and cannot be installed here:$$pkgs: the SSH and Slurm tests will skip (fail under CI=true)"; fi; \
	fi

typecheck: $(STAMP)
	$(BIN)/python -m mypy

# ruff (configured in pyproject.toml): lint and format, on the package and its tests
lint: $(STAMP)
	$(BIN)/ruff check specctl tests
	$(BIN)/ruff format --check specctl tests

# The JSON Schemas of the file formats, as `specctl schema KIND` prints them from the models (the first line
# of every example YAML points an editor at one); tests/profile/test_schema.py fails when one is stale.
schema: $(STAMP)
	mkdir -p docs/schema
	for kind in profile manifest inventory; do \
	  $(BIN)/specctl schema $$kind > docs/schema/$$kind.schema.json.tmp && mv docs/schema/$$kind.schema.json.tmp docs/schema/$$kind.schema.json || exit 1; \
	done

test: $(STAMP) $(HUB)/.built sglang-env sglang-wheels system-deps
	$(MAKE) --no-print-directory lint
	$(BIN)/python -m mypy
	SPECCTL_TEST_TIER=fast $(BIN)/python -m pytest -q -p no:cacheprovider -m "not lab" $(PYTEST_WORKERS) $(FAST_TIMEOUT)
	SPECCTL_SGLANG_PYTHON=$(SGLANG_VENV)/bin/python SPECCTL_SGLANG_WHEELS=$(SGLANG_WHEELS) \
	  $(BIN)/python -m pytest -q -p no:cacheprovider -m lab $(LAB_WORKERS) $(LAB_TIMEOUT) --durations=15

# The fast tier (docs/development.md): everything but the labs, on the fakes of tests/fakes/ (no sshd, no
# Slurm, no engine server, no sglang environment). SPECCTL_TEST_TIER=fast makes a lab fixture or a real
# engine start fail loudly, and keeps the lab modules (torch, fastapi) from being imported.
test-fast: $(STAMP) $(HUB)/.built
	SPECCTL_TEST_TIER=fast $(BIN)/python -m pytest -q -p no:cacheprovider -m "not lab" $(PYTEST_WORKERS) $(FAST_TIMEOUT)

bench: $(STAMP) $(HUB)/.built sglang-env
	$(BIN)/python benchmarks/startup.py
	$(BIN)/python benchmarks/sparse_checkpoint.py
	$(BIN)/python benchmarks/probe.py --python $(SGLANG_VENV)/bin/python
	$(BIN)/python benchmarks/reference_engine.py
	$(BIN)/python benchmarks/deploy_scaling.py

clean:
	rm -rf $(VENV) .cache .pytest_cache .mypy_cache
