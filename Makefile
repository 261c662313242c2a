# doze-kafka developer entry points. `make run` and `make test` are the two that matter.
SHELL := /bin/bash
.DEFAULT_GOAL := help

CARGO      ?= cargo
PYTHON     ?= python3
VENV       := .venv
VPY        := $(VENV)/bin/python
VENV_STAMP := $(VENV)/.doze-requirements.stamp
BIN        := target/release/doze-kafka
LISTEN     ?= 127.0.0.1:9092
DATA_DIR   ?= ./doze-data
# Extra pytest arguments, e.g. `make wire PYTEST_ARGS='-k kcat -x'`.
PYTEST_ARGS ?=

.PHONY: help run build-release test cargo-test wire bench fmt fmt-check clippy deps venv kcat js-deps clean-venv

help:
	@echo "make run     build (release) and run the broker on $(LISTEN), data in $(DATA_DIR)"
	@echo "make test    install test deps, then cargo test, the simulator and madsim sweeps, and the wire tests"
	@echo "make wire    only the wire tests (real Kafka clients against the release binary)"
	@echo "make bench   produce vs raw fdatasync, txn commits/s + EndTxn latency, read_committed fetch (~4 min)"
	@echo "make deps    .venv (tests/requirements.txt), kcat and tests/js (kafkajs);  make venv: only .venv"
	@echo "make sim     sweep SEEDS random seeds of the simulator;  make replay SCENARIO=name SEED=n"
	@echo "make madsim  the real server under madsim (simulated network, clock, disk)"
	@echo "make fmt | fmt-check | clippy"

build-release:
	$(CARGO) build --release -p doze-net

run: build-release
	$(BIN) --listen $(LISTEN) --data-dir $(DATA_DIR)

# --- dependencies -----------------------------------------------------------

# Re-runs only when tests/requirements.txt changes (or the venv is gone).
$(VENV_STAMP): tests/requirements.txt
	@if [ ! -x $(VPY) ] || ! $(VPY) -c 'import sys' >/dev/null 2>&1; then \
	  echo "creating $(VENV)"; rm -rf $(VENV); $(PYTHON) -m venv $(VENV); fi
	$(VPY) -m pip install --disable-pip-version-check -q -r tests/requirements.txt
	@touch $@

venv: $(VENV_STAMP)

# kcat comes from Debian (librdkafka 2.0). Missing and no apt: the kcat test skips.
kcat:
	@if command -v kcat >/dev/null 2>&1; then \
	  echo "kcat: $$(command -v kcat)"; \
	elif command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  echo "installing kcat with apt-get"; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat; } \
	    || echo "WARNING: apt-get install kcat failed; the kcat wire test will be skipped"; \
	else \
	  echo "WARNING: kcat is missing and apt-get is unavailable (or not root); the kcat wire test will be skipped"; \
	fi

# kafkajs for the JS wire tests (tests/js, pinned by its package-lock.json).
# Re-runs only when the lock file changes (or node_modules is gone).
JS_STAMP := tests/js/node_modules/.doze-lock.stamp
$(JS_STAMP): tests/js/package.json tests/js/package-lock.json
	cd tests/js && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

js-deps: $(JS_STAMP)

deps: venv kcat js-deps

# --- tests ------------------------------------------------------------------

cargo-test:
	$(CARGO) test --workspace -- --skip sweep_of_random_seeds_keeps_every_promise
	@# The debug CI sweep on its own, so what it covered is shown (cargo hides
	@# the output of passing tests); `cargo test` alone runs it too.
	set -o pipefail; $(CARGO) test -p doze-sim --test sweep -- --nocapture 2>&1 | grep -E "CI sweep|test result|FAILED|panicked|replay"

# Each wire test is bounded by pytest-timeout (tests/pytest.ini) and the whole
# run by `timeout`, so a hung broker cannot eat CI's budget.
wire: venv js-deps build-release
	cd tests && DOZE_KAFKA_SKIP_BUILD=1 timeout --kill-after=30 1500 ../$(VPY) -m pytest $(PYTEST_ARGS)

test: deps cargo-test sim-ci madsim-ci wire

# --- benchmarks (not part of test) ------------------------------------------

# About 4 minutes; `timeout` bounds it at 10. build-release also builds the
# load generator (target/release/doze-bench, net/src/bin/doze-bench.rs).
bench: venv build-release
	timeout --kill-after=30 1800 $(VPY) bench/bench.py --binary $(BIN) --loadgen target/release/doze-bench

# --- style ------------------------------------------------------------------

fmt:
	$(CARGO) fmt --all

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

clean-venv:
	rm -rf $(VENV)

# --- simulation (sim/, scenarios/) ------------------------------------------

SEEDS     ?= 10000
START     ?= 0
SCENARIO  ?= swarm
SEED      ?= 0
# Test only: PLANT_BUG=ack-before-sync plants a known durability bug.
PLANT_BUG ?=
SIM_FLAGS ?=
SIM_BIN   := target/release/doze-sim
SIM_PLANT := $(if $(PLANT_BUG),--plant-bug $(PLANT_BUG))

.PHONY: sim replay

# Sweeps SEEDS random seeds over the fault swarm; prints seeds/s, simulated
# hours, and the replay command of the first failure (exit non-zero).
sim:
	$(CARGO) build --release -p doze-sim
	$(SIM_BIN) --sweep --seeds $(SEEDS) --start $(START) $(SIM_PLANT) $(SIM_FLAGS)

# Replays one run with its whole history: make replay SCENARIO=name SEED=n
# The release sweep of `make test`: 10,000 fixed seeds (repeatable CI),
# about 5 minutes on 2 cores; prints seeds/s and the simulated hours
# covered, and the replay command of any failure.
.PHONY: sim-ci
sim-ci:
	$(MAKE) sim SEEDS=10000 START=1

replay:
	$(CARGO) build --release -p doze-sim
	$(SIM_BIN) --scenario $(SCENARIO) --seed $(SEED) --trace $(SIM_PLANT) $(SIM_FLAGS)

# --- madsim: the real server under simulated time, network and disk -----------

# net/tests/madsim_cluster.rs with RUSTFLAGS="--cfg madsim" (its own target
# dir, so the normal build is not invalidated). MADSIM_TEST_NUM seeds from
# MADSIM_TEST_SEED (default: the time); a failure prints its replay command.
MADSIM_TEST_NUM ?= 8
.PHONY: madsim
madsim:
	RUSTFLAGS="--cfg madsim" CARGO_TARGET_DIR=target/madsim MADSIM_TEST_NUM=$(MADSIM_TEST_NUM) \
	  timeout --kill-after=30 1200 $(CARGO) test -p doze-net --test madsim_cluster

# The same with fixed seeds, for `make test`: CI is repeatable, and a failure
# there replays with the command it prints.
.PHONY: madsim-ci
madsim-ci:
	$(MAKE) madsim MADSIM_TEST_SEED=1 MADSIM_TEST_NUM=8
