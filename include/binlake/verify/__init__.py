"""binlake verify: proves the lake equals the source, chunk by chunk (docs/architecture.md, step 8)."""
