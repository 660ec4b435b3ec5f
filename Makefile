# The two commands: `make run` (the main job end to end) and `make test` (the fast suite).
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/pip install --disable-pip-version-check -q -c constraints.txt
STAMP := $(VENV)/.installed

.PHONY: run test test-slow lint install clean

$(STAMP): pyproject.toml constraints.txt
	@echo "Installing fieldrl into $(VENV) (about 3 minutes on a fresh clone)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# pip's machine-wide config lists index folders that may be absent: hide only that noise.
	@echo "[1/3] torch (the CPU wheel)"
	$(PIP) torch==2.13.0 2>&1 | { grep -v "^WARNING: Location" || true; }
	@echo "[2/3] fieldrl with every app's extra, Ray, MLflow and the dev tools"
	$(PIP) -e '.[all,dev]' 2>&1 | { grep -v "^WARNING: Location" || true; }
	@echo "[3/3] checking the install"
	$(BIN)/python -c "import fieldrl, torch, fastapi, ray, mlflow"
	touch $(STAMP)

install: $(STAMP)

# Every installed app end to end on its small preset; until an app exists, the reference
# path (CartPole PPO through the core, under tests/reference) stands in for one.
run: $(STAMP)
	@if [ -n "$$($(BIN)/fieldrl apps --names)" ]; then $(BIN)/fieldrl run-all; else \
	  echo "No app installed yet: running the reference path (tests/reference)."; \
	  PYTHONPATH=$(CURDIR)/tests/reference FIELDRL_EXTRA_APPS=ppo_cartpole:APP $(BIN)/fieldrl run-all; fi

test: $(STAMP)
	$(BIN)/ruff check shared apps tests
	# two workers: the suite is CPU-bound and every test keeps to one thread
	$(BIN)/pytest -q -n 2

test-slow: $(STAMP)
	$(BIN)/pytest -q -m slow

lint: $(STAMP)
	$(BIN)/ruff check shared apps tests
	$(BIN)/ruff format --check shared apps tests

clean:
	rm -rf $(VENV) runs .pytest_cache
