"""Whether the registry file changed the settings of a cluster a running gateway uses.

A cluster that moved (a broker started again on another port, a new address after a failover of the machines) is
written into the registry by whoever moved it (`local up` does); a gateway kept dialing the address it read at its
start, for good, and `replica list` said no gateway ran although one did. The gateway looks at the file's
modification time every CHECK_SECONDS; when the entry of its destination or of a source it reads changed, it stops,
and its supervisor starts it again on the new settings (a restart, not a reload: every client of the process was made
from the old entry). A registry that no longer parses is logged and the running settings are kept.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from .. import registry
from ..errors import StreamreplError
from ..registry import Registry

log = logging.getLogger("streamrepl.gateway")

CHECK_SECONDS = 5.0


class RegistryChanged(StreamreplError):
    """The registry changed a cluster this gateway uses: a restartable stop (exit status 1)."""


class RegistryWatch:
    def __init__(
        self,
        reg: Registry,
        load: Callable[[str], Registry] = lambda path: registry.load(path),
        clock: Callable[[], float] = time.monotonic,
    ):
        self.reg = reg
        self._load = load
        self._clock = clock
        self._next = clock() + CHECK_SECONDS
        self._mtime = self._stat()

    def _stat(self) -> float:
        try:
            return self.reg.path.stat().st_mtime
        except OSError:
            return 0.0

    def check(self, clusters: Iterable[str]) -> None:
        """Raise RegistryChanged when the file now gives one of `clusters` other settings."""
        now = self._clock()
        if now < self._next:
            return
        self._next = now + CHECK_SECONDS
        mtime = self._stat()
        if mtime == self._mtime:
            return
        self._mtime = mtime
        try:
            new = self._load(str(self.reg.path))
        except StreamreplError as e:
            log.warning(
                "the registry %s changed and cannot be read (%s); the gateway keeps its settings", self.reg.path, e
            )
            return
        for name in sorted(set(clusters)):
            if new.clusters.get(name) != self.reg.clusters.get(name):
                raise RegistryChanged(
                    f"the registry {self.reg.path} changed the settings of cluster {name}; the gateway stops to start"
                    " again with them"
                )
