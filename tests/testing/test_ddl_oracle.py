"""The DDL oracle over the peers' corpus: binlake's parser against MariaDB, statement by statement.

``tests/data/ddl-corpus`` holds 3,985 statements from the test suites of Debezium, Maxwell and
python-mysql-replication (Apache-2.0; ``SOURCES.tsv`` names every file). Every statement the
server runs must come out exactly as the server did it, or be refused with a reason — and never
refused when the server changed no column.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

from binlake.testing import ddl_oracle
from binlake.testing.private_server import PrivateMariaDB

CORPUS = Path(__file__).parents[1] / "data" / "ddl-corpus" / "corpus.jsonl"
#: The corpus in parts, so that test workers share the run.
PARTS = 3


@pytest.mark.slow
@pytest.mark.parametrize("part", range(PARTS))
def test_the_parser_does_what_the_server_does_over_the_ddl_corpus(part: int, tmp_path: Path) -> None:
    contexts = list(ddl_oracle.read_corpus(CORPUS))[part::PARTS]
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(PrivateMariaDB(options={"log-bin": None}))
        report = ddl_oracle.run(server, contexts)
    (tmp_path / "oracle.json").write_text(json.dumps(report.as_dict()))
    counts = report.counts()
    wrong = [o for o in report.outcomes if o.verdict in ("wrong", "crashed") or o.needless]
    shown = "\n".join(f"{o.verdict} {o.context}#{o.index}: {o.detail}\n  {o.statement[:300]}" for o in wrong)
    assert (counts["wrong"], counts["crashed"], counts["needless_refusals"]) == (0, 0, 0), shown
    assert counts["parsed"] > 0
    assert all(o.detail for o in report.outcomes if o.verdict == "refused")


def test_the_oracle_catches_a_wrong_parse(mariadb: PrivateMariaDB, monkeypatch: pytest.MonkeyPatch) -> None:
    """A harness that cannot fail proves nothing: a parser that loses a column's position is caught."""
    from binlake.events import AlterColumnType

    real = ddl_oracle.parse_ddl

    def unpositioned(*args: object, **kwargs: object) -> list[object]:
        changes = real(*args, **kwargs)  # type: ignore[arg-type]
        return [AlterColumnType(c.table, c.column) if isinstance(c, AlterColumnType) else c for c in changes]

    monkeypatch.setattr(ddl_oracle, "parse_ddl", unpositioned)
    context = {
        "id": "mutation",
        "mode": "sequence",
        "default_db": "oracle_mutation",
        "dbs": ["oracle_mutation"],
        "statements": ["CREATE TABLE t (a INT, b INT)", "ALTER TABLE t MODIFY b BIGINT FIRST"],
    }
    report = ddl_oracle.run(mariadb, [context])
    assert [o.verdict for o in report.outcomes] == ["parsed", "wrong"]
