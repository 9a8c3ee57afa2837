# make run / make test / make bench: each sets itself up from nothing (venv, install, build).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# the package with the dev extra (tests, benchmarks, the Spark pipeline)
STAMP  := $(VENV)/.fastcoord-built
# the package with only the server extra (kio, uvloop): what `serve` and `demo` need
RUN_STAMP := $(VENV)/.fastcoord-serve-built
# what the build compiles (a .py among them is compiled too: see setup.py)
SOURCES := setup.py pyproject.toml $(wildcard fastcoord/*/_native/*.pyx fastcoord/*/_native/*.pxd) \
           $(wildcard fastcoord/*/*.pxd) $(patsubst %.pxd,%.py,$(wildcard fastcoord/*/*.pxd))

.PHONY: run demo test test-pure bench build clean valgrind bench-baseline profile

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "setuptools>=64" wheel "Cython>=3.0,<4" "numpy>=1.24"

# $(call install,EXTRA): the package, editable with its extensions compiled, and EXTRA's packages
define install
	$(PY) -m pip install --quiet --no-build-isolation -e '.[$(1)]'
	$(PY) -c "import fastcoord; assert fastcoord.NATIVE_AVAILABLE, 'native core did not build'"
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

# Every behavioural test runs against both twins (the impl fixture); then the
# benchmarks run once each as tests (--benchmark-disable) so they never rot.
# tests/test_instruction_gate.py counts instructions with callgrind: install valgrind
# when it is missing and we may (root); without it that test skips.
test: lint valgrind
	$(PY) -m pytest -q tests
	$(PY) -m pytest -q benchmarks --benchmark-disable

# The whole suite with the extensions switched off, as a user without a compiler has it.
test-pure: $(STAMP)
	FASTCOORD_NO_EXTENSIONS=1 $(PY) -m pytest -q tests

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
	rm -rf build $(VENV) *.egg-info fastcoord/*/_native/*.c fastcoord/*/*.c fastcoord/*/_native/*.html \
		fastcoord/*/*.html
	find fastcoord -name '*.so' -delete