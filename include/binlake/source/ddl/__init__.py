"""DDL from query events: tokens, the parser, the ALTER TABLE algorithm, column types and defaults."""
