"""binlake's own metadata: plans, chunk progress, offsets (SQLAlchemy; SQLite or Postgres)."""
