"""The words of a DDL statement, as the server reads them.

sqlglot's MySQL tokenizer does the lexing (quotes, backquotes, escapes, comments, hex and bit
literals); two things it does not do are done here first or after:

- **versioned comments** — ``/*!40005 TEMPORARY */`` and MariaDB's ``/*M!100100 … */`` are
  *executed* by the server (mysqldump and gh-ost write them), so their text is part of the
  statement; plain comments are not;
- **multi-word keywords** sqlglot merges (``DOUBLE PRECISION``) are split back into words, and a
  statement sqlglot keeps as one opaque command string (``RENAME …``) is read again.

The parser then walks a flat list of ``Tok`` with a ``Cursor``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from sqlglot import TokenType
from sqlglot.dialects.mysql import MySQL
from sqlglot.errors import TokenError

from binlake.errors import BinlakeError
from binlake.events import TableId

_DIALECT = MySQL()

Kind = Literal["word", "ident", "string", "hex", "bit", "number", "punct", "introducer"]

_STRINGS = {TokenType.STRING, TokenType.NATIONAL_STRING, TokenType.RAW_STRING, TokenType.BYTE_STRING}
_KINDS: dict[TokenType, Kind] = {
    **{t: "string" for t in _STRINGS},
    TokenType.HEX_STRING: "hex",
    TokenType.BIT_STRING: "bit",
    TokenType.NUMBER: "number",
    TokenType.IDENTIFIER: "ident",
}


class UnparsedDdlError(BinlakeError):
    """A table statement binlake could not turn into schema changes."""

    def __init__(self, message: str, table: TableId | None = None) -> None:
        super().__init__(message)
        self.table = table
        """The table the statement changes, where it was read that far."""


@dataclass(frozen=True)
class Tok:
    kind: Kind
    text: str
    """A word's text as written; a string's, identifier's or hex literal's content."""

    @property
    def upper(self) -> str:
        return self.text.upper() if self.kind == "word" else ""

    @property
    def is_name(self) -> bool:
        return self.kind in ("word", "ident")


def expand_versioned_comments(statement: str, mariadb: bool = True) -> str:
    """The statement as the server runs it: ``/*!NNNNN text */`` → `` text ``, comments out.

    MariaDB runs ``/*M!NNNNN … */`` too; MySQL treats it as a comment. Every version is taken as
    reached: the statement is in the binlog, so the server that wrote it ran it.
    """
    out: list[str] = []
    i, n = 0, len(statement)
    quote: str | None = None
    versioned = False
    while i < n:
        c = statement[i]
        if quote is not None:
            out.append(c)
            if c == "\\" and quote != "`" and i + 1 < n:
                out.append(statement[i + 1])
                i += 2
                continue
            if c == quote:
                quote = None
            i += 1
        elif c in "'\"`":
            quote = c
            out.append(c)
            i += 1
        elif statement.startswith("/*!", i) or (mariadb and statement.startswith("/*M!", i)):
            i += 3 if statement[i + 2] == "!" else 4
            while i < n and statement[i].isdigit():
                i += 1
            versioned = True
            out.append(" ")
        elif versioned and statement.startswith("*/", i):
            versioned = False
            out.append(" ")
            i += 2
        elif statement.startswith("/*", i):
            end = statement.find("*/", i + 2)
            i = n if end < 0 else end + 2
            out.append(" ")
        elif c == "#" or (statement.startswith("--", i) and (i + 2 >= n or statement[i + 2].isspace())):
            end = statement.find("\n", i)
            i = n if end < 0 else end
            out.append(" ")
        else:
            out.append(c)
            i += 1
    return "".join(out)


def tokens(statement: str, mariadb: bool = True) -> list[Tok]:
    """The statement's tokens (comments dropped, versioned comments expanded)."""
    return _tokens(expand_versioned_comments(statement, mariadb))


def _tokens(text: str) -> list[Tok]:
    try:
        raw = _DIALECT.tokenize(text)
    except TokenError as e:
        raise UnparsedDdlError(f"could not read the statement's tokens ({e})") from None
    found: list[Tok] = []
    for i, token in enumerate(raw):
        if token.token_type == TokenType.INTRODUCER:  # _koi8r 0xFF: the literal's charset
            found.append(Tok("introducer", token.text.lstrip("_").lower()))
            continue
        if i == 1 and token.token_type == TokenType.STRING and found and found[0].upper == "RENAME":
            found.extend(_tokens(token.text))  # sqlglot keeps RENAME's rest as one string
            continue
        found.extend(_split(token))
    return found


def _split(token: object) -> Iterator[Tok]:
    token_type = getattr(token, "token_type")  # noqa: B009 - sqlglot's Token is untyped here
    text = str(getattr(token, "text"))  # noqa: B009
    kind = _KINDS.get(token_type)
    if kind is not None:
        yield Tok(kind, text)
    elif text and not (text[0].isalnum() or text[0] in "_$@"):
        yield Tok("punct", text)
    else:
        for word in text.split():
            yield Tok("word", word)


class Cursor:
    """A position in a statement's tokens."""

    def __init__(self, toks: list[Tok]) -> None:
        self.toks = toks
        self.at = 0

    def introducer(self) -> str | None:
        """The charset of an introducer (``_latin1``) at the cursor, consumed; None if none."""
        tok = self.peek()
        if tok is not None and tok.kind == "introducer":
            self.at += 1
            return tok.text
        return None

    def peek(self, ahead: int = 0) -> Tok | None:
        i = self.at + ahead
        return self.toks[i] if i < len(self.toks) else None

    def peek_upper(self, ahead: int = 0) -> str:
        tok = self.peek(ahead)
        return tok.upper if tok is not None else ""

    def done(self) -> bool:
        tok = self.peek()
        return tok is None or (tok.kind == "punct" and tok.text == ";" and self.at == len(self.toks) - 1)

    def next(self) -> Tok:
        tok = self.peek()
        if tok is None:
            raise UnparsedDdlError("the statement ends too early")
        self.at += 1
        return tok

    def accept(self, *words: str) -> bool:
        """Consume ``words`` (keywords, in order) if they come next."""
        for k, word in enumerate(words):
            if self.peek_upper(k) != word:
                return False
        self.at += len(words)
        return True

    def accept_punct(self, text: str) -> bool:
        tok = self.peek()
        if tok is not None and tok.kind == "punct" and tok.text == text:
            self.at += 1
            return True
        return False

    def is_punct(self, text: str, ahead: int = 0) -> bool:
        tok = self.peek(ahead)
        return tok is not None and tok.kind == "punct" and tok.text == text

    def expect_punct(self, text: str) -> None:
        if not self.accept_punct(text):
            tok = self.peek()
            raise UnparsedDdlError(f"expected `{text}`, found {_shown(tok)}")

    def name(self) -> str:
        tok = self.next()
        # unquoted names may start with digits (a table `20151214`)
        digits = tok.kind == "number" and tok.text.isalnum()
        if not tok.is_name and tok.kind != "string" and not digits:
            raise UnparsedDdlError(f"expected a name, found {_shown(tok)}")
        return tok.text

    def dotted(self) -> list[str]:
        """``a``, ``a.b`` or ``a.b.c``."""
        parts = [self.name()]
        while self.accept_punct("."):
            parts.append(self.name())
        return parts

    def skip_parenthesised(self) -> None:
        """Past a ``( … )`` group that starts here."""
        self.expect_punct("(")
        depth = 1
        while depth:
            tok = self.next()
            if tok.kind == "punct":
                depth += tok.text.count("(") - tok.text.count(")")

    def skip_item(self) -> None:
        """Past the rest of a comma-separated item (to the next top-level ``,`` or ``)``)."""
        while not self.done() and not self.is_punct(",") and not self.is_punct(")"):
            if self.is_punct("("):
                self.skip_parenthesised()
            else:
                self.next()


def _shown(tok: Tok | None) -> str:
    return "the end" if tok is None else f"`{tok.text}`"


def skip_option(cur: Cursor) -> None:
    """A table option and its value (``DATA DIRECTORY = '…'``, ``UNION = (a, b)`` …)."""
    cur.next()
    if cur.peek_upper() == "DIRECTORY":
        cur.next()
    cur.accept_punct("=")
    if cur.is_punct("("):
        cur.skip_parenthesised()
    elif not cur.done() and not cur.is_punct(","):
        cur.next()


def skip_wait(cur: Cursor) -> None:
    """``WAIT n`` or ``NOWAIT``, if there."""
    if cur.accept("WAIT"):
        cur.next()
    else:
        cur.accept("NOWAIT")
