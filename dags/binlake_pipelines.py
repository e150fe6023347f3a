"""Airflow DAGs of every binlake pipeline file (``BINLAKE_PIPELINES_DIR``, default include/pipelines).

Thin on purpose: the factory reads the pipeline files and wires tasks; nothing touches MySQL, Spark
or the state store while Airflow parses this file.
"""

from binlake.airflow.dag_factory import build_dags

globals().update(build_dags())
