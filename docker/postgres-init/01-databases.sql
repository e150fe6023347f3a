-- One Postgres for Airflow's metadata, the Iceberg SQL catalog and binlake's state store.
CREATE DATABASE airflow;
CREATE DATABASE iceberg;
CREATE DATABASE binlake_state;
