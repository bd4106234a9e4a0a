"""Progress a person can read (a pytest plugin; tests/conftest.py registers it): when the last test of a file finishes,
where the run is, on the file's own line:

    tests/e2e/test_local.py ......ss.. [12/97 files] elapsed 3:12, expected ~24:30

The expected time is the time so far plus what the tests still to run took the last time they ran (their durations,
setup and teardown included, are kept in .pytest_cache under streamrepl/durations, merged at the end of every run
with the cache on); a test never timed counts as the mean of those that were, and while most are untimed (a first
run, a fresh clone as in CI) the estimate says "(guess)". With -q or -v the same words get a line of their own,
after the file's name. Bookkeeping only, per test: nothing that slows a test.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

CACHE_KEY = "streamrepl/durations"


def clock(seconds: float) -> str:
    """m:ss, or h:mm:ss from an hour on."""
    s = round(seconds)
    h, m = divmod(s // 60, 60)
    return f"{h}:{m:02d}:{s % 60:02d}" if h else f"{m}:{s % 60:02d}"


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


class Progress:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.started = time.monotonic()
        self.recorded: dict[str, float] = {}
        self.measured: dict[str, float] = {}
        self.remaining: dict[str, None] = {}  # the tests not finished yet
        self.left_in_file: Counter[str] = Counter()
        self.files = 0
        self.files_done = 0

    @pytest.hookimpl(trylast=True)  # after deselection
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        cache = getattr(self.config, "cache", None)  # none with -p no:cacheprovider
        recorded = cache.get(CACHE_KEY, {}) if cache is not None else {}
        self.recorded = recorded if isinstance(recorded, dict) else {}
        self.remaining = dict.fromkeys(item.nodeid for item in session.items)
        self.left_in_file = Counter(_file(n) for n in self.remaining)
        self.files = len(self.left_in_file)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.measured[report.nodeid] = self.measured.get(report.nodeid, 0.0) + report.duration

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        if nodeid not in self.remaining:
            return  # run again (a rerun plugin): counted once
        del self.remaining[nodeid]
        name = _file(nodeid)
        self.left_in_file[name] -= 1
        if self.left_in_file[name] == 0:
            del self.left_in_file[name]
            self.files_done += 1
            self._report(name)

    def _estimate(self) -> tuple[float, bool]:
        """The seconds the tests not run yet should take, and whether that is a guess (most of them never timed)."""
        timed = [self.recorded[n] for n in self.remaining if isinstance(self.recorded.get(n), int | float)]
        known = [*timed, *self.measured.values()]
        mean = sum(known) / len(known) if known else 0.0
        untimed = len(self.remaining) - len(timed)
        return sum(timed) + untimed * mean, untimed * 2 > len(self.remaining)

    def _report(self, name: str) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        elapsed = time.monotonic() - self.started
        words = f"elapsed {clock(elapsed)}"
        if self.remaining:
            rest, guess = self._estimate()
            words += f", expected ~{clock(elapsed + rest)}{' (guess)' if guess else ''}"
        where = f"[{self.files_done}/{self.files} files]"
        current = getattr(reporter, "currentfspath", None)
        if reporter.verbosity == 0 and isinstance(current, Path) and current == self.config.rootpath / name:
            reporter.write(f" {where} {words}", flush=True)  # on the file's line; the next file starts a new one
        elif reporter.verbosity > 0:
            reporter.ensure_newline()  # after the file's last test; the next test's line starts a new one
            reporter.write(f"{where} {name} {words}", flush=True)
        else:
            reporter.write("\n")  # after the file's last dot (-q keeps no current file to end the line of)
            reporter.write_line(f"{where} {name} {words}")

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        cache = getattr(self.config, "cache", None)
        # Only the tests that finished: one an interrupt cut short would be expected to be quicker than it is.
        done = {n: round(d, 3) for n, d in self.measured.items() if n not in self.remaining}
        if cache is not None and done:
            cache.set(CACHE_KEY, {**self.recorded, **done})


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin("streamrepl-progress"):
        config.pluginmanager.register(Progress(config), "streamrepl-progress")
