"""The chunked snapshot's source side: tables split into key ranges, a chunk read without locks
between binlog watermarks."""
