"""stream_ops.refuse_lockout: an -adminperm that would lock its author out, or that grants admin to almost anyone."""

from __future__ import annotations

import pytest

from streamrepl import ace, stream_ops
from streamrepl.errors import InvalidArgument
from streamrepl.paths import StreamPath

ROOT = ace.Identity("root", 0, frozenset({"root"}), frozenset({0}))
S = StreamPath("sf", "/s")


@pytest.fixture(autouse=True)
def run_by_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ace, "current_identity", lambda: ROOT)


@pytest.mark.parametrize("expr", ["!u:root", "u:root & g:nosuchgroup", "u:root & !g:root", "u:alice"])
def test_an_adminperm_that_removes_the_callers_own_is_refused_unless_forced(expr: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        stream_ops.refuse_lockout({"adminperm": expr}, S)
    said = str(refused.value)
    assert f"-adminperm '{ace.normalize(expr)}' does not pass you (root)" in said, said
    assert "-force true" in said, said
    stream_ops.refuse_lockout({"adminperm": expr}, S, force=True)


def test_an_adminperm_that_grants_everyone_but_a_few_says_so() -> None:
    said: list[str] = []
    stream_ops.refuse_lockout({"adminperm": "!u:root"}, S, force=True, warn=said.append)
    stream_ops.refuse_lockout({"adminperm": "u:root | !u:bob"}, S, warn=said.append)
    assert len(said) == 2 and all(s.startswith("warning: -adminperm '") for s in said), said
    assert "grants admin to every identity it does not name" in said[0], said


def test_an_adminperm_that_passes_the_caller_and_names_who_is_quiet() -> None:
    said: list[str] = []
    stream_ops.refuse_lockout({"adminperm": "u:root | g:admins"}, S, warn=said.append)
    assert said == []
