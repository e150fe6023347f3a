"""The Iceberg side: catalog, table layout, exactly-once commits, maintenance."""
