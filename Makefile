# Entry points: `make run`, `make test` (everything) and `make check` (the quick tier, for the edit-test loop).
# All create .venv on first use. Tiers: docs/testing.md.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test check e2e lint bench bench-browser verify mutate clean venv-install

# uv (PyPI's, pinned) installs the pins: a fresh clone's CI installs in 40 to 47 s where pip took 78 to 93 s
# (docs/testing.md). --compile-bytecode as pip does: without .pyc files every process that imports TensorFlow
# compiles it again (and the suite starts hundreds). Where uv cannot be installed, or fails, pip installs. uv reads
# no pip.conf: the folders of PIP_FIND_LINKS (where a machine keeps torch's CPU build) are passed to it.
UV_VERSION := 0.13.9
$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet uv==$(UV_VERSION) || echo "uv could not be installed: pip installs instead"

# $(call INSTALL,ARGS): `pip install ARGS` into .venv, by uv where it is installed; by pip where uv is not, or
# fails (a machine whose pip.conf names an index or a folder that uv does not read)
INSTALL = { [ -x $(BIN)/uv ] && $(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python \
	$(foreach d,$(PIP_FIND_LINKS),--find-links $(d)) $(1); } || \
	{ [ ! -x $(BIN)/uv ] || echo "uv could not install $(1): pip installs it"; $(BIN)/python -m pip install --quiet $(1); }

# The project itself is installed editable (no deps: the pins above), so `.venv/bin/gradient-explorer` and
# `.venv/bin/python -m explorer verify my_ops.py` work from any folder, on this clone's code.
$(VENV)/.runtime-installed: requirements.txt pyproject.toml | $(BIN)/python
	$(call INSTALL,-r requirements.txt)
	$(call INSTALL,--no-deps -e .)
	touch $@

$(VENV)/.dev-installed: requirements.txt requirements-dev.txt pyproject.toml | $(BIN)/python
	$(call INSTALL,-r requirements-dev.txt)
	$(call INSTALL,--no-deps -e .)
	touch $(VENV)/.runtime-installed $@

# `make venv-install ARGS=...`: one more package into .venv, the same way (.ci/run installs torch so)
venv-install: | $(BIN)/python
	$(call INSTALL,$(ARGS))

# Listens on 127.0.0.1 only. SHARE=1 opens it to the network; REPLICAS=N runs N servers behind HAProxy;
# AUTH=FILE asks for a password from an htpasswd file at the proxy; LOGIN=oidc asks everyone to sign in with the
# provider of SECRETS=FILE (default ~/.streamlit/secrets.toml) (docs/serving.md).
run: $(VENV)/.runtime-installed
	$(BIN)/python -m explorer run $(if $(OPS),--ops $(OPS)) $(if $(SHARE),--share) \
		$(if $(REPLICAS),--replicas $(REPLICAS)) $(if $(AUTH),--auth $(AUTH)) \
		$(if $(LOGIN),--login $(LOGIN)) $(if $(SECRETS),--secrets $(SECRETS))

# Unit and AppTest tests on both cores and, at the same time, the real-browser tests serially (one server, one
# Chromium): alone, the browser tests keep about half a core busy (they wait on their servers and Chromium) and the
# unit tests leave part of the second core idle; together they fill both cores (docs/testing.md, "Where the time goes").
# The browser run's output goes to test-artifacts/e2e.log and is printed when both are over; the target fails if
# either fails. Ctrl-C stops both (the browser run stops its servers: tests/e2e/conftest.py).
# Without Chromium the browser tests skip: every skip is listed with its reason (-ra, pyproject.toml) and
# the run ends with "N BROWSER TESTS DID NOT RUN" in red (tests/e2e/conftest.py); with CI=true they fail.
# --dist worksteal: each worker starts on its own half of the collection (whole modules, so a module's fixtures
# are built on one worker, where `load` built many on both) and, when it runs dry, takes the end of the other's
# queue. The all-slow modules are collected first (tests/conftest.py), so the long tests start at once.
# --durations=30: the 30 slowest tests, to see where the time goes. Compare: make test XDIST="-n 2 --dist load".
# BESIDE_BROWSER: unit modules that run in the browser run (first: all-slow modules lead, tests/conftest.py), to
# balance the two (the browser run ended minutes before the unit tests, which then left a core part idle): modules
# that mostly wait on fresh interpreters of their own, about 85 s there.
XDIST ?= -n 2 --dist worksteal
BESIDE_BROWSER := tests/test_watch_processes.py tests/test_cpu.py
E2E_LOG := test-artifacts/e2e.log
test: $(VENV)/.dev-installed
	@mkdir -p $(dir $(E2E_LOG)); \
	echo "browser tests and $(BESIDE_BROWSER): running next to the unit tests, output in $(E2E_LOG) (printed at the end)"; \
	$(BIN)/python -m pytest -p no:xdist tests/e2e $(BESIDE_BROWSER) --durations=30 --color=yes \
		> $(E2E_LOG) 2>&1 & browser=$$!; \
	trap 'kill -TERM $$browser 2>/dev/null; wait $$browser; exit 130' INT TERM; \
	$(BIN)/python -m pytest $(XDIST) -m "not e2e" $(addprefix --ignore=,$(BESIDE_BROWSER)) --durations=30; unit=$$?; \
	echo "unit tests over (exit $$unit); waiting for the browser tests"; \
	wait $$browser; e2e=$$?; \
	cat $(E2E_LOG); \
	echo "make test: unit tests exit $$unit, browser tests exit $$e2e"; \
	[ $$unit -eq 0 ] && [ $$e2e -eq 0 ]

# The quick tier: unit and AppTest tests without `slow` (training, worker processes, subprocesses) and without
# the browser, on both cores; a few minutes. `make test` runs these and everything else.
check: $(VENV)/.dev-installed
	$(BIN)/python -m pytest $(XDIST) -m "not slow and not e2e" --durations=10

e2e: $(VENV)/.dev-installed
	$(BIN)/python -m pytest -p no:xdist -m e2e tests/e2e

# ruff, then the layout: no import circle, arrows one way (tests/test_architecture.py), and no module-level
# name defined twice (tests/test_code_hygiene.py: ruff F811 misses it when the first is used in between).
lint: $(VENV)/.dev-installed
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -p no:xdist tests/test_architecture.py tests/test_code_hygiene.py

bench: $(VENV)/.dev-installed
	$(BIN)/python -m explorer bench

bench-browser: $(VENV)/.dev-installed
	$(BIN)/python -m explorer.bench.browser

verify: $(VENV)/.runtime-installed
	$(BIN)/python -m explorer verify

# Mutation testing (mutmut, [tool.mutmut] in pyproject.toml) of the modules that turn numbers into verdicts and
# of the STE-bias closed forms, each mutant against the fast tests that cover it; not in CI (hours on 2 cores).
# MODULE=explorer.train.ste_bias runs one module's mutants; JOBS=2 two at a time. Survivors: docs/testing.md.
mutate: $(VENV)/.dev-installed
	env -u PYTHONPATH nice -n 10 $(BIN)/mutmut run --max-children $(or $(JOBS),1) $(if $(MODULE),"$(MODULE).*")
	$(BIN)/mutmut results

clean:
	rm -rf $(VENV) .pytest_cache mutants
