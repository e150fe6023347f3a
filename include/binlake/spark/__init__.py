"""binlake on Spark: data sources and the driver logic of the Spark jobs."""
