"""binlake verify: proves the lake equals the source, chunk by chunk (ARCHITECTURE.md step 8)."""
