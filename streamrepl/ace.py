"""Access Control Expressions (ACEs) as used by MapR / HPE Data Fabric streams.

Grammar (``!`` binds tightest, then ``&``, then ``|``)::

    ace     := "" | "p" | or
    or      := and ("|" and)*
    and     := unary ("&" unary)*
    unary   := "!"* primary
    primary := ("u" | "g" | "r") ":" name | "(" or ")"

``p`` (public) must stand alone; the empty (or whitespace-only) expression grants nobody.
Positions in error messages are 0-based character offsets into the expression.
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import re
from dataclasses import dataclass, field
from typing import Any

from . import settings
from .errors import InvalidArgument

MAX_BYTES = 64 * 1024
#: Parentheses plus negations; keeps recursive parsing, printing and evaluation far from the stack limit.
MAX_DEPTH = 64
PREFIXES = {"u": "user", "g": "group", "r": "role"}
_NAME_RE = re.compile(r"[A-Za-z0-9._@$-]+")
_WORD_RE = re.compile(r"[A-Za-z0-9._@$-]*")
ENV_VAR = settings.IDENTITY


class AceError(InvalidArgument):
    """An access control expression that cannot be parsed or built."""


def _quote(text: str) -> str:
    return repr(text if len(text) <= 80 else text[:77] + "...")


@dataclass(frozen=True)
class Term:
    prefix: str  # "u", "g" or "r"
    name: str

    def __post_init__(self) -> None:
        if self.prefix not in PREFIXES:
            raise AceError(f"unknown access control prefix {self.prefix!r}: use u:, g:, r: or p")
        if not _NAME_RE.fullmatch(self.name):
            raise AceError(f"invalid {PREFIXES[self.prefix]} name {_quote(self.name)} in access control term")


@dataclass(frozen=True)
class Public:
    pass


@dataclass(frozen=True)
class Not:
    operand: Expr


@dataclass(frozen=True)
class _Nary:
    operands: tuple[Expr, ...]

    def __post_init__(self) -> None:
        flat: list[Expr] = []
        for op in self.operands:  # a & (b & c) is a & b & c: keeps str() and parse() inverse
            flat.extend(op.operands if isinstance(op, _Nary) and type(op) is type(self) else (op,))
        if len(flat) < 2:
            raise AceError(f"'{type(self).__name__}' needs at least two operands")
        object.__setattr__(self, "operands", tuple(flat))


@dataclass(frozen=True)
class And(_Nary):
    pass


@dataclass(frozen=True)
class Or(_Nary):
    pass


Expr = Term | Public | Not | And | Or
_PREC = {Or: 1, And: 2, Not: 3, Term: 4, Public: 4}


def _contains_public(expr: Expr) -> bool:
    if isinstance(expr, Public):
        return True
    if isinstance(expr, Not):
        return _contains_public(expr.operand)
    return isinstance(expr, And | Or) and any(_contains_public(op) for op in expr.operands)


def _text(expr: Expr, min_prec: int = 0) -> str:
    if isinstance(expr, Term):
        s = f"{expr.prefix}:{expr.name}"
    elif isinstance(expr, Public):
        s = "p"
    elif isinstance(expr, Not):
        s = "!" + _text(expr.operand, _PREC[Not])
    else:
        sep, prec = (" & ", _PREC[And]) if isinstance(expr, And) else (" | ", _PREC[Or])
        s = sep.join(_text(op, prec + 1) for op in expr.operands)
    return f"({s})" if _PREC[type(expr)] < min_prec else s


@dataclass(frozen=True)
class Identity:
    user: str
    uid: int | None
    groups: frozenset[str]
    gids: frozenset[int]
    roles: frozenset[str] = field(default_factory=frozenset)


def _evaluate(expr: Expr, who: Identity) -> bool:
    if isinstance(expr, Public):
        return True
    if isinstance(expr, Not):
        return not _evaluate(expr.operand, who)
    if isinstance(expr, And):
        return all(_evaluate(op, who) for op in expr.operands)
    if isinstance(expr, Or):
        return any(_evaluate(op, who) for op in expr.operands)
    name, numeric = expr.name, expr.name.isdigit()
    if expr.prefix == "u":
        return name == who.user or (numeric and who.uid is not None and int(name) == who.uid)
    if expr.prefix == "g":
        return name in who.groups or (numeric and int(name) in who.gids)
    return name in who.roles


@dataclass(frozen=True)
class Ace:
    """A parsed ACE; ``expr is None`` is the empty ACE that grants nobody."""

    expr: Expr | None = None

    def __post_init__(self) -> None:
        if self.expr is not None and not isinstance(self.expr, Public) and _contains_public(self.expr):
            raise AceError("'p' (public) cannot be combined with other terms")

    def __str__(self) -> str:
        return "" if self.expr is None else _text(self.expr)

    def allows(self, identity: Identity) -> bool:
        return self.expr is not None and _evaluate(self.expr, identity)


# -- who could pass an expression at all ------------------------------------------------------------
#: How many term evaluations the search for an identity an ACE allows may take before it gives up.
SEARCH_BUDGET = 200_000
#: A user name no term can name (names in terms never hold a space): "anyone else".
_SOMEONE_ELSE = "(someone else)"


class _TooHard(Exception):
    pass


def _search(expr: Expr) -> Identity | None:
    """An identity `expr` allows, or None when no identity can pass it; _TooHard past SEARCH_BUDGET.

    A user is one name (and perhaps a uid), so `u:alice & u:bob` passes nobody; groups and roles are
    free (an identity may have any set of them). The search assigns the user, the uid, then groups and
    roles one at a time, each only when the expression's value still depends on it, evaluating with
    unknowns (three-valued: a definite value under a partial assignment holds for every completion).
    """
    terms: list[Term] = []

    def collect(e: Expr) -> None:
        if isinstance(e, Term):
            terms.append(e)
        elif isinstance(e, Not):
            collect(e.operand)
        elif isinstance(e, And | Or):
            for op in e.operands:
                collect(op)

    collect(expr)
    users = sorted({t.name for t in terms if t.prefix == "u"})
    uids = sorted({int(t.name) for t in terms if t.prefix == "u" and t.name.isdigit()})
    spent = [0]

    def value(e: Expr, a: dict[Any, Any]) -> bool | None:
        spent[0] += 1
        if isinstance(e, Public):
            return True
        if isinstance(e, Not):
            v = value(e.operand, a)
            return None if v is None else not v
        if isinstance(e, And | Or):
            decisive = isinstance(e, Or)  # the operand value that settles it: True for Or, False for And
            unknown = False
            for op in e.operands:
                v = value(op, a)
                if v is decisive:
                    return decisive
                unknown = unknown or v is None
            return None if unknown else not decisive
        if e.prefix == "u":
            by_name = a["user"] == e.name if "user" in a else None
            by_uid = (a["uid"] == int(e.name) if "uid" in a else None) if e.name.isdigit() else False
            return True if by_name or by_uid else None if by_name is None or by_uid is None else False
        got = a.get((e.prefix, e.name))
        return got if isinstance(got, bool) else None

    def choices(a: dict[Any, Any]) -> tuple[Any, list[Any]]:
        if "user" not in a:
            return "user", [*users, _SOMEONE_ELSE]
        if "uid" not in a and uids:
            return "uid", [*uids, None]
        for t in terms:
            if t.prefix != "u" and (t.prefix, t.name) not in a:
                return (t.prefix, t.name), [True, False]
        raise AssertionError("every term is assigned, yet the value is unknown")

    def search(a: dict[Any, Any]) -> dict[Any, Any] | None:
        if spent[0] > SEARCH_BUDGET:
            raise _TooHard
        v = value(expr, a)
        if v is not None:
            return a if v else None
        var, options = choices(a)
        for option in options:
            found = search({**a, var: option})
            if found is not None:
                return found
        return None

    found = search({}) if users else search({"user": _SOMEONE_ELSE})
    if found is None:
        return None
    return Identity(
        user=found.get("user", _SOMEONE_ELSE),
        uid=found.get("uid"),
        groups=frozenset(name for (prefix, name), v in _pairs(found) if prefix == "g" and v),
        gids=frozenset(),
        roles=frozenset(name for (prefix, name), v in _pairs(found) if prefix == "r" and v),
    )


def _pairs(a: dict[Any, Any]) -> list[tuple[tuple[str, str], bool]]:
    return [(k, v) for k, v in a.items() if isinstance(k, tuple)]


def example(a: Ace) -> Identity | None:
    """An identity the ACE allows; None when nobody passes it, or when it is too large to search."""
    if a.expr is None:
        return None
    try:
        return _search(a.expr)
    except (_TooHard, RecursionError):
        return None


def passes_strangers(a: Ace) -> bool:
    """True when the ACE passes an identity none of its terms names (a user of another name, in no group or role
    it names): `!u:root`, `u:a | !g:b`, public."""
    return a.allows(Identity(_SOMEONE_ELSE, None, frozenset(), frozenset()))


def grants_nobody(a: Ace) -> bool:
    """True when no identity at all passes the ACE (the empty ACE, `u:root & !u:root`, `u:alice & u:bob`).
    An expression too large to search is not claimed to grant nobody."""
    if a.expr is None:
        return True
    try:
        return _search(a.expr) is None
    except (_TooHard, RecursionError):
        return False


class _Parser:
    def __init__(self, text: str) -> None:
        self.text, self.pos, self.depth = text, 0, 0

    def fail(self, detail: str) -> AceError:
        return AceError(f"invalid access control expression {_quote(self.text)}: {detail}")

    def peek(self) -> tuple[str, int]:
        """Skip whitespace; return the next significant character ('' at the end) and its position."""
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1
        return (self.text[self.pos] if self.pos < len(self.text) else ""), self.pos

    def parse(self) -> Expr:
        expr = self.nary("|", Or)
        ch, at = self.peek()
        if ch == ")":
            raise self.fail(f"unbalanced ')' at position {at}")
        if ch:
            raise self.fail(f"expected '&', '|' or end of expression at position {at}, found {ch!r}")
        return expr

    def nary(self, op: str, cls: type[And] | type[Or]) -> Expr:
        sub = (lambda: self.nary("&", And)) if cls is Or else self.unary
        operands = [sub()]
        while self.peek()[0] == op:
            self.pos += 1
            operands.append(sub())
        return operands[0] if len(operands) == 1 else cls(tuple(operands))

    def unary(self) -> Expr:
        nots = 0
        while self.peek()[0] == "!":
            nots, self.pos = nots + 1, self.pos + 1
        self.enter(nots)
        expr = self.primary()
        self.depth -= nots
        for _ in range(nots):
            expr = Not(expr)
        return expr

    def enter(self, levels: int) -> None:
        self.depth += levels
        if self.depth > MAX_DEPTH:
            raise self.fail(f"nested deeper than {MAX_DEPTH} levels at position {self.pos}")

    def primary(self) -> Expr:
        ch, at = self.peek()
        if ch == "(":
            self.pos += 1
            self.enter(1)
            expr = self.nary("|", Or)
            if self.peek()[0] != ")":
                raise self.fail(f"unclosed '(' at position {at}")
            self.pos += 1
            self.depth -= 1
            return expr
        word = _WORD_RE.match(self.text, at)
        assert word is not None  # the pattern matches the empty string
        self.pos = word.end()
        if not word.group():
            before = self.text[:at].rstrip()  # point at the dangling operator, if there is one
            where = f"after {before[-1]!r} at position {len(before) - 1}" if before else f"at position {at}"
            found = f", found {ch!r}" if ch else ""
            raise self.fail(f"expected a term {where}{found}")
        if self.text.startswith(":", self.pos):
            if word.group() not in PREFIXES:
                raise self.fail(f"unknown prefix '{word.group()}:' at position {at} (use u:, g:, r: or p)")
            name = _NAME_RE.match(self.text, self.pos + 1)
            if name is None:
                raise self.fail(f"expected a {PREFIXES[word.group()]} name after '{word.group()}:' at position {at}")
            self.pos = name.end()
            return Term(word.group(), name.group())
        if word.group() == "p":
            return Public()
        raise self.fail(f"bare name {word.group()!r} at position {at}: write u:, g: or r: before it, or p")


def parse(text: str) -> Ace:
    """Parse an ACE; raises AceError with a one-line message saying what is wrong and where."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_BYTES:
        raise AceError(f"invalid access control expression {_quote(text)}: {size} bytes, limit is {MAX_BYTES}")
    if not text.strip() or text.strip() in ('""', "''"):  # shells often pass the empty ACE quoted
        return Ace()
    parser = _Parser(text)
    try:
        return Ace(parser.parse())
    except AceError as e:  # 'p' combined with other terms: name the whole expression
        raise e if e.message.startswith("invalid") else parser.fail(e.message) from None


def normalize(text: str) -> str:
    return str(parse(text))


def allows(text: str, identity: Identity) -> bool:
    return parse(text).allows(identity)


def default_for(identity: Identity) -> str:
    """The ACE granting only ``identity``: ``u:<user>`` (``u:<uid>`` if the name is not ACE-safe)."""
    if _NAME_RE.fullmatch(identity.user):
        return f"u:{identity.user}"
    if identity.uid is not None:
        return f"u:{identity.uid}"
    raise AceError(f"user name {_quote(identity.user)} cannot be written in an access control expression")


def _names(value: str) -> frozenset[str]:
    return frozenset(v.strip() for v in value.split(",") if v.strip())


def _identity_from_env(spec: str) -> Identity:
    def bad(detail: str) -> InvalidArgument:
        return InvalidArgument(f"invalid {ENV_VAR} {_quote(spec)}: {detail} (format: user=alice;groups=eng,qa)")

    parts: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in spec.split(";"))):
        key, sep, value = (s.strip() for s in part.partition("="))
        if not sep or key not in ("user", "uid", "groups", "gids", "roles"):
            raise bad(f"unknown part {part!r}; known: user, uid, groups, gids, roles")
        parts[key] = value
    if not parts.get("user"):
        raise bad("user is required")
    try:
        uid = int(parts["uid"]) if parts.get("uid") else None
        gids = frozenset(int(g) for g in _names(parts.get("gids", "")))
    except ValueError as e:
        raise bad("uid and gids must be integers") from e
    groups = _names(parts.get("groups", ""))
    gids |= {int(g) for g in groups if g.isdigit()}
    return Identity(parts["user"], uid, groups, gids, _names(parts.get("roles", "")))


def current_identity() -> Identity:
    """Who we are acting as, for checking ACEs locally.

    Local enforcement is advisory only: anyone who can write to the broker directly bypasses it.
    ``STREAMREPL_IDENTITY`` (``user=alice;groups=eng,qa;roles=admin``; ``uid=`` and ``gids=`` also
    accepted, only ``user`` required) overrides the OS lookup; it exists for tests and service accounts.
    """
    spec = settings.identity()
    if spec:
        return _identity_from_env(spec)
    uid = os.getuid()
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:  # uid without a passwd entry (common in containers)
        user = str(uid)
    gids = frozenset({os.getgid(), *os.getgroups()})
    names = set()
    for gid in gids:  # per-gid lookups: enumerating every group is slow against LDAP
        with contextlib.suppress(KeyError):  # gids without a name still match g:<gid>
            names.add(grp.getgrgid(gid).gr_name)
    return Identity(user, uid, frozenset(names), gids)
