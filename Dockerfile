# binlake with Airflow, Spark (pyspark's own distribution) and Java 17: one image for the Airflow
# services and the Spark master and workers of docker-compose.yaml. Built from this repository's
# lock file, as `make setup` builds the venv on a machine.

# The Data Docs' scripts, styles and fonts (binlake.quality.report_assets), from web/'s npm lock.
FROM node:20-bookworm-slim AS web
WORKDIR /web
COPY web/package.json web/package-lock.json web/.npmrc ./
RUN npm ci --ignore-scripts --no-audit --no-fund --loglevel=error

FROM python:3.11-slim-bookworm

RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends openjdk-17-jre-headless make procps \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/binlake
COPY pyproject.toml uv.lock README.md Makefile ./
COPY include include
COPY jobs jobs
COPY dags dags
COPY plugins plugins
COPY docker docker
COPY --from=web /web/node_modules web/node_modules
RUN make .tools/bin/uv && .tools/bin/uv sync --locked --no-dev --compile-bytecode \
 && PYSPARK_PYTHON=/opt/binlake/.venv/bin/python .venv/bin/python -m binlake.spark.runtime.jvm_archive

ENV PATH=/opt/binlake/.venv/bin:$PATH \
    PYSPARK_PYTHON=/opt/binlake/.venv/bin/python \
    PYSPARK_DRIVER_PYTHON=/opt/binlake/.venv/bin/python \
    UV_PROJECT_ENVIRONMENT=/opt/binlake/.venv
