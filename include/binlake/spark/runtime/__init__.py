"""The JVM and Python runtime binlake gives Spark: the session builder, the driver JVM's class-data
archive, the Python daemon, and the package zip shipped to executors."""
