"""The package keeps the shape a newcomer can find their way in (docs/architecture.md): modules of a readable size,
no import cycles, one package that talks to brokers, one module that reads settings. Read from the source, so a
change that breaks a rule fails here with the place to look, not in a review months later."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "streamrepl"
MAX_MODULE_LINES = 500
#: Only these may import confluent_kafka: the adapter package.
KAFKA_PACKAGE = "streamrepl.kafka"
SETTINGS_MODULE = "streamrepl.settings"


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _has_reason(node: ast.AST, source: ast.Module | ast.ClassDef) -> bool:
    doc = ast.get_docstring(source) or ""
    return "longer than" in doc.lower() or "why this is long" in doc.lower()


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> list[str]:
    if node.level == 0:
        base = node.module or ""
    else:
        parts = module.split(".")
        if not is_package:
            parts = parts[:-1]
        parts = parts[: len(parts) - (node.level - 1)] if node.level > 1 else parts
        base = ".".join(parts + ([node.module] if node.module else []))
    targets = []
    for alias in node.names:
        candidate = f"{base}.{alias.name}"
        targets.append(candidate if candidate in MODULES else base)
    return targets


def _imports(module: str, path: Path) -> tuple[set[str], set[str]]:
    """(our modules imported anywhere, TYPE_CHECKING blocks included; third-party top-level names)."""
    tree = ast.parse(path.read_text())
    ours: set[str] = set()
    others: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                (ours if alias.name.startswith("streamrepl") else others).add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level or (node.module or "").startswith("streamrepl"):
                ours.update(t for t in _resolve(module, path.name == "__init__.py", node) if t in MODULES)
            else:
                others.add(node.module or "")
    ours.discard(module)
    return ours, others


GRAPH = {m: _imports(m, p) for m, p in MODULES.items()}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_module_is_small(module: str) -> None:
    path = MODULES[module]
    lines = len(path.read_text().splitlines())
    tree = ast.parse(path.read_text())
    # No limit on a class: a class is as large as its one concern (a cap on classes cut concerns into fragments
    # that reached into each other's fields).
    assert lines <= MAX_MODULE_LINES or _has_reason(tree, tree), f"{path} has {lines} lines"


def test_no_import_cycles() -> None:
    """Imports inside functions and under TYPE_CHECKING count: they hide a cycle, they do not remove it (two modules
    that need each other's types are one concern cut in two, or want an interface of their own). A package's __init__ that only
    re-exports its modules is not an edge back (importing streamrepl.kafka.errors runs streamrepl.kafka first)."""
    edges = {m: {t for t in ours if not (m.startswith(t + ".") and t in MODULES)} for m, (ours, _) in GRAPH.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in sorted(edges.get(m, ())):
            if state.get(t) == 1:
                cycle = stack[stack.index(t) :] + [t]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m)


def test_only_the_kafka_package_imports_confluent_kafka() -> None:
    offenders = [
        m
        for m, (_, others) in GRAPH.items()
        if any(o.split(".")[0] == "confluent_kafka" for o in others) and not m.startswith(KAFKA_PACKAGE)
    ]
    assert offenders == []


def test_only_settings_reads_streamrepl_variables() -> None:
    reads = re.compile(r"""(environ\.get|getenv|environ\[|environ\.setdefault)\(?\s*["']STREAMREPL_""")
    offenders = [str(p) for m, p in MODULES.items() if m != SETTINGS_MODULE and reads.search(p.read_text())]
    assert offenders == []


#: Names with a leading underscore that their library documents as public: os._exit; confluent_kafka's error codes of
#: librdkafka's own (KafkaError._TRANSPORT ...); pyspark has no public way to ask whether a context or its JVM is up.
PUBLIC_UNDERSCORED = {"os._exit", "SparkContext._active_spark_context", "SparkContext._gateway"}


def _reaches_into(node: ast.Attribute) -> bool:
    """`x._name` where x is neither self, cls nor super() (dunder names are the language's, not private state)."""
    name = node.attr
    if not name.startswith("_") or (name.startswith("__") and name.endswith("__")):
        return False
    v = node.value
    if isinstance(v, ast.Name) and v.id in ("self", "cls"):
        return False
    if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "super":
        return False
    text = ast.unparse(node)
    return text not in PUBLIC_UNDERSCORED and not text.startswith(("KafkaError._", "kafka.KafkaError._"))


def test_no_module_reaches_into_another_objects_private_state() -> None:
    """An object's `_private` fields and methods are its own: another object (or module) that reads or writes them
    is a second owner of that state, and breaks when the first one changes how it keeps it."""
    offenders = [
        f"{path}:{node.lineno}: {ast.unparse(node)}"
        for path in MODULES.values()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute) and _reaches_into(node)
    ]
    assert offenders == []
