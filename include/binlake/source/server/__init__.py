"""The server itself: connections, privileges, validation, discovery, foreign keys, charsets and
collations."""
