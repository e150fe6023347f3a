"""The Spark schema of the ``binlake_binlog`` source's rows (the *envelope*; ``stream.records``
describes its columns and builds and reads its rows with pyarrow).

A module of its own so that Spark's planning processes, which only ask the source for its schema
(one of them per query start), import nothing else: importing ``stream.records`` costs ~1.2 s of
CPU (pyarrow, the row decoder, pyiceberg's types), measured.
"""

SPARK_SCHEMA = "table STRING, kind STRING, data BINARY, at BIGINT, rows BIGINT, ts BIGINT, file STRING"
