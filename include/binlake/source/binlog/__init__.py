"""The binlog: its transport, events decoded into rows and Arrow columns, JSON, XA, GTIDs."""
