"""binlake: change data capture from MySQL and MariaDB into Apache Iceberg."""

from __future__ import annotations

__version__ = "0.1.0"
