# binlake — the two commands are `make demo` and `make test`; everything else is set-up they call.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

UV_VERSION := 0.13.9
TOOLS      := .tools
UV         := $(TOOLS)/bin/uv
VENV       := .venv
BIN        := $(VENV)/bin
DEMO_DIR   ?= .binlake/demo
DEMO_ROWS  ?= 100000
DEMO_STREAM_S ?= 30
CONFIG     ?= include/pipelines/demo.yaml
PYTEST_ARGS ?=
# Two test processes (pytest-xdist): a test spends about 40 % of its time waiting (triggers, Spark
# scheduling, job start-up), which the other process fills; each has its own MariaDB and Spark.
PYTEST_WORKERS ?= 2

# uv must use the machine's Python 3.11 and this project's venv, never download an interpreter.
export UV_PYTHON_DOWNLOADS := never
export UV_PROJECT_ENVIRONMENT := $(CURDIR)/$(VENV)
# Spark's Python workers must run the venv's interpreter (pyspark, pyarrow, binlake live there).
export PYSPARK_PYTHON := $(CURDIR)/$(BIN)/python
export PYSPARK_DRIVER_PYTHON := $(CURDIR)/$(BIN)/python

AIRFLOW_HOME_DIR ?= $(CURDIR)/.binlake/airflow
AIRFLOW_PORT ?= 8080

.PHONY: help demo demo-stop airflow test test-fast lint compose-check setup system-deps lock clean spark-package docs

help:
	@echo "make demo       run binlake on the embedded defaults (private MariaDB with the demo database)"
	@echo "make test       run the whole test suite (lint, types, tests)"
	@echo "make test-fast  the tests without the slow end-to-end ones"
	@echo "make demo-stop  stop the demo MariaDB"
	@echo "make airflow    Airflow (standalone, http://127.0.0.1:$(AIRFLOW_PORT)) with the demo pipeline's DAGs"
	@echo "make docs       the configuration reference from the code, then the docs site (.binlake/site)"

## The main job on embedded defaults.
demo: setup
	$(BIN)/python -m binlake.testing --dir $(DEMO_DIR) up --rows $(DEMO_ROWS)
	set -a; source $(DEMO_DIR)/demo.env; set +a; \
	  $(BIN)/binlake --config $(CONFIG) validate && \
	  $(BIN)/binlake --config $(CONFIG) plan && \
	  $(BIN)/binlake --config $(CONFIG) snapshot && \
	  echo "streaming while the demo workload writes for $(DEMO_STREAM_S) s ..." && \
	  { $(BIN)/binlake --config $(CONFIG) stream --json >$(DEMO_DIR)/stream.json & stream=$$!; } && \
	  $(BIN)/python -m binlake.testing --dir $(DEMO_DIR) workload --rate 200 --txn-size 2 \
	    --seconds $(DEMO_STREAM_S) >$(DEMO_DIR)/workload.json && \
	  kill -TERM $$stream && wait $$stream && \
	  echo "workload stopped ($$(cat $(DEMO_DIR)/workload.json)); catching up ..." && \
	  $(BIN)/binlake --config $(CONFIG) stream --until-caught-up && \
	  $(BIN)/binlake --config $(CONFIG) status && \
	  $(BIN)/binlake --config $(CONFIG) quality --run-name demo && \
	  $(BIN)/binlake --config $(CONFIG) verify && \
	  $(BIN)/python -m binlake.testing --dir $(DEMO_DIR) compare --config $(CONFIG)
	@echo ""
	@echo "Next steps (the demo MariaDB keeps running; its port and password: $(DEMO_DIR)/demo.env):"
	@echo "  set -a; source $(DEMO_DIR)/demo.env; set +a"
	@echo "  $(BIN)/binlake --config $(CONFIG) status          # where the stream is, table by table"
	@echo "  $(BIN)/python -m binlake.testing --dir $(DEMO_DIR) workload --seconds 60 &  # live writes"
	@echo "  $(BIN)/binlake --config $(CONFIG) stream          # follow them (Ctrl-C stops between batches)"
	@echo "  make airflow                                       # the same pipeline as Airflow DAGs"
	@echo "  quality report: .binlake/reports/ (open index.html); docs: docs/ (make docs)"
	@echo "  make demo-stop                                     # stop the demo MariaDB"

demo-stop: setup
	$(BIN)/python -m binlake.testing --dir $(DEMO_DIR) down

## Airflow on this machine: `airflow standalone` (SQLite, LocalExecutor) on 127.0.0.1 with the demo
## pipeline's DAGs unpaused, its source the demo MariaDB (the same one `make demo` uses).
airflow: setup
	$(BIN)/python -m binlake.testing --dir $(DEMO_DIR) up --rows $(DEMO_ROWS)
	mkdir -p $(AIRFLOW_HOME_DIR)
	set -a; source $(DEMO_DIR)/demo.env; set +a; \
	  export PATH="$(CURDIR)/$(BIN):$$PATH" AIRFLOW_HOME=$(AIRFLOW_HOME_DIR) \
	    BINLAKE_WORK_DIR=$(CURDIR)/.binlake/airflow-work \
	    AIRFLOW__CORE__DAGS_FOLDER=$(CURDIR)/dags AIRFLOW__CORE__PLUGINS_FOLDER=$(CURDIR)/plugins \
	    AIRFLOW__CORE__LOAD_EXAMPLES=false AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION=false \
	    AIRFLOW__CORE__EXECUTOR=LocalExecutor AIRFLOW__CORE__PARALLELISM=4 \
	    AIRFLOW__API__HOST=127.0.0.1 AIRFLOW__API__PORT=$(AIRFLOW_PORT) \
	    AIRFLOW__API__BASE_URL=http://127.0.0.1:$(AIRFLOW_PORT) \
	    AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark", "host": "local[2]"}'; \
	  $(BIN)/airflow db migrate >/dev/null && \
	  $(BIN)/airflow pools set binlake 2 "binlake snapshot Spark jobs" >/dev/null && \
	  echo "Airflow on http://127.0.0.1:$(AIRFLOW_PORT): user admin, password in $(AIRFLOW_HOME_DIR)/simple_auth_manager_passwords.json.generated" && \
	  exec $(BIN)/python -m binlake.airflow.standalone  # Ctrl-C or SIGTERM stops every process it started

## The docs: the configuration reference rendered from the config models, then the site (offline).
docs: setup
	$(BIN)/python -m binlake.config.reference > docs/configuration.md
	$(BIN)/mkdocs build --strict --quiet
	@echo "docs: .binlake/site/index.html"

## The test suite: lint, types, docker-compose.yaml, then every test (CI runs exactly this).
test: setup lint compose-check
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist worksteal $(PYTEST_ARGS)

# Compose validates docker-compose.yaml without an engine: the v2 plugin where Docker has it,
# else Debian's docker-compose (installed by system-deps).
compose-check: system-deps
	@if docker compose version >/dev/null 2>&1; then docker compose -f docker-compose.yaml config -q; \
	else docker-compose -f docker-compose.yaml config -q; fi
	@echo "docker-compose.yaml: valid"

test-fast: setup
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist worksteal -m "not slow" $(PYTEST_ARGS)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

## Set-up: system packages, uv at a pinned version, the venv exactly as uv.lock says, the JVM archive.
setup: system-deps $(UV) web/node_modules/.package-lock.json
	@# Bytecode compiled once: where PYTHONDONTWRITEBYTECODE is set (these machines set it), every
	@# process would otherwise compile each module it imports from source, every time (5 of the 10 s
	@# of `binlake quality`, most of an Airflow task's start). Later runs skip what is up to date.
	$(UV) sync --locked --quiet --compile-bytecode
	$(BIN)/python -m compileall -q include jobs dags plugins >/dev/null
	@# Spark's driver JVM starts ~5 s sooner from a class archive; built once (~1 min), a cache only.
	$(BIN)/python -m binlake.spark.runtime.jvm_archive --if-missing

# The scripts, styles and fonts the Data Docs load, from npm (binlake.quality.report_assets).
web/node_modules/.package-lock.json: web/package.json web/package-lock.json
	npm ci --prefix web --ignore-scripts --no-audit --no-fund --loglevel=error

$(UV):
	python3 -m venv $(TOOLS)
	$(TOOLS)/bin/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

# MariaDB server binaries (for the private test/demo server), Java 17 (for Spark), npm (the
# reports' scripts and styles) and Chromium (the browser tests of the UI and reports), from Debian.
system-deps:
	@missing=""; \
	command -v mariadbd >/dev/null || command -v mysqld >/dev/null || [ -x /usr/sbin/mariadbd ] || [ -x /usr/sbin/mysqld ] || missing="$$missing mariadb-server"; \
	command -v java >/dev/null || missing="$$missing openjdk-17-jre-headless"; \
	command -v npm >/dev/null || missing="$$missing nodejs npm"; \
	[ -x /usr/bin/chromium ] || missing="$$missing chromium"; \
	docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null || missing="$$missing docker-compose"; \
	python3 -c 'import sys, ensurepip; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null || python3.11 -c 'import ensurepip' 2>/dev/null || missing="$$missing python3.11 python3.11-venv"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing from Debian:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	  else \
	    echo "binlake needs:$$missing. Run: sudo apt-get update && sudo apt-get install -y$$missing" >&2; exit 1; \
	  fi; \
	fi

## dist/binlake.zip: the package for `spark-submit --py-files` on a cluster.
spark-package: setup
	$(BIN)/python -m binlake.spark.runtime.package dist/binlake.zip

## Regenerate uv.lock after changing dependencies in pyproject.toml.
lock: $(UV)
	$(UV) lock

clean:
	rm -rf $(VENV) $(TOOLS) .pytest_cache .mypy_cache .ruff_cache
