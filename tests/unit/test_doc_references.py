"""Every file, module and link the documents name exists: README.md, docs/*.md, docs/notes/*.md, RELIABILITY.md,
BENCHMARKS.md.

A reference is a repository path (`streamrepl/replication/quiet.py`, `tests/e2e/test_dr.py`, `bench/run.py`,
`docs/alerts.yml`), a module named from inside streamrepl/ (`replication/quiet.py`, `kafka/probes.py`,
`replication/stalls`), a bare file name (`watcher.py`, `DESIGN.md`: some file of the repository has that name),
a dotted name under a streamrepl package (`streamrepl.kafka.reading.true_ends`: it imports), a Markdown link
to a file of the repository, with its #anchor when it has one, or a section named in words: `README, "TLS"`,
`docs/operations.md, "A link in ERROR"`, `README section "Install"` (that file has a heading of those words; in
streamrepl's own messages and docstrings too).
"""

from __future__ import annotations

import importlib
import re
import subprocess
from collections.abc import Callable
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted(
    [ROOT / "README.md", ROOT / "RELIABILITY.md", ROOT / "BENCHMARKS.md", *(ROOT / "docs").glob("*.md")]
    + [*(ROOT / "docs" / "notes").glob("*.md")]
)

# Names that do not exist on purpose, each with its reason; the test checks that they are still named and still
# absent, so that the list does not outlive them.
NOT_FILES = {
    # The restructure table lists the modules that were split (and are gone) beside what replaced them.
    "docs/architecture.md": {"client.py", "checkpoints.py", "gateway_info.py", "cursors.py", "broker.py"},
    # Built by bench/setup, not tracked; a measurement names the module as it was at the commit it measured.
    "docs/notes/bench-log.md": {"bench/.build/relay", "replication/following.py"},
    "docs/notes/bench-wan.md": {"bench/.build/relay", "bench/.build"},
}

TOP_DIRS = ("streamrepl", "tests", "bench", "docs", "scripts", "man", "completions", ".ci")
SUBPACKAGES = tuple(p.name for p in (ROOT / "streamrepl").iterdir() if (p / "__init__.py").is_file())

# A path: a top directory of the repository or a streamrepl subpackage, then more; or a bare *.py / *.md name.
# Not inside a longer word or path, nor after `=` (STREAMREPL_CHAOS_REPORT=chaos.md names a file to write).
PATH = re.compile(
    r"(?<![\w./=@-])("
    rf"(?:{'|'.join(re.escape(d) for d in TOP_DIRS + SUBPACKAGES)})/[\w.@%/-]*[\w@%-]"
    r"|[\w-]+\.py|[A-Za-z][\w-]*\.md"
    r")(?![\w/-])"
)
DOTTED = re.compile(r"(?<![\w.])streamrepl((?:\.\w+)+)")
LINK = re.compile(r"\]\(([^)\s]+)\)")
# A section named in words after its file: `README, "TLS"`, `[brokers.md](brokers.md), "Quirks"`, `x.md section 'Y'`.
SECTION = re.compile(
    r"(?<![\w./-])(README(?:\.md)?|[\w./-]*\w\.md)`?(?:\]\([^)\s]*\))?,?\s+(?:section\s+)?"
    r"(?:\"([^\"\n]+(?:\n[^\"\n]+)?)\"|“([^”\n]+(?:\n[^”\n]+)?)”|'([^'\n]+(?:\n[^'\n]+)?)')"
)


@cache
def tracked_names() -> frozenset[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    names = {Path(line).name for line in out.splitlines()}
    return frozenset(names | {p.name for p in DOCS})


def path_exists(ref: str, doc: Path) -> bool:
    if "/" not in ref:
        return ref in tracked_names()
    stem = ref.rstrip("/")
    candidates = [ROOT / stem, doc.parent / stem, ROOT / "streamrepl" / stem]
    candidates += [c.with_name(c.name + ".py") for c in candidates]  # `replication/stalls` is a module
    return any(c.exists() for c in candidates)


def dotted_exists(dotted: str) -> bool | None:
    """Whether `streamrepl.a.b.c` names a module or something in one; None when `a` is no streamrepl module
    (a header, a logger, a registry property: `streamrepl.origin`, `streamrepl.group.static`)."""
    parts = dotted.strip(".").split(".")
    if not ((ROOT / "streamrepl" / f"{parts[0]}.py").is_file() or parts[0] in SUBPACKAGES):
        return None
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module("streamrepl." + ".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    text = re.sub(r"[`*_]|\[([^]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6} (.+)", line)):
            base = slug(m.group(1))
            name, n = base, 0
            while name in found:
                n += 1
                name = f"{base}-{n}"
            found.add(name)
    return found


def section_file(name: str, doc: Path) -> Path | None:
    """The file `name` (as a section reference writes it) is, beside `doc` or from the repository's top."""
    name = "README.md" if name == "README" else name
    for base in (doc.parent, ROOT, ROOT / "docs"):
        if (base / name).is_file():
            return base / name
    return None


@cache
def sections(page: Path) -> frozenset[str]:
    """The slugs of what a reference in words may name on `page`: its headings, and the bold words that open a
    paragraph (`**A link in ERROR.**`)."""
    leads = re.findall(r"^\*\*([^*\n]+?)\.?\*\*", page.read_text(encoding="utf-8"), re.M)
    return frozenset(anchors(page) | {slug(lead) for lead in leads})


def names_section(words: str, page: Path) -> bool:
    """Whether `words` are a section of `page`, or the first words of one (`"Session 12"` for "Session 12: runs of
    1,000,000 records")."""
    want = slug(words)
    return any(s == want or s.startswith(want + "-") for s in sections(page))


def broken_sections(text: str, doc: Path, where: Callable[[int], str]) -> list[str]:
    out = []
    for m in SECTION.finditer(text):
        words = " ".join(next(g for g in m.groups()[1:] if g).split())
        page = section_file(m.group(1), doc)
        if page is None:
            out.append(f"{where(m.start())}: section {words!r} of {m.group(1)}: no such file")
        elif not names_section(words, page):
            out.append(f"{where(m.start())}: {m.group(1)} has no section {words!r}")
    return out


def broken(doc: Path) -> list[str]:
    text = doc.read_text(encoding="utf-8")
    rel = str(doc.relative_to(ROOT)) if doc.is_relative_to(ROOT) else doc.name
    allowed = NOT_FILES.get(rel, set())
    out = []

    def where(pos: int) -> str:
        return f"{rel}:{text.count(chr(10), 0, pos) + 1}"

    for m in PATH.finditer(text):
        ref = m.group(1)
        if ref not in allowed and not path_exists(ref, doc):
            out.append(f"{where(m.start())}: {ref} does not exist")
    for m in DOTTED.finditer(text):
        if dotted_exists(m.group(1)) is False:
            out.append(f"{where(m.start())}: streamrepl{m.group(1)} does not import")
    for m in LINK.finditer(text):
        target = m.group(1)
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        file, _, anchor = target.partition("#")
        page = (doc.parent / file).resolve() if file else doc
        if not page.exists():
            out.append(f"{where(m.start())}: link to {target}: no file {file}")
        elif anchor and page.suffix == ".md" and anchor not in anchors(page):
            out.append(f"{where(m.start())}: link to {target}: {file or rel} has no heading #{anchor}")
    return out + broken_sections(text, doc, where)


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(ROOT)) for d in DOCS])
def test_every_file_module_and_link_a_document_names_exists(doc: Path) -> None:
    assert broken(doc) == []


SOURCES = sorted((ROOT / "streamrepl").rglob("*.py"))


@pytest.mark.parametrize("source", SOURCES, ids=[str(s.relative_to(ROOT)) for s in SOURCES])
def test_every_section_a_message_or_docstring_names_exists(source: Path) -> None:
    """`see docs/operations.md, "A link in ERROR"` in an error message sends an operator to a heading of that page."""
    text = source.read_text(encoding="utf-8")
    rel = str(source.relative_to(ROOT))
    assert broken_sections(text, ROOT / "x", lambda pos: f"{rel}:{text.count(chr(10), 0, pos) + 1}") == []


def test_the_names_allowed_to_be_missing_are_named_and_missing() -> None:
    for rel, names in NOT_FILES.items():
        text = (ROOT / rel).read_text(encoding="utf-8")
        for name in names:
            assert name in text, f"{rel} no longer names {name}: take it off NOT_FILES"
            # Tracked, not on disk: bench/setup builds bench/.build/relay, which git ignores.
            tracked = subprocess.run(["git", "ls-files", name], cwd=ROOT, capture_output=True, text=True).stdout
            assert not tracked, f"{name} is in the repository now: take it off NOT_FILES"


def test_a_missing_reference_is_found(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# A page\n\nSee `streamrepl/replication/nothing.py`, DESIGN.md, streamrepl.kafka.nothing,\n"
        "[a page](gone.md), [a heading](#a-page) and [another](#gone).\n"
    )
    assert sorted(broken(page)) == [
        "page.md:3: DESIGN.md does not exist",
        "page.md:3: streamrepl.kafka.nothing does not import",
        "page.md:3: streamrepl/replication/nothing.py does not exist",
        "page.md:4: gone.md does not exist",
        "page.md:4: link to #gone: page.md has no heading #gone",
        "page.md:4: link to gone.md: no file gone.md",
    ]
    doc = ROOT / "docs" / "architecture.md"
    assert not path_exists("streamrepl/replication/nothing.py", doc)
    assert not path_exists("replication/nothing", doc) and path_exists("replication/stalls", doc)
    assert not path_exists("DESIGN.md", doc) and path_exists("RELIABILITY.md", doc)
    assert path_exists("watcher.py", doc) and path_exists("tests/e2e/test_dr.py", doc)
    assert dotted_exists(".kafka.reading.true_ends") and dotted_exists(".kafka.reading.nothing") is False
    assert dotted_exists(".origin") is None
    assert slug("Which gateways may serve a cluster: cluster gateway set") == (
        "which-gateways-may-serve-a-cluster-cluster-gateway-set"
    )
    assert slug("What a broker does is probed, not declared") == "what-a-broker-does-is-probed-not-declared"


def test_a_section_named_in_words_that_is_no_heading_is_found(tmp_path: Path) -> None:
    """docs/maprcli.md sent readers to README sections "TLS" and "Multi-master: ..." that the README did not have."""
    (tmp_path / "other.md").write_text(
        "# Other\n\n## Multi-master: each topic is written on one side\n\n**A link in ERROR.** Text.\n"
    )
    page = tmp_path / "page.md"
    page.write_text(
        '# A page\n\nSee other.md, "Multi-master: each topic is written\non one side" and other.md section "TLS",\n'
        '[other.md](other.md), \'Other\', (gone.md, "Nothing") and README, "No such heading";\n'
        'other.md, "A link in ERROR" and other.md, "Multi-master" are there\n'
    )
    assert sorted(broken_sections(page.read_text(), page, lambda pos: "page.md")) == [
        "page.md: README has no section 'No such heading'",
        "page.md: other.md has no section 'TLS'",
        "page.md: section 'Nothing' of gone.md: no such file",
    ]
