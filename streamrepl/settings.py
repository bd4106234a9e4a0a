"""Every STREAMREPL_* environment variable: its unit, default, limits and the one-line error a bad value gets.

Nothing else in the package reads the environment for streamrepl's own variables. Values are read when asked
for, not at import, so a test (or a long-lived process) that changes the environment sees the change, and a
bad value is reported by the command that needs it instead of breaking `--help`. `check()` validates them all
at once: `gateway start` calls it before anything connects, so a bad tuning value is a one-line error at
start rather than a crash loop later.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from .errors import InvalidArgument

#: librdkafka's millisecond properties are 32-bit signed integers.
_MAX_MS = 2**31 - 1


@dataclass(frozen=True)
class Number:
    """A numeric variable: `kind` int (whole numbers) or float, inclusive limits, and what it measures."""

    name: str
    default: float
    unit: str
    minimum: float
    maximum: float
    kind: type = int
    help: str = ""

    def read(self, default: float | None = None) -> float:
        raw = os.environ.get(self.name)
        fallback = self.default if default is None else default
        if raw is None or raw.strip() == "":
            return self.kind(fallback)  # type: ignore[no-any-return]
        shown = _shown(raw)
        try:
            value = self.kind(raw.strip())
        except ValueError:
            what = "a whole number" if self.kind is int else "a number"
            raise InvalidArgument(f"{self.name}={shown} is not {what} of {self.unit}; fix it or unset it") from None
        if not math.isfinite(value):
            raise InvalidArgument(f"{self.name}={shown} must be a finite number of {self.unit}; fix it or unset it")
        if value < self.minimum or value > self.maximum:
            raise InvalidArgument(
                f"{self.name}={shown} must be between {self.minimum:g} and {self.maximum:g} {self.unit};"
                " fix it or unset it"
            )
        return value  # type: ignore[no-any-return]


def _shown(raw: str) -> str:
    """A value as an error line may show it: one line, and not 10 KB of it."""
    text = repr(raw) if not raw.isprintable() else raw
    return text if len(text) <= 40 else text[:37] + "..."


GATEWAY_SESSION_MS = Number(
    "STREAMREPL_GATEWAY_SESSION_MS",
    6000,
    "milliseconds",
    1000,
    _MAX_MS,
    help="how long the gateway group waits for a silent gateway before its slots move",
)
GATEWAY_MESSAGE_TIMEOUT_MS = Number(
    "STREAMREPL_GATEWAY_MESSAGE_TIMEOUT_MS",
    3000,
    "milliseconds",
    1,
    _MAX_MS,
    help="how long a record may wait in a gateway's producer before it expires (default: half the session)",
)
GATEWAY_LINGER_MS = Number(
    "STREAMREPL_GATEWAY_LINGER_MS", 2, "milliseconds", 0, 900_000, help="how long a gateway's producer batches"
)
THROTTLE_RATE = Number(
    "STREAMREPL_THROTTLE_RATE",
    1000,
    "records per second",
    1,
    1e9,
    kind=float,
    help="the rate per partition of a replica created with -throttle true",
)
CURSOR_SYNC_SECONDS = Number(
    "STREAMREPL_CURSOR_SYNC_SECONDS",
    2,
    "seconds",
    0.05,
    86_400,
    kind=float,
    help="how often a gateway carries committed consumer-group cursors to its replicas",
)

QUIET_END_CHECK_MS = Number(
    "STREAMREPL_QUIET_END_CHECK_MS",
    100,
    "milliseconds",
    10,
    60_000,
    help="how often a gateway asks for the ends of source partitions that had no records for a while (unset: the"
    " broker's default, kafka.quiet_end_check_ms); longer costs the source broker and the gateway less and wakes an"
    " idle partition later (about half the period on average)",
)

NUMBERS = (
    GATEWAY_SESSION_MS,
    GATEWAY_MESSAGE_TIMEOUT_MS,
    GATEWAY_LINGER_MS,
    THROTTLE_RATE,
    CURSOR_SYNC_SECONDS,
    QUIET_END_CHECK_MS,
)

#: Names of the variables that are not numbers (read by the functions below).
CLUSTERS = "STREAMREPL_CLUSTERS"
IDENTITY = "STREAMREPL_IDENTITY"
LOCAL_DIR = "STREAMREPL_LOCAL_DIR"
LOCAL_BROKER = "STREAMREPL_LOCAL_BROKER"
#: The broker programs `local up` can start (streamrepl.local_brokers has one class for each).
LOCAL_BROKERS = ("tansu", "noida")
DEBUG = "STREAMREPL_DEBUG"
#: A test hook: `<command>:<k>` makes a journaled DR command (promote, resync) exit hard right after its step k.
CRASH_AFTER_STEP = "STREAMREPL_CRASH_AFTER_STEP"
KEEP_SPARK_LOG = "STREAMREPL_KEEP_SPARK_LOG"


@dataclass(frozen=True)
class GatewaySettings:
    session_ms: int
    message_timeout_ms: int
    linger_ms: int
    throttle_rate: float
    cursor_sync_seconds: float


def gateway() -> GatewaySettings:
    """The gateway's tuning, checked together: one InvalidArgument line names the variable to fix."""
    session = int(GATEWAY_SESSION_MS.read())
    timeout = int(GATEWAY_MESSAGE_TIMEOUT_MS.read(default=session // 2))
    if timeout >= session:
        raise InvalidArgument(
            f"{GATEWAY_MESSAGE_TIMEOUT_MS.name} ({timeout}) must be shorter than the session"
            f" {GATEWAY_SESSION_MS.name} ({session}), or a gateway frozen past its session could"
            " write after the one that took over; leave it unset (half the session)"
        )
    return GatewaySettings(
        session_ms=session,
        message_timeout_ms=timeout,
        linger_ms=int(GATEWAY_LINGER_MS.read()),
        throttle_rate=float(THROTTLE_RATE.read()),
        cursor_sync_seconds=float(CURSOR_SYNC_SECONDS.read()),
    )


def check() -> None:
    """Every numeric variable is valid and they agree with each other, or InvalidArgument says which is not."""
    gateway()
    QUIET_END_CHECK_MS.read()


def _text(name: str) -> str | None:
    raw = os.environ.get(name)
    return raw if raw and raw.strip() else None


def clusters_file() -> Path | None:
    """$STREAMREPL_CLUSTERS: the cluster registry, when set."""
    raw = _text(CLUSTERS)
    return Path(raw).expanduser() if raw else None


def local_dir() -> Path | None:
    """$STREAMREPL_LOCAL_DIR: the state directory of `local up`, when set."""
    raw = _text(LOCAL_DIR)
    return Path(raw).expanduser() if raw else None


def local_broker() -> str:
    """$STREAMREPL_LOCAL_BROKER: which broker `local up` starts when not told (tansu or noida; default tansu)."""
    raw = _text(LOCAL_BROKER)
    if raw is None:
        return LOCAL_BROKERS[0]
    if raw.strip() not in LOCAL_BROKERS:
        raise InvalidArgument(f"{LOCAL_BROKER}={_shown(raw)} is not a broker; use {' or '.join(LOCAL_BROKERS)}")
    return raw.strip()


def identity() -> str:
    """$STREAMREPL_IDENTITY (`user=alice;groups=eng`), or "" for the operating system's identity."""
    return (os.environ.get(IDENTITY) or "").strip()


def debug() -> bool:
    """$STREAMREPL_DEBUG: let unexpected exceptions through with their traceback."""
    return bool(_text(DEBUG))


def keep_spark_log() -> bool:
    """$STREAMREPL_KEEP_SPARK_LOG: keep the Spark JVM's log file after a job (the secrets test reads it)."""
    return bool(_text(KEEP_SPARK_LOG))


def crash_after_step() -> tuple[str, int] | None:
    """$STREAMREPL_CRASH_AFTER_STEP (`promote:2`): the command and step after which the process exits hard (tests
    of the DR commands' journals); None when unset."""
    raw = _text(CRASH_AFTER_STEP)
    if raw is None:
        return None
    command, _, step = raw.strip().partition(":")
    if not command or not step.isdigit() or int(step) < 1:
        raise InvalidArgument(
            f"{CRASH_AFTER_STEP}={_shown(raw)} is not <command>:<step> (e.g. promote:2); fix it or unset it"
        )
    return command, int(step)
