"""The simulation's clock: what streamrepl's modules read as `time` while a schedule runs.

install() puts one SimClock in the place of the `time` module in every streamrepl module that imported it (the one
place where the clock is injected); uninstall() puts the real module back. sleep() advances the clock at once, so a
call that would wait (a consume with a timeout, a flush, a retry's backoff) costs no real time, and a deadline
loop ends after as many passes as its timeout allows.
"""

from __future__ import annotations

import sys
import time as _time
from types import ModuleType
from typing import Any

EPOCH = 1_780_000_000.0  # the wall clock's value at the simulation's start (2026)


class SimClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def perf_counter(self) -> float:
        return self.now

    def time(self) -> float:
        return EPOCH + self.now

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self.now += seconds

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def __getattr__(self, name: str) -> Any:  # strftime, gmtime...: the real module's
        return getattr(_time, name)


_patched: list[ModuleType] = []


def install(clock: SimClock) -> None:
    for name, mod in list(sys.modules.items()):
        if name.startswith("streamrepl") and getattr(mod, "time", None) is _time:
            mod.time = clock  # type: ignore[attr-defined]
            _patched.append(mod)


def uninstall() -> None:
    while _patched:
        _patched.pop().time = _time  # type: ignore[attr-defined]
