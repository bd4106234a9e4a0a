"""The tests' own layout (docs/development.md, "Tests and markers"): every test module sits in the folder of its kind, no test
module imports another (what tests share lives in tests/support), module names are unique across the folders (pytest
imports them by their base name), and a unit test starts no broker."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
KINDS = ("unit", "e2e", "chaos", "sim")
#: What starts a broker: a unit test that uses one of these belongs in tests/e2e.
BROKER_STARTERS = {"EphemeralClusters", "registered_clusters", "shared_clusters", "local.up"}


def modules_of(root: Path | None = None) -> list[Path]:
    root = root or TESTS
    return sorted(p for p in root.rglob("test_*.py") if "support" not in p.relative_to(root).parts)


def imported_modules_of(path: Path) -> list[str]:
    """The modules named test_* that `path` imports, as written."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module]
        found += [n for n in names if n.split(".")[-1].startswith("test_")]
    return found


def broker_starters(path: Path) -> set[str]:
    """The names of BROKER_STARTERS that `path` uses (a name or `module.attribute`)."""
    used = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Name):
            used.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            used.add(f"{node.value.id}.{node.attr}")
        elif isinstance(node, ast.ImportFrom):
            used |= {a.name for a in node.names}
    return used & BROKER_STARTERS


def test_no_test_module_imports_another() -> None:
    found = [f"{p.relative_to(TESTS)} imports {m}" for p in modules_of() for m in imported_modules_of(p)]
    assert not found, "move what is shared to tests/support:\n" + "\n".join(found)


def test_every_test_module_is_in_the_folder_of_its_kind() -> None:
    misplaced = [str(p.relative_to(TESTS)) for p in modules_of() if p.relative_to(TESTS).parts[0] not in KINDS]
    assert not misplaced, f"test modules outside tests/{{{','.join(KINDS)}}}: {misplaced}"


def test_test_module_names_are_unique_across_folders() -> None:
    seen: dict[str, Path] = {}
    twice = []
    for p in modules_of():
        if p.name in seen:
            twice.append(f"{p.relative_to(TESTS)} and {seen[p.name].relative_to(TESTS)}")
        seen[p.name] = p
    assert not twice, f"same module name in two folders: {twice}"


def test_unit_tests_start_no_broker() -> None:
    found = [f"{p.relative_to(TESTS)}: {', '.join(sorted(broker_starters(p)))}" for p in modules_of(TESTS / "unit")]
    found = [f for f in found if not f.endswith(": ")]
    assert not found, f"unit tests that start brokers (they belong in tests/e2e): {found}"


def test_the_checks_see_what_they_look_for(tmp_path: Path) -> None:
    (tmp_path / "unit").mkdir()
    bad = tmp_path / "unit" / "test_bad.py"
    bad.write_text(
        "import os\nfrom test_other import helper\nimport test_third as t\nfrom support.streams import sp\n"
        "from streamrepl import local\nfrom streamrepl.local import EphemeralClusters\nlocal.up(['a'], '.')\n"
    )
    (tmp_path / "test_loose.py").write_text("")
    (tmp_path / "support").mkdir()
    (tmp_path / "support" / "test_data.py").write_text("")
    assert imported_modules_of(bad) == ["test_other", "test_third"]
    assert [p.relative_to(tmp_path).as_posix() for p in modules_of(tmp_path)] == ["test_loose.py", "unit/test_bad.py"]
