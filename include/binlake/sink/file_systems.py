"""Arrow file systems for the locations pyiceberg gives: never percent-encoded (a table named
`a b%` has that very text in its location), which Arrow's URI parser refuses or decodes."""

from __future__ import annotations

from urllib.parse import quote

import pyarrow.fs as pafs


def file_system(uri: str) -> tuple[pafs.FileSystem, str]:
    """The file system and path of a table location or file URI as pyiceberg writes them."""
    return pafs.FileSystem.from_uri(quote(uri, safe=":/@"))  # type: ignore[no-any-return]
