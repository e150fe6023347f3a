"""Data quality on every run: a great-expectations suite per sink table, Data Docs, kept results."""
