"""The completions in completions/ and the man pages in man/ match the Click commands, and they work."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GEN = ROOT / "scripts" / "gen_docs.py"
BASH = ROOT / "completions" / "streamrepl.bash"
ZSH = ROOT / "completions" / "_streamrepl"
FISH = ROOT / "completions" / "streamrepl.fish"
PAGES = sorted((ROOT / "man").glob("*.1"))
TOPIC_COLUMNS = {"topic", "partitions", "consumers", "maxlag", "timestamptype", "kafkatopic"}


def test_generated_files_are_up_to_date() -> None:
    r = subprocess.run([sys.executable, str(GEN), "--check"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode in (0, 1), f"scripts/gen_docs.py failed to walk the Click commands:\n{r.stderr}"
    assert r.returncode == 0, (
        "completions/ or man/ is out of date with the Click commands:\n"
        f"{r.stderr.strip()}\n"
        "Run `python scripts/gen_docs.py` and commit completions/ and man/."
    )


def test_check_mode_names_a_file_that_differs(tmp_path: Path) -> None:
    assert subprocess.run([sys.executable, str(GEN), "--out", str(tmp_path)], capture_output=True).returncode == 0
    page = tmp_path / "man" / "streamrepl.1"
    page.write_text(page.read_text() + "edited by hand\n")
    (tmp_path / "man" / "streamrepl-no-such-command.1").write_text("stale\n")
    r = subprocess.run([sys.executable, str(GEN), "--check", "--out", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 1
    assert "out of date: man/streamrepl.1" in r.stderr
    assert "stale: man/streamrepl-no-such-command.1" in r.stderr
    assert "python scripts/gen_docs.py" in r.stderr


def test_bash_completion_parses() -> None:
    r = subprocess.run(["bash", "-n", str(BASH)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def _complete_bash(*words: str) -> list[str]:
    script = (
        f"source {BASH}\n"
        'COMP_WORDS=("$@"); COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))\n'
        "_streamrepl\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    r = subprocess.run(["bash", "-c", script, "bash", *words], capture_output=True, text=True, check=True)
    return r.stdout.split()


def test_bash_completion_completes_commands_options_and_values() -> None:
    assert _complete_bash("streamrepl", "st") == ["stream"]
    assert "topic" in _complete_bash("streamrepl", "-clusters", "/tmp/c.yaml", "stream", "")
    assert set(_complete_bash("streamrepl", "stream", "topic", "create", "-pa")) == {"-path", "-partitions"}
    assert "--path" in _complete_bash("streamrepl", "stream", "topic", "create", "--")
    assert _complete_bash("streamrepl", "stream", "create", "-path", "/a/b", "-autocreate", "") == [
        "true",
        "false",
        "yes",
        "no",
    ]


@pytest.mark.parametrize(
    ("words", "values"),
    [
        (["local", "up", "-broker"], {"tansu", "noida"}),
        (["stream", "create", "-path", "/a/b", "-compression"], {"off", "lz4", "zlib", "snappy", "zstd", "inherit"}),
        (["stream", "edit", "-defaulttimestamptype"], {"createtime", "logappendtime"}),
        (["stream", "topic", "create", "-timestamptype"], {"createtime", "logappendtime"}),
        (["stream", "replica", "add", "-networkcompression"], {"off", "lz4", "zlib", "snappy", "zstd"}),
        (["gateway", "start", "-loglevel"], {"DEBUG", "INFO", "WARNING", "ERROR"}),
        (["proxy", "start", "--loglevel"], {"DEBUG", "INFO", "WARNING", "ERROR"}),
        (["consume", "-offset"], {"earliest", "latest"}),
        (["produce", "-format"], {"lines", "json"}),
        (["stream", "topic", "list", "-columns"], {*TOPIC_COLUMNS, "all"}),
    ],
)
def test_bash_completion_offers_the_values_of_an_option_with_a_fixed_set(words: list[str], values: set[str]) -> None:
    assert set(_complete_bash("streamrepl", *words, "")) == values


def test_every_option_that_names_its_values_completes_them() -> None:
    """An option whose metavar lists words (`off|lz4|zlib`, `tansu|noida`) is completed with them; a number
    (`N`) beside them stays free."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import gen_docs

    listed = re.compile(r"\[?[A-Za-z]+(\|[A-Za-z]+)+\]?")
    missing = []
    for node in gen_docs.nodes(gen_docs.load_tree()):
        for o in node.options:
            if o.takes_value and listed.fullmatch(o.metavar):
                words = {w.lower() for w in o.metavar.strip("[]").split("|")} - {"n"}
                if not words <= {c.lower() for c in o.choices}:
                    missing.append(f"{node.words} {o.names[0]} {o.metavar}: completes {o.choices}")
    assert missing == []


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_completion_parses() -> None:
    r = subprocess.run(["zsh", "-n", str(ZSH)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
def test_fish_completion_completes() -> None:
    r = subprocess.run(
        ["fish", "-N", "-c", f"source {FISH}; complete -C 'streamrepl stream topic create -pa'"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 0, r.stderr
    assert {line.split("\t")[0] for line in r.stdout.splitlines()} == {"-path", "-partitions"}


def test_a_man_page_for_every_command() -> None:
    names = {p.name for p in PAGES}
    assert "streamrepl.1" in names
    for page in ("streamrepl-stream-create.1", "streamrepl-stream-topic-list.1", "streamrepl-local-up.1"):
        assert page in names


@pytest.mark.skipif(shutil.which("groff") is None, reason="groff is not installed")
@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_man_page_renders_without_warnings(page: Path) -> None:
    r = subprocess.run(
        ["groff", "-man", "-Tutf8", "-P-cbou", "-ww", "-rLL=100n", str(page)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 0, r.stderr
    assert r.stderr == "", r.stderr
    assert "NAME" in r.stdout and "SYNOPSIS" in r.stdout


@pytest.mark.skipif(shutil.which("man") is None or shutil.which("groff") is None, reason="man or groff is missing")
@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_man_page_renders_at_80_columns_without_warnings(page: Path) -> None:
    """What a reader's `man -l` does on an 80-column terminal, with troff's warnings on: a line troff cannot
    adjust (a long word in justified text) is a warning there."""
    r = subprocess.run(
        ["man", "--warnings", "-l", str(page)],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": "/usr/bin:/bin", "MANPAGER": "cat", "PAGER": "cat", "MANWIDTH": "80", "LANG": "C.UTF-8"},
    )
    assert r.returncode == 0, r.stderr
    assert r.stderr == "", r.stderr
    assert "SYNOPSIS" in r.stdout


@pytest.mark.skipif(shutil.which("man") is None, reason="man is not installed")
def test_man_l_shows_the_options() -> None:
    r = subprocess.run(
        ["man", "-l", str(ROOT / "man" / "streamrepl-stream-create.1")],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": "/usr/bin:/bin", "MANPAGER": "cat", "MANWIDTH": "100", "LANG": "C.UTF-8"},
    )
    assert r.returncode == 0, r.stderr
    assert "-defaultpartitions" in r.stdout.replace("\u2010", "-")


def test_no_tracked_file_sends_readers_outside_the_repository() -> None:
    """A clone has only the repository: every document it points to must be in it (docs/), not in a
    directory beside it that only the original checkout had."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    outside = "../" + "shared"  # spelled apart, so that this file does not name it
    offenders = []
    for name in tracked.decode().split("\0"):
        path = ROOT / name
        if not name or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue  # not text
        if outside.encode() in data:
            offenders.append(name)
    assert offenders == [], f"{offenders} refer to {outside}, which a clone does not have"


def test_readme_links_to_the_docs_it_names() -> None:
    readme = (ROOT / "README.md").read_text()
    for doc in ("docs/architecture.md", "docs/maprcli.md"):
        assert f"]({doc})" in readme, doc
        assert (ROOT / doc).is_file(), doc


def test_the_index_page_is_generated_and_names_every_other_page() -> None:
    """`man streamrepl` is the index: man/streamrepl.1 lists every command's page (gen_docs writes it with them)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import gen_docs

    files = gen_docs.generate(gen_docs.load_tree())
    pages = sorted(name for name in files if name.startswith("man/") and name != "man/streamrepl.1")
    index = files["man/streamrepl.1"]
    assert pages and all(f"\\fB{gen_docs.roff(Path(p).stem)}\\fR(1)" in index for p in pages)


@pytest.mark.skipif(shutil.which("man") is None, reason="man is not installed")
def test_man_streamrepl_finds_the_index_beside_a_bin_on_path(tmp_path: Path) -> None:
    """man looks for pages in ../share/man of every bin directory on $PATH: scripts/setup links .venv/share/man/man1
    to man/, and an installed package puts the pages in <prefix>/share/man/man1 (pyproject.toml's data-files)."""
    import tomllib

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["data-files"]
    assert data["share/man/man1"] == ["man/*.1"]
    setup = (ROOT / "scripts" / "setup").read_text()
    assert "ln -sfn ../../../man .venv/share/man/man1" in setup
    # what scripts/setup makes, in a prefix of its own
    (tmp_path / "bin").mkdir()
    (tmp_path / "share" / "man").mkdir(parents=True)
    (tmp_path / "share" / "man" / "man1").symlink_to(ROOT / "man")
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "MANPAGER": "cat", "MANWIDTH": "80", "LANG": "C.UTF-8"}
    r = subprocess.run(["man", "streamrepl"], capture_output=True, text=True, timeout=30, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.lstrip().startswith("STREAMREPL(1)") and "streamrepl-stream-replica-list(1)" in r.stdout.replace(
        "\u2010", "-"
    )
