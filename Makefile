# The two commands a user needs: `make serve` (install everything, start the app) and `make test`.
COTEAM_HOME ?= $(HOME)/.coteam
export COTEAM_HOME
PY := $(COTEAM_HOME)/venvs/main/bin/python
ARGS ?=

.PHONY: setup serve test lint bench

setup:
	bash scripts/setup.sh

serve: setup
	$(PY) -m app.cli serve $(ARGS)

test:
	bash scripts/setup.sh --browser
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m pytest $(ARGS)

lint: setup
	$(PY) -m ruff check . && $(PY) -m ruff format --check .

bench:
	bash scripts/setup.sh --bench
	$(PY) bench/serving.py
	$(PY) bench/learner.py --json bench/results/learner.json
