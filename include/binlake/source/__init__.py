"""The MySQL/MariaDB side: connections, validation, discovery, chunking and the binlog."""
