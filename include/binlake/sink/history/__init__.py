"""What the sink keeps of the past: changelog tables, history (SCD2) tables, soft deletes."""
