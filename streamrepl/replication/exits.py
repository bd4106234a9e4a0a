"""The exit statuses of `gateway start`, by which its supervisor (workers.py) judges a worker, and systemd a gateway.

A worker that dies otherwise (a failure: exit status 1, or killed by a signal, a librdkafka segfault included) is
started again after a back-off. The statuses below are exits that a restart cannot mend: the supervisor starts
nothing again and exits with the same status and the worker's message. Numbers from sysexits.h, so that they
differ from 1 (any failure) and from 128+N (a signal); systemd's RestartPreventExitStatus= can name them.
"""

from __future__ import annotations

import errno
import json
import os

from ..errors import InvalidArgument, NotFound, PermissionDenied, RegistryError, StreamreplError
from ..kafka import KafkaError, error_code
from .membership import GatewayFenced

CLEAN = 0
#: any other failure: started again
FAILED = 1
#: bad input or settings (-metricsport in use, a bad STREAMREPL_* value, a cluster missing from the registry, a Kafka
#: client setting of the registry that librdkafka refuses)
BAD_INPUT = 78  # EX_CONFIG
#: fenced out of the slot group by another gateway started with the same -id
FENCED = 76  # EX_PROTOCOL
#: not on the gateway list of the cluster (`cluster gateway set`), at start or later
REFUSED = 77  # EX_NOPERM
FINAL = {
    BAD_INPUT: "bad input or settings",
    FENCED: "fenced by another gateway",
    REFUSED: "refused by the gateway list",
}


def status_of(e: BaseException) -> int:
    """The exit status of `gateway start` that ends on `e`."""
    if error_code(e) == KafkaError._INVALID_ARG:
        return BAD_INPUT  # raised when a client is made with a setting librdkafka refuses: nothing a restart changes
    if isinstance(e, GatewayFenced):
        return FENCED
    if isinstance(e, PermissionDenied):
        return REFUSED
    if isinstance(e, InvalidArgument | NotFound | RegistryError):
        return BAD_INPUT
    return FAILED


class FinalExit(StreamreplError):
    """An error that ends `gateway start` with a status of FINAL (the message and errno code are the cause's)."""

    def __init__(self, message: str, code: int, exit_status: int):
        super().__init__(message, code)
        self.exit_status = exit_status


def tell_supervisor(fd: int, code: int, message: str) -> None:
    """A worker's last words before a final exit, on the pipe its supervisor gave it: the supervisor ends with them
    (one error line for the command, not the worker's and then the supervisor's)."""
    try:
        os.write(fd, json.dumps({"code": code, "message": message}).encode())
    except OSError:
        pass  # the supervisor is gone; the exit status still says what happened


def last_words(fd: int) -> tuple[int, str] | None:
    """(errno code, message) a worker wrote on its pipe before it exited; None when it wrote nothing."""
    data = b""
    os.set_blocking(fd, False)
    try:
        while chunk := os.read(fd, 65536):
            data += chunk
    except BlockingIOError:
        pass  # what the worker wrote is there; a descendant of it may still hold the pipe open
    try:
        words = json.loads(data)
        return int(words["code"]), str(words["message"])
    except (ValueError, KeyError, TypeError):
        return None


def final_error(status: int, words: tuple[int, str] | None, worker_id: str) -> FinalExit:
    if words is not None:
        return FinalExit(words[1], words[0], status)
    code = errno.EPERM if status == REFUSED else errno.EINVAL
    return FinalExit(f"gateway {worker_id} exited with status {status}: {FINAL[status]}", code, status)
