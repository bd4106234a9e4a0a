from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamrepl import ace
from streamrepl.ace import (
    MAX_BYTES,
    MAX_DEPTH,
    Ace,
    AceError,
    And,
    Identity,
    Not,
    Or,
    Public,
    Term,
    allows,
    current_identity,
    default_for,
    normalize,
    parse,
)
from streamrepl.errors import InvalidArgument


def who(user: str = "bob", uid: int | None = None, groups=(), gids=(), roles=()) -> Identity:
    return Identity(user, uid, frozenset(groups), frozenset(gids), frozenset(roles))


ALICE = who("alice", 1001, ["eng", "qa"], [500, 501], ["admin"])
BOB = who("bob", 1002, ["ops"], [600])
NOBODY = who("nobody")


# --- terms -------------------------------------------------------------------------------------


def test_user_term_matches_name_or_uid():
    assert allows("u:alice", ALICE)
    assert allows("u:1001", ALICE)
    assert not allows("u:alice", BOB)
    assert not allows("u:1001", BOB)
    assert not allows("u:1001", who("x", None))


def test_group_term_matches_name_or_gid():
    assert allows("g:eng", ALICE)
    assert allows("g:500", ALICE)
    assert not allows("g:eng", BOB)
    assert allows("g:600", BOB)


def test_role_term():
    assert allows("r:admin", ALICE)
    assert not allows("r:admin", BOB)
    assert not allows("r:alice", ALICE)  # roles are not user names


def test_names_may_use_documented_characters():
    text = "u:a.b_c-d@EXAMPLE.COM | g:$grp | r:R2-d2"
    assert normalize(text) == text
    assert allows(text, who("a.b_c-d@EXAMPLE.COM"))
    assert allows(text, who("x", groups=["$grp"]))


# --- operators and precedence ------------------------------------------------------------------


def test_and():
    assert allows("g:eng & g:qa", ALICE)
    assert not allows("g:eng & g:ops", ALICE)


def test_or():
    assert allows("g:ops | g:qa", ALICE)
    assert not allows("g:ops | u:carol", ALICE)


def test_not():
    assert not allows("!u:alice", ALICE)
    assert allows("!u:alice", BOB)
    assert allows("!!u:alice", ALICE)


def test_and_binds_tighter_than_or():
    a = who("a")
    assert parse("u:a | u:b & u:c") == Ace(Or((Term("u", "a"), And((Term("u", "b"), Term("u", "c"))))))
    assert allows("u:a | u:b & u:c", a)  # would be denied if parsed as (u:a | u:b) & u:c
    assert not allows("(u:a | u:b) & u:c", a)
    assert parse("u:a & u:b | u:c") == parse("(u:a & u:b) | u:c")


def test_not_binds_tightest():
    assert parse("!u:a & u:b") == Ace(And((Not(Term("u", "a")), Term("u", "b"))))
    assert parse("!(u:a & u:b)") == Ace(Not(And((Term("u", "a"), Term("u", "b")))))
    assert allows("!u:a & u:b", who("b"))
    assert not allows("!u:a & u:b", who("a", groups=[]))
    assert allows("!(u:a & u:b)", who("a"))


def test_parentheses_override_precedence_and_are_minimised():
    assert normalize("(u:a | u:b) & u:c") == "(u:a | u:b) & u:c"
    assert normalize("((u:a))") == "u:a"
    assert normalize("u:a | (u:b & u:c)") == "u:a | u:b & u:c"
    assert normalize("u:a & (u:b & u:c)") == "u:a & u:b & u:c"
    assert normalize("!(!u:a)") == "!!u:a"
    assert normalize("!(u:a | u:b)") == "!(u:a | u:b)"


def test_whitespace_is_normalised():
    assert normalize("  u:a|u:b&!\tg:c \n") == "u:a | u:b & !g:c"
    assert normalize("( u:a | u:b )& u:c") == "(u:a | u:b) & u:c"


# --- documented examples -----------------------------------------------------------------------

DOC_EXAMPLES = [
    "u:1001 | r:engineering",
    "g:admin | g:qa",
    "u:cfkane | (g:admin & !g:cl3) | (g:qa & (g:app2 | g:app3)) | (g:ba & g:dept_7a) | g:ds",
    "p",
]


@pytest.mark.parametrize("text", DOC_EXAMPLES)
def test_documented_examples_parse_and_round_trip(text):
    ace_ = parse(text)
    assert parse(str(ace_)) == ace_
    assert normalize(str(ace_)) == str(ace_)


def test_documented_complex_example_semantics():
    text = DOC_EXAMPLES[2]
    assert normalize(text) == ("u:cfkane | g:admin & !g:cl3 | g:qa & (g:app2 | g:app3) | g:ba & g:dept_7a | g:ds")
    assert allows(text, who("cfkane"))
    assert allows(text, who("x", groups=["admin"]))
    assert not allows(text, who("x", groups=["admin", "cl3"]))
    assert allows(text, who("x", groups=["qa", "app3"]))
    assert not allows(text, who("x", groups=["qa"]))
    assert not allows(text, who("x", groups=["ba"]))
    assert allows(text, who("x", groups=["ba", "dept_7a"]))
    assert allows(text, who("x", groups=["ds", "cl3"]))
    assert allows("u:1001 | r:engineering", who("x", roles=["engineering"]))


# --- empty and public ----------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "   ", "\t\n", '""', " '' "])
def test_empty_ace_denies_everyone(text):
    assert parse(text) == Ace()
    assert str(parse(text)) == ""
    for identity in (ALICE, BOB, NOBODY):
        assert not allows(text, identity)


@pytest.mark.parametrize("text", ["p", " p ", "(p)"])
def test_public_allows_everyone(text):
    assert normalize(text) == "p"
    for identity in (ALICE, BOB, NOBODY):
        assert allows(text, identity)


# --- errors --------------------------------------------------------------------------------------


def error_for(text: str) -> str:
    with pytest.raises(AceError) as info:
        parse(text)
    message = info.value.message
    assert "\n" not in message
    return message


def test_error_message_format():
    assert error_for("u:bob |") == (
        "invalid access control expression 'u:bob |': expected a term after '|' at position 6"
    )


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("(u:a | u:b", "unclosed '(' at position 0"),
        ("((u:a)", "unclosed '(' at position 0"),
        ("u:a)", "unbalanced ')' at position 3"),
        ("u:a | u:b)", "unbalanced ')' at position 9"),
        ("()", "expected a term after '(' at position 0, found ')'"),
        ("| u:a", "expected a term at position 0, found '|'"),
        ("u:a &", "expected a term after '&' at position 4"),
        ("u:a & | u:b", "expected a term after '&' at position 4, found '|'"),
        ("!", "expected a term after '!' at position 0"),
        ("u:a u:b", "expected '&', '|' or end of expression at position 4"),
        ("x:foo", "unknown prefix 'x:' at position 0"),
        ("u:a | user:bob", "unknown prefix 'user:' at position 6"),
        ("u:", "expected a user name after 'u:' at position 0"),
        ("g: admin", "expected a group name after 'g:' at position 0"),
        ("u:a | r:", "expected a role name after 'r:' at position 6"),
        ("bob", "bare name 'bob' at position 0"),
        ("u:a # b", "found '#'"),
        ("u:bob\n|", "expected a term after '|' at position 6"),
    ],
)
def test_syntax_errors(text, fragment):
    assert fragment in error_for(text)


@pytest.mark.parametrize("text", ["p & u:a", "p | u:bob", "u:a | p", "!p", "(p) & (u:a)", "!(u:a | p)"])
def test_public_cannot_be_combined(text):
    message = error_for(text)
    assert message.startswith("invalid access control expression ")
    assert "'p' (public) cannot be combined with other terms" in message


def test_public_cannot_be_combined_when_built_directly():
    with pytest.raises(AceError, match="cannot be combined"):
        Ace(Or((Public(), Term("u", "a"))))


def test_too_long():
    names = " | ".join(f"u:user{i}" for i in range(MAX_BYTES // 10))
    assert len(names) > MAX_BYTES
    message = error_for(names)
    assert f"limit is {MAX_BYTES}" in message
    assert len(message) < 200  # the expression is quoted abbreviated
    ok = "u:" + "a" * (MAX_BYTES - 2)
    assert normalize(ok) == ok


def test_too_deep():
    assert normalize("(" * MAX_DEPTH + "u:a" + ")" * MAX_DEPTH) == "u:a"
    assert "nested deeper" in error_for("(" * (MAX_DEPTH + 1) + "u:a" + ")" * (MAX_DEPTH + 1))
    assert "nested deeper" in error_for("!" * (MAX_DEPTH + 1) + "u:a")
    assert "nested deeper" in error_for("(" * 30000)  # no RecursionError


def test_ace_error_is_invalid_argument():
    assert issubclass(AceError, InvalidArgument)


def test_bad_nodes_are_rejected():
    with pytest.raises(AceError):
        Term("x", "a")
    with pytest.raises(AceError):
        Term("u", "a b")
    with pytest.raises(AceError):
        And((Term("u", "a"),))


def test_ace_is_immutable_and_hashable():
    a = parse("u:a | g:b")
    with pytest.raises(AttributeError):
        a.expr = None  # type: ignore[misc]
    assert hash(a) == hash(parse("u:a|g:b"))


# --- identity ------------------------------------------------------------------------------------


def test_default_for():
    assert default_for(ALICE) == "u:alice"
    assert allows(default_for(ALICE), ALICE)
    assert not allows(default_for(ALICE), BOB)
    assert default_for(who("odd name", 42)) == "u:42"


def test_identity_from_environment(monkeypatch):
    monkeypatch.setenv(ace.ENV_VAR, "user=alice;groups=eng,qa;roles=admin")
    me = current_identity()
    assert me == Identity("alice", None, frozenset({"eng", "qa"}), frozenset(), frozenset({"admin"}))
    assert allows("g:qa & r:admin", me)
    monkeypatch.setenv(ace.ENV_VAR, "user=carol")
    assert current_identity() == Identity("carol", None, frozenset(), frozenset())
    monkeypatch.setenv(ace.ENV_VAR, " user = dave ; uid = 7 ; gids = 8,9 ; ")
    assert current_identity() == Identity("dave", 7, frozenset(), frozenset({8, 9}))


@pytest.mark.parametrize("spec", ["groups=eng", "user=", "user=a;colour=red", "user=a;uid=x", "nonsense"])
def test_identity_environment_errors(monkeypatch, spec):
    monkeypatch.setenv(ace.ENV_VAR, spec)
    with pytest.raises(InvalidArgument, match=ace.ENV_VAR):
        current_identity()


def test_identity_from_os(monkeypatch):
    import os

    monkeypatch.delenv(ace.ENV_VAR, raising=False)
    me = current_identity()
    assert me.uid == os.getuid()
    assert os.getgid() in me.gids
    assert me.roles == frozenset()
    assert allows(default_for(me), me)
    assert allows(f"g:{os.getgid()}", me)


# --- properties ----------------------------------------------------------------------------------

NAMES = st.text(alphabet="abcxyz019._-@$", min_size=1, max_size=6)
TERMS = st.builds(Term, st.sampled_from("ugr"), NAMES)
EXPRS = st.recursive(
    TERMS,
    lambda sub: st.one_of(
        st.builds(Not, sub),
        st.lists(sub, min_size=2, max_size=4).map(lambda xs: And(tuple(xs))),
        st.lists(sub, min_size=2, max_size=4).map(lambda xs: Or(tuple(xs))),
    ),
    max_leaves=20,
)
ACES = st.one_of(st.just(Ace()), st.just(Ace(Public())), EXPRS.map(Ace))
IDENTITIES = st.builds(
    Identity,
    NAMES,
    st.none() | st.integers(0, 20),
    st.frozensets(NAMES, max_size=4),
    st.frozensets(st.integers(0, 20), max_size=4),
    st.frozensets(NAMES, max_size=3),
)


@given(ACES, IDENTITIES)
def test_round_trip_preserves_value_and_meaning(tree, identity):
    text = str(tree)
    again = parse(text)
    assert again == tree
    assert str(again) == text
    assert again.allows(identity) == tree.allows(identity)


@given(EXPRS, IDENTITIES)
def test_de_morgan(expr, identity):
    if isinstance(expr, And | Or):
        flipped = (Or if isinstance(expr, And) else And)(tuple(Not(op) for op in expr.operands))
        assert Ace(Not(expr)).allows(identity) == Ace(flipped).allows(identity)


ACE_ALPHABET = st.sampled_from(list("ugrpx:!&|() \t\n\"'ab1._-@$#") + ["é", "\x00", "\ud800"])


@settings(max_examples=500)
@given(st.one_of(st.text(), st.text(ACE_ALPHABET, max_size=40)))
def test_parse_never_raises_anything_but_ace_error(text):
    try:
        result = parse(text)
    except AceError as e:
        assert "\n" not in e.message
    else:
        assert isinstance(result, Ace)
        assert parse(str(result)) == result


# --- expressions nobody passes (an adminperm that would lock everyone out) ------------------------


@pytest.mark.parametrize(
    "text",
    ["u:root & !u:root", "u:alice & u:bob", "u:1 & u:2 & !u:1", "g:eng & !g:eng", "!(r:x | !r:x)", "u:a & (u:b | u:c)"],
)
def test_an_expression_nobody_passes_is_recognised(text):
    assert ace.grants_nobody(parse(text))
    assert ace.example(parse(text)) is None


@pytest.mark.parametrize(
    "text",
    [
        "p",
        "u:alice",
        "!u:alice",
        "u:alice & u:1001",  # alice whose uid is 1001
        "u:01 & u:1",  # uid 1
        "g:eng & g:ops & !r:admin",
        "u:alice & !u:bob",
        "(u:a | u:b) & !u:a",
    ],
)
def test_an_expression_someone_passes_is_not_refused(text):
    assert not ace.grants_nobody(parse(text))
    someone = ace.example(parse(text))
    assert someone is not None and parse(text).allows(someone)


def test_the_empty_ace_grants_nobody():
    assert ace.grants_nobody(Ace())


def test_an_expression_too_large_to_search_is_not_refused():
    """Only an expression shown to grant nobody is refused; the search gives up on a huge one (a lock-out that
    large is no typing slip)."""
    huge = Ace(And(tuple(Or((Term("g", f"a{i}"), Term("g", f"b{i}"))) for i in range(3000))))
    assert not ace.grants_nobody(huge)


@settings(max_examples=300)
@given(ACES, IDENTITIES)
def test_grants_nobody_is_right_both_ways(tree, identity):
    """Shown to grant nobody: no identity passes it. Otherwise the example identity does."""
    if ace.grants_nobody(tree):
        assert not tree.allows(identity)
    else:
        someone = ace.example(tree)
        assert someone is not None and tree.allows(someone)
