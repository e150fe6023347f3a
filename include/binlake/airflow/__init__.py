"""binlake on Airflow: the DAG factory, its tasks and operators, the sink tables as Assets.

Nothing here touches MySQL, Spark or the state store when Airflow parses a DAG file: the factory
reads the pipeline YAML files only; every task loads its config and does its work when it runs.
"""
