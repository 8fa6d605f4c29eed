# Two entry points: `make run` and `make test`. Both create .venv on first use.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test lint bench verify clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.runtime-installed: requirements.txt | $(BIN)/python
	$(BIN)/python -m pip install --quiet -r requirements.txt
	touch $@

$(VENV)/.dev-installed: requirements.txt requirements-dev.txt | $(BIN)/python
	$(BIN)/python -m pip install --quiet -r requirements-dev.txt
	touch $(VENV)/.runtime-installed $@

run: $(VENV)/.runtime-installed
	$(BIN)/streamlit run app.py --server.port 8501

test: $(VENV)/.dev-installed
	$(BIN)/python -m pytest

lint: $(VENV)/.dev-installed
	$(BIN)/ruff check .

bench: $(VENV)/.dev-installed
	$(BIN)/python -m explorer bench

verify: $(VENV)/.runtime-installed
	$(BIN)/python -m explorer verify

clean:
	rm -rf $(VENV) .pytest_cache
