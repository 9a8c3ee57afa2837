# make run / make test / make bench: each sets itself up from nothing (venv, install, build).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# the package with the dev extra (tests, benchmarks, the Spark pipeline)
STAMP  := $(VENV)/.fastcoord-built
# the package with only the server extra (kio, uvloop): what `serve` and `demo` need
RUN_STAMP := $(VENV)/.fastcoord-serve-built
# test-other-python: another CPython minor version in its own venv, with the test and
# server extras only (one core test runs a server's tick; no Spark, no Kafka clients);
# its extensions build beside .venv's (their file names carry the ABI tag)
PYTHON_OTHER ?= $(HOME)/.pyenv/versions/3.13.0/bin/python
VENV_OTHER   := .venv-other
PY_OTHER     := $(VENV_OTHER)/bin/python
OTHER_STAMP  := $(VENV_OTHER)/.fastcoord-built
OTHER_EXTRAS := test
# what the build compiles (a .py among them is compiled too: setup.py's compiled_python,
# those with a .pxd beside them and coordinator.py)
SOURCES := setup.py pyproject.toml $(wildcard fastcoord/*/_native/*.pyx fastcoord/*/_native/*.pxd) \
           $(wildcard fastcoord/*/_native/parts/*.pyx fastcoord/*/_native/parts/*.pxd) \
           $(wildcard fastcoord/*/*.pxd) $(patsubst %.pxd,%.py,$(wildcard fastcoord/*/*.pxd)) \
           fastcoord/core/coordinator.py

.PHONY: run demo test test-core test-pure test-other-python print-python-other bench build clean valgrind chromium bench-baseline profile

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "setuptools>=64" wheel "Cython>=3.0,<4" "numpy>=1.24"

# $(call install,EXTRA[,PYTHON]): the package, editable with its extensions compiled, and EXTRA's
# packages, into PYTHON's venv (default: $(PY))
define install
	$(or $(2),$(PY)) -m pip install --quiet --no-build-isolation -e '.[$(1)]'
	$(or $(2),$(PY)) -c "import fastcoord; assert fastcoord.NATIVE_AVAILABLE, 'native core did not build'"
endef

# the dev extra holds the server extra's packages: a dev install serves too
$(STAMP): $(VENV)/bin/python $(SOURCES)
	$(call install,dev)
	touch $(STAMP) $(RUN_STAMP)

$(RUN_STAMP): $(VENV)/bin/python $(SOURCES)
	$(call install,server)
	touch $(RUN_STAMP)

build: $(STAMP)

# The main job: the coordinator behind the Kafka wire protocol, in the foreground, on the
# embedded defaults of serve.toml (127.0.0.1:9092, topics orders/payments/clicks, durable
# state in ./data, metrics on :9095). Ctrl-C stops it cleanly. Installs only what serving
# needs (the server extra), not the dev extra's Spark.
run: $(RUN_STAMP)
	$(PY) -m fastcoord serve --config serve.toml

# Simulated consumer groups on a ManualClock: what happened and the heartbeat rate.
demo: $(RUN_STAMP)
	$(PY) -m fastcoord demo

# Pyflakes' checks (undefined names, unused imports and locals): [tool.ruff] in pyproject.toml.
.PHONY: lint
lint: $(STAMP)
	$(PY) -m ruff check fastcoord tests benchmarks

# The tests are in tiers, one folder per subsystem (docs/testing.md): tests/core, server,
# storage, pipeline, loadgen, and package (the sources, build and docs as a whole).
# Every behavioural test runs against both twins (the impl fixture); then the
# benchmarks run once each as tests (--benchmark-disable) so they never rot.
# tests/package/test_instruction_gate.py counts instructions with callgrind: install
# valgrind when it is missing and we may (root); without it that test skips.
# tests/pipeline/test_pipeline_report.py renders the report in headless Chromium: install
# it when missing and we may (root); under make test its test fails, never skips, without it.
test: lint valgrind chromium
	FASTCOORD_BROWSER_TESTS=required $(PY) -m pytest -q tests
	$(PY) -m pytest -q benchmarks --benchmark-disable

# The core tier alone (timer, purgatory, groups, coordinator; both twins): the quick loop
# while changing the core. It runs whole, slow tests included, but its state machines and
# slow property tests draw a quarter of their examples (tests/helpers/tier.py); make test
# draws them all (docs/testing.md: its time).
test-core: $(STAMP)
	FASTCOORD_QUICK=1 $(PY) -m pytest -q tests/core

# The core and server tiers with the extensions switched off, as a user without a
# compiler has them, and the tests of the other twins: the storage scanner's and the
# pipeline's runs and replay driver (replay.py interpreted); Spark's tests are left to
# `make test` (their workers would only run the same replay slower).
PURE_TESTS := tests/core tests/server tests/storage/test_storage_scan.py \
              tests/storage/test_storage_recovery.py tests/pipeline/test_runs.py \
              tests/pipeline/test_pipeline_replay.py tests/pipeline/test_replay_golden.py
test-pure: $(STAMP)
	FASTCOORD_NO_EXTENSIONS=1 $(PY) -m pytest -q $(PURE_TESTS)

$(PY_OTHER):
	$(PYTHON_OTHER) -m venv $(VENV_OTHER)
	$(PY_OTHER) -m pip install --quiet --upgrade pip
	$(PY_OTHER) -m pip install --quiet "setuptools>=64" wheel "Cython>=3.0,<4" "numpy>=1.24"

$(OTHER_STAMP): $(PY_OTHER) $(SOURCES)
	$(call install,$(OTHER_EXTRAS),$(PY_OTHER))
	touch $(OTHER_STAMP)

# The core tier on the other interpreter (PYTHON_OTHER): the twins on another CPython.
test-other-python: $(OTHER_STAMP)
	$(PY_OTHER) -m pytest -q tests/core

# the interpreter test-other-python would use (.ci/run skips that target without it)
print-python-other:
	@echo $(PYTHON_OTHER)

# Each module writes bench_results/<module>.json and its summary <module>.md; README.md indexes them.
BENCH_MODULES := $(patsubst benchmarks/test_bench_%.py,%,$(wildcard benchmarks/test_bench_*.py))
bench: $(STAMP)
	@for m in $(BENCH_MODULES); do \
	  echo "== benchmarks/test_bench_$$m.py"; \
	  $(PY) -m pytest -q benchmarks/test_bench_$$m.py --benchmark-only \
	      --benchmark-json=bench_results/$$m.json || exit 1; \
	  $(PY) benchmarks/summarize.py bench_results/$$m.json bench_results/$$m.md \
	      --command "make bench" || exit 1; \
	done
	$(PY) benchmarks/profile_scaling.py bench_results
	$(PY) benchmarks/index.py bench_results
	$(PY) benchmarks/headline.py bench_results README.md

valgrind:
	@command -v valgrind >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
	  && (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind) >/dev/null; } \
	  || echo "valgrind is not installed and cannot be: the instruction-count gate will skip"

chromium:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
	  && (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null; } \
	  || echo "chromium is not installed and cannot be: the report's browser test will fail"

# Rewrite the instruction-count baselines the gate compares against (a deliberate change).
bench-baseline: $(STAMP) valgrind
	$(PY) benchmarks/profile_workloads.py baseline

# Callgrind counts per op (native vs pure), top functions, a py-spy flame graph of the
# pure heartbeat path, and a summary: bench_results/profiles/; then the scaling plots
# (bench_results/scaling-*.png) and the index that embeds them.
profile: $(STAMP) valgrind
	$(PY) -m pip install --quiet py-spy || echo "py-spy did not install: no flame graph"
	$(PY) benchmarks/profile_report.py bench_results/profiles
	$(PY) benchmarks/profile_scaling.py bench_results
	$(PY) benchmarks/index.py bench_results

clean:
	rm -rf build $(VENV) $(VENV_OTHER) *.egg-info fastcoord/*/_native/*.c fastcoord/*/*.c fastcoord/*/_native/*.html \
		fastcoord/*/*.html
	find fastcoord -name '*.so' -delete
