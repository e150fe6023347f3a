"""The shadow tables of online schema-change tools: the name alone says which table one stands in
for (the schema side's knowledge; discovery selects them, transforms follow their base's rule)."""

from __future__ import annotations

import re

from binlake.events import TableId

#: The tables online schema-change tools build beside a table ``t`` and swap in for it: gh-ost's
#: ``_t_gho`` (its changelog ``_t_ghc``; the old table leaves as ``_t_del``), pt-online-schema-change's
#: ``_t_new`` (``_t_old``).
_SHADOW = re.compile(r"^_+(.+)_(gho|ghc|del|new|old)$")


def shadow_base(table: TableId) -> TableId | None:
    """The table ``table``'s name makes it an online schema-change tool's shadow of (gh-ost's
    ``_t_gho``, pt-osc's ``_t_new``…), whether or not that table is captured."""
    found = _SHADOW.match(table.table)
    return TableId(table.database, found.group(1)) if found is not None else None
