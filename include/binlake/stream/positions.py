"""Where the binlog is: the source's head, file sizes, and transaction boundaries in a range.

Used by the stream's planning side (the data source's driver-side reader): it never decodes a
row, so it stays cheap next to the executors that do.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

from binlake.config import PipelineConfig, SourceConfig
from binlake.config.tls import with_tls_key
from binlake.offsets import BinlogOffset
from binlake.source.binlog.scan import Boundary, binary_logs, transactions
from binlake.source.binlog.xa import PreparedXa, Xid
from binlake.source.chunks.watermarks import current_offset
from binlake.source.server.connection import connect, server_version
from binlake.state.store import StateStore
from binlake.stream import segments

log = logging.getLogger(__name__)

#: The state store's name for the newest binlog position seen (its time is the heartbeat).
HEAD = "stream.head"


def config_options(config: PipelineConfig) -> dict[str, str]:
    """The pipeline's config as Spark options: ``config`` (JSON, work_dir made absolute, so every
    process reads the same state store and catalog whatever its working folder), and its secrets
    apart, in options Spark redacts by their names: ``password`` and ``catalog_secret`` (the
    catalog's properties, which carry its credentials)."""
    absolute = config.model_copy(
        update={
            "pipeline": config.pipeline.model_copy(update={"work_dir": config.pipeline.work_dir.resolve()})
        }
    )
    data = absolute.model_dump(
        mode="json",
        exclude={"source": {"password": True, "tls": {"key"}}, "sink": {"catalog": {"properties"}}},
    )
    data["pipeline"].pop("state_uri", None)
    data["sink"]["catalog"].pop("uri", None)
    catalog = {key: value.get_secret_value() for key, value in config.sink.catalog.properties.items()}
    return {
        "config": json.dumps(data),
        "password": config.source.password.get_secret_value(),
        "catalog_secret": json.dumps(catalog),  # named so that Spark redacts it too
        "tls_key_secret": tls_key(config.source),
        # URLs that may hold a password travel apart too, in an option Spark redacts.
        "urls_secret": json.dumps(
            {"state_uri": config.pipeline.state_uri, "catalog_uri": config.sink.catalog.uri}
        ),
    }


def tls_key(source: SourceConfig) -> str:
    """The TLS client key as a Spark option's value (``""``: none), apart from the rest."""
    return source.tls.key.get_secret_value() if source.tls.key else ""


def config_from_options(options: dict[str, str]) -> PipelineConfig:
    """The pipeline's config a Spark job got as options (see ``config_options``)."""
    data = json.loads(options["config"])
    data["source"]["password"] = options["password"]
    with_tls_key(data["source"], options)
    urls = json.loads(options.get("urls_secret", "{}"))
    if urls.get("state_uri"):
        data["pipeline"]["state_uri"] = urls["state_uri"]
    if urls.get("catalog_uri"):
        data["sink"]["catalog"]["uri"] = urls["catalog_uri"]
    data["sink"]["catalog"]["properties"] = json.loads(options.get("catalog_secret", "{}"))
    return PipelineConfig.model_validate(data)


def segment_ids(source: SourceConfig) -> tuple[int, int]:
    """The replica ids the stream's segment readers claim theirs from: ``source.server_id`` but
    its last, the planning side's (a range of one id: that one)."""
    ids = source.server_id
    return ids.start, max(ids.start, ids.end - 1)


class SourcePositions:
    """Positions of one source's binlog, for planning micro-batches and segments."""

    def __init__(self, source: SourceConfig, server_id: int, pipeline: str, state_uri: str) -> None:
        self.source = source
        self.server_id = server_id
        self.pipeline = pipeline
        self.state_uri = state_uri
        self._sizes: dict[str, int] | None = None

    @classmethod
    def from_config(cls, config: PipelineConfig) -> SourcePositions:
        # The last id of the range (``segment_ids``): the stream holds it while it runs.
        return cls(
            config.source,
            config.source.server_id.end,
            config.pipeline.name,
            config.pipeline.resolved_state_uri,
        )

    def head(self) -> BinlogOffset:
        """The source's current binlog position (after its last committed transaction)."""
        with contextlib.closing(connect(self.source)) as conn:
            head = current_offset(conn, server_version(conn))
            self._sizes = dict(binary_logs(conn))
        return BinlogOffset(head.file, head.pos)

    def heartbeat(self, head: BinlogOffset) -> None:
        """Record that the stream saw the source at ``head`` now (status shows it on an idle source)."""
        with StateStore(self.state_uri) as store:
            store.offsets(self.pipeline).save(HEAD, head)

    def sizes(self) -> dict[str, int]:
        if self._sizes is None:
            with contextlib.closing(connect(self.source)) as conn:
                self._sizes = dict(binary_logs(conn))
        return self._sizes

    def distance(self, start: BinlogOffset, end: BinlogOffset) -> int:
        return segments.distance(start, end, self.sizes())

    def admit(self, start: BinlogOffset, end: BinlogOffset, max_bytes: int) -> BinlogOffset | None:
        """Where a micro-batch from ``start`` within ``max_bytes`` ends (None: at ``end``)."""
        if self.distance(start, end) <= max_bytes:
            return None
        with _SCANNING:
            known = _known(self.source, start)
            if known is not None:
                scanned, found = known
                within = (b for b in found if b.offset <= end)
                admitted = segments.admit(start, within, max_bytes, self.sizes())
                if admitted is not None or scanned >= end:
                    return admitted
            return self._scan_admit(start, end, max_bytes)

    def admit_ahead(self, start: BinlogOffset, until: BinlogOffset | None, max_bytes: int) -> None:
        """Scan the next micro-batch's range from ``start`` (up to ``max_bytes``, not past
        ``until``) in the background: a catch-up's next ``admit`` then finds it scanned while this
        batch ran, instead of scanning while the executors wait. A cache only: a scan that fails
        or covers too little is done again by ``admit``."""
        _SCANNING.acquire()  # here, not in the thread: the next ``admit`` must wait for it
        scan = functools.partial(self._admit_ahead, start, until, max_bytes)
        try:
            threading.Thread(target=scan, name="binlake-scan-ahead", daemon=True).start()
        except BaseException:
            _SCANNING.release()
            raise

    def _admit_ahead(self, start: BinlogOffset, until: BinlogOffset | None, max_bytes: int) -> None:
        try:
            head = self.head()
            end = head if until is None else min(head, until)
            if self.distance(start, end) > max_bytes:
                self._scan_admit(start, end, max_bytes)
        except Exception:
            log.debug("the scan ahead of %s failed: the next batch's planning scans", start, exc_info=True)
        finally:
            _SCANNING.release()

    def _scan_admit(self, start: BinlogOffset, end: BinlogOffset, max_bytes: int) -> BinlogOffset | None:
        found: list[Boundary] = []
        with contextlib.closing(self._boundaries(start, end)) as boundaries:
            admitted = segments.admit(start, _recorded(boundaries, found), max_bytes, self.sizes())
        # The batch's planning looks for statements in the admitted range next, and its segments
        # are cut there: both from this scan.
        _remember(self.source, start, admitted or end, found)
        return admitted

    def cut(
        self, start: BinlogOffset, end: BinlogOffset, parts: int
    ) -> list[tuple[BinlogOffset, BinlogOffset]]:
        return segments.cut(start, end, self._scanned(start, end), parts, self.sizes())

    def statements(self, start: BinlogOffset, end: BinlogOffset) -> Iterator[tuple[BinlogOffset, Boundary]]:
        """Standalone statements (DDL …) in (start, end]: the boundary before each, and its own."""
        previous = start
        for boundary in self._scanned(start, end):
            if boundary.statement is not None:
                yield previous, boundary
            previous = boundary.offset

    def xa_prepares(self, start: BinlogOffset, end: BinlogOffset) -> list[PreparedXa]:
        """Where the XA transactions committed in (start, end] were prepared, as far as this
        process's scans saw them (segment readers find the others themselves)."""
        known: list[PreparedXa] = []
        for boundary in self._scanned(start, end):
            mark = boundary.xa
            if mark is not None and mark.verb == "commit" and mark.xid in _prepared:
                known.append(_prepared[mark.xid])
        return known

    def _boundaries(self, start: BinlogOffset, end: BinlogOffset) -> Any:
        return transactions(self.source, self.server_id, start, end)

    def _scanned(self, start: BinlogOffset, end: BinlogOffset) -> list[Boundary]:
        """Every boundary in (start, end], from the last full scan when it covers the range: a
        batch's planning (statements) and its segments (cut) would otherwise scan it twice."""
        with _SCANNING:
            known = _known(self.source, start)
            if known is not None and known[0] >= end:
                return [b for b in known[1] if b.offset <= end]
            found = list(self._boundaries(start, end))
        _remember(self.source, start, end, found)
        return found


def _known(source: SourceConfig, start: BinlogOffset) -> tuple[BinlogOffset, list[Boundary]] | None:
    """The last full scan's end and boundaries, if it started at ``start`` of this source."""
    if _last_scan is not None and _last_scan[0] == (source.hostname, source.port, start):
        return _last_scan[1], _last_scan[2]
    return None


def _recorded(boundaries: Iterator[Boundary], found: list[Boundary]) -> Iterator[Boundary]:
    for boundary in boundaries:
        found.append(boundary)
        yield boundary


def _remember(source: SourceConfig, start: BinlogOffset, end: BinlogOffset, found: list[Boundary]) -> None:
    global _last_scan
    _last_scan = ((source.hostname, source.port, start), end, found)
    for boundary in found:
        mark = boundary.xa
        if mark is not None and mark.verb == "prepare" and mark.start is not None:
            _prepared[mark.xid] = PreparedXa(mark.xid, mark.start, boundary.offset)
        elif mark is not None and mark.verb == "rollback":
            _prepared.pop(mark.xid, None)


#: XA transactions the scans of this process saw prepared (kept past their commit: a batch planned
#: again after a failed attempt needs them again; a commit's xid may be prepared anew later, which
#: replaces the entry).
_prepared: dict[Xid, PreparedXa] = {}

#: Held while this process scans the binlog: the planning side scans with one replica id, and the
#: server drops a replica connection when another one comes with the same id.
_SCANNING = threading.Lock()

#: The last full boundary scan of this process: (source, start), end, boundaries.
_last_scan: tuple[tuple[str, int, BinlogOffset], BinlogOffset, list[Boundary]] | None = None
