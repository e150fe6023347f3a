"""Keys in the sink: where each key's row lives (the key index), which files may hold a key, and
which rows match a batch's keys or ranges."""
