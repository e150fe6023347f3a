"""A table's share of a stream batch: compacted per key, completed, merged (on the executors or
in the driver) and committed."""
