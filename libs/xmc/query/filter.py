"""AIP-160 filter text → AST: a tokenizer and a recursive-descent parser.

Only syntax is judged here (with a position in every error); what a name or value means is
the SQL compiler's business (``xmc.query.sql``). Input is bounded in length and nesting so
a hostile filter costs neither stack nor CPU.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import TypeAlias

from xmc.errors import InvalidArgumentError
from xmc.query.fields import MAX_FILTER_DEPTH, MAX_FILTER_LENGTH


class Op(enum.Enum):
    EQ = "="
    NE = "!="
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="
    HAS = ":"


@dataclass(frozen=True)
class Comparison:
    """``field op value``; ``wildcard`` is True when the value ended in an unescaped ``*``
    (which is then not part of ``value``); ``quoted`` when the value was a string literal,
    which makes ``args.seed = "7"`` a text comparison where ``args.seed = 7`` is numeric."""

    field: str
    op: Op
    value: str
    wildcard: bool = False
    quoted: bool = False


@dataclass(frozen=True)
class And:
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Or:
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Not:
    item: Node


Node: TypeAlias = Comparison | And | Or | Not


class _Tok(enum.Enum):
    NAME = "name"
    AND = "AND"
    OR = "OR"
    NOT = "NOT"
    MINUS = "-"
    LPAREN = "("
    RPAREN = ")"
    CMP = "comparator"
    VALUE = "value"
    END = "end"


@dataclass(frozen=True)
class _Token:
    kind: _Tok
    text: str  # source text, for error messages
    pos: int
    value: str = ""  # NAME: the name; CMP: the operator; VALUE: the unescaped value
    wildcard: bool = False


_KEYWORDS = {"AND": _Tok.AND, "OR": _Tok.OR, "NOT": _Tok.NOT}
_COMPARATORS = ("<=", ">=", "!=", "=", "<", ">", ":")  # longest first
_NAME_CHARS = re.compile(r"[A-Za-z0-9_.]+")
_BARE_VALUE = re.compile(r"[^\s()\"']+")
_ESCAPES = {"\\": "\\", '"': '"', "'": "'", "n": "\n", "t": "\t", "r": "\r", "*": "*"}


def filter_error(message: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"filter: {message}")


def _describe(token: _Token) -> str:
    return "end of filter" if token.kind is _Tok.END else repr(token.text)


def _skip_space(text: str, i: int) -> int:
    while i < len(text) and text[i].isspace():
        i += 1
    return i


def _read_quoted(text: str, start: int) -> _Token:
    """A string literal; backslash escapes, and ``\\*`` keeps a trailing star literal."""
    quote, i, wildcard = text[start], start + 1, False
    out: list[str] = []
    while i < len(text):
        ch = text[i]
        if ch == quote:
            value = "".join(out[:-1] if wildcard else out)
            return _Token(_Tok.VALUE, text[start : i + 1], start, value, wildcard)
        if ch == "\\":
            escaped = text[i + 1 : i + 2]
            if escaped not in _ESCAPES:
                raise filter_error(f"unknown escape '\\{escaped}' at position {i}")
            out.append(_ESCAPES[escaped])
            wildcard, i = False, i + 2
            continue
        out.append(ch)
        wildcard, i = ch == "*", i + 1
    raise filter_error(f"unterminated string starting at position {start}")


def _read_value(text: str, i: int, comparator: _Token) -> _Token:
    """The argument after a comparator, read in "value mode": a quoted string, or a bare
    run up to whitespace or a parenthesis, so ``2024-01-02T03:04:05Z`` and ``-3`` stay whole."""
    if i < len(text) and text[i] in "\"'":
        token = _read_quoted(text, i)
    elif match := _BARE_VALUE.match(text, i):
        raw = match.group()
        wildcard = raw.endswith("*")
        token = _Token(_Tok.VALUE, raw, i, raw[:-1] if wildcard else raw, wildcard)
    else:
        raise filter_error(f"missing value after '{comparator.text}' at position {comparator.pos}")
    if "\x00" in token.value:
        raise filter_error(f"NUL character in value at position {i}")
    return token


def _read_token(text: str, i: int) -> _Token:
    ch = text[i]
    if ch in "()-":
        return _Token(_Tok(ch), ch, i)
    for op in _COMPARATORS:
        if text.startswith(op, i):
            return _Token(_Tok.CMP, op, i, op)
    if ch in "\"'":
        return _read_quoted(text, i)
    if match := _NAME_CHARS.match(text, i):
        word = match.group()
        return _Token(_KEYWORDS.get(word, _Tok.NAME), word, i, word)
    raise filter_error(f"unexpected character {ch!r} at position {i}")


def _tokenize(text: str) -> list[_Token]:
    """Split ``text`` into tokens; the token after a comparator is always a value."""
    tokens: list[_Token] = []
    i = _skip_space(text, 0)
    while i < len(text):
        after_comparator = bool(tokens) and tokens[-1].kind is _Tok.CMP
        token = _read_value(text, i, tokens[-1]) if after_comparator else _read_token(text, i)
        tokens.append(token)
        i = _skip_space(text, i + len(token.text))
    if tokens and tokens[-1].kind is _Tok.CMP:
        _read_value(text, i, tokens[-1])  # raises "missing value"
    tokens.append(_Token(_Tok.END, "", len(text)))
    return tokens


# The grammar (an AIP-160 subset):
#
#   filter      = [ expression ] END
#   expression  = sequence { "AND" sequence }
#   sequence    = factor { factor }                 (implicit AND)
#   factor      = term { "OR" term }                (OR binds tighter than AND)
#   term        = ( "NOT" | "-" ) term | simple
#   simple      = "(" expression ")" | restriction
#   restriction = NAME comparator value
#   comparator  = "=" | "!=" | "<" | "<=" | ">" | ">=" | ":"
#   value       = quoted string | bare run of non-space, non-paren characters

_FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_TERM_START = frozenset({_Tok.NAME, _Tok.NOT, _Tok.MINUS, _Tok.LPAREN})


def _join(kind: type[And] | type[Or], items: list[Node]) -> Node:
    """One node for ``items``, flattening nested nodes of the same kind."""
    flat: list[Node] = []
    for item in items:
        flat.extend(item.items if isinstance(item, kind) else (item,))
    return flat[0] if len(flat) == 1 else kind(tuple(flat))


class _Parser:
    def __init__(self, tokens: list[_Token]) -> None:
        self._tokens = tokens
        self._i = 0
        self._depth = 0

    def _peek(self) -> _Token:
        return self._tokens[self._i]

    def _next(self) -> _Token:
        token = self._tokens[self._i]
        self._i += 1
        return token

    def _descend(self, token: _Token) -> None:
        self._depth += 1
        if self._depth > MAX_FILTER_DEPTH:
            raise filter_error(
                f"nested deeper than {MAX_FILTER_DEPTH} levels at position {token.pos}"
            )

    def parse(self) -> Node:
        node = self._expression()
        if self._peek().kind is not _Tok.END:
            raise filter_error(
                f"unexpected {_describe(self._peek())} at position {self._peek().pos}"
            )
        return node

    def _expression(self) -> Node:
        items = [self._sequence()]
        while self._peek().kind is _Tok.AND:
            self._next()
            items.append(self._sequence())
        return _join(And, items)

    def _sequence(self) -> Node:
        items = [self._factor()]
        while self._peek().kind in _TERM_START:
            items.append(self._factor())
        return _join(And, items)

    def _factor(self) -> Node:
        items = [self._term()]
        while self._peek().kind is _Tok.OR:
            self._next()
            items.append(self._term())
        return _join(Or, items)

    def _term(self) -> Node:
        token = self._peek()
        if token.kind in (_Tok.NOT, _Tok.MINUS):
            self._next()
            self._descend(token)
            node = Not(self._term())
            self._depth -= 1
            return node
        if token.kind is _Tok.LPAREN:
            return self._parenthesized()
        if token.kind is _Tok.NAME:
            return self._restriction()
        raise filter_error(f"unexpected {_describe(token)} at position {token.pos}")

    def _parenthesized(self) -> Node:
        opening = self._next()
        self._descend(opening)
        node = self._expression()
        closing = self._next()
        if closing.kind is _Tok.END:
            raise filter_error(f"missing ')' for '(' at position {opening.pos}")
        if closing.kind is not _Tok.RPAREN:
            raise filter_error(f"unexpected {_describe(closing)} at position {closing.pos}")
        self._depth -= 1
        return node

    def _restriction(self) -> Node:
        name = self._next()
        if not _FIELD_NAME.fullmatch(name.text):
            raise filter_error(f"invalid field name {name.text!r} at position {name.pos}")
        comparator = self._next()
        if comparator.kind is not _Tok.CMP:
            raise filter_error(
                f"expected a comparison operator after {name.text!r} at position {comparator.pos}"
            )
        value = self._next()  # the tokenizer guarantees a VALUE after a CMP
        quoted = value.text[:1] in ("'", '"')
        return Comparison(name.text, Op(comparator.value), value.value, value.wildcard, quoted)


def parse_filter(text: str) -> Node | None:
    """The AST of an AIP-160 filter; None when the filter is empty (matches everything)."""
    if len(text) > MAX_FILTER_LENGTH:
        raise filter_error(f"longer than {MAX_FILTER_LENGTH} characters")
    tokens = _tokenize(text)
    if tokens[0].kind is _Tok.END:
        return None
    return _Parser(tokens).parse()
