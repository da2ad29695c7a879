# The two commands a new user needs: `make demo` and `make test`. Both set everything up first:
# Debian packages (when missing), the virtualenv, and the JVM artifacts from Maven Central (cached in .cache/).
SHELL := /bin/bash
# The first Python 3.11-3.13 found (`make test PYTHON=python3.13 VENV=.venv-3.13` picks another one).
SUPPORTED := import sys; sys.exit(not (3, 11) <= sys.version_info[:2] <= (3, 13))
PYTHON ?= $(firstword $(foreach p,python3 python3.13 python3.12 python3.11,$(shell $(p) -c '$(SUPPORTED)' >/dev/null 2>&1 && echo $(p))))
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: setup system-deps venv jvm demo test unit integration lint format bench stack-up stack-down clean

setup: system-deps venv jvm

# Java 17+ (Kafka, Spark), Maven (fetches the JVM artifacts), PostgreSQL (the postgres apply target and its
# tests), a C compiler (the optional PlainBuffer accelerator), Go (builds tests/compose_check, which validates
# docker-compose.yml with compose-go; it needs Go 1.24, which an older Go 1.21+ fetches by itself); installed only
# when missing.
system-deps:
	@missing=""; \
	command -v java >/dev/null || missing="$$missing openjdk-17-jdk-headless"; \
	command -v mvn >/dev/null || missing="$$missing maven"; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	command -v cc >/dev/null || missing="$$missing gcc"; \
	command -v go >/dev/null || [ -x /usr/local/go/bin/go ] || missing="$$missing golang-go"; \
	[ -n "$(PYTHON)" ] || missing="$$missing python3 python3-venv"; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi; \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq $$missing; \
	fi

venv: $(STAMP)

# pip's output (build warnings of the C accelerators and of dependencies) goes to a log named only on failure.
$(STAMP): pyproject.toml
	@[ -n "$(PYTHON)" ] || { echo "cdcbridge needs Python 3.11, 3.12 or 3.13: install one (Debian: python3 python3-venv)"; exit 1; }
	@[ -x $(BIN)/python ] || $(PYTHON) -m venv $(VENV)
	@mkdir -p .state; \
	{ $(BIN)/pip install -q --upgrade pip setuptools wheel && $(BIN)/pip install -q -e '.[dev]'; } >.state/pip.log 2>&1 \
	  || { echo "installing the Python packages failed: see .state/pip.log" >&2; exit 1; }
	@touch $(STAMP)

# The artifacts' paths and Maven's output go to a log named only on failure (`cdcbridge stack fetch` lists them).
jvm: venv
	@mkdir -p .state; \
	$(BIN)/cdcbridge stack fetch >.state/jvm-fetch.log 2>&1 \
	  || { echo "fetching the JVM artifacts failed: see .state/jvm-fetch.log" >&2; exit 1; }

# Prints the demo's own lines and the names of its log files, nothing else.
demo: setup
	@$(BIN)/cdcbridge demo

test: setup
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/pytest -p no:cacheprovider -q -ra tests

unit: venv
	$(BIN)/pytest -q tests/unit

integration: setup
	$(BIN)/pytest -q -ra tests/integration

lint:
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/ruff format --check .

format:
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

stack-up: setup
	$(BIN)/cdcbridge stack up

stack-down:
	$(BIN)/cdcbridge stack down

clean:
	rm -rf $(VENV) .cache .state .pytest_cache .ruff_cache .hypothesis
