"""Errors a user can act on.

Every failure the CLI reports is a StreamreplError: one line saying what is wrong and
how to fix it, plus a numeric id for the maprcli error envelope. Anything else that
escapes is a bug and is reported as such, still on one line.
"""

from __future__ import annotations

import errno


class StreamreplError(Exception):
    """A failure that is the user's to fix (bad input, missing stream, unreachable broker)."""

    #: maprcli reports POSIX-style error codes in its envelope; we follow that habit.
    code: int = errno.EINVAL
    #: the command's exit status when this error ends it (`gateway start` has statuses of its own: replication/exits.py)
    exit_status: int = 1

    def __init__(self, message: str, code: int | None = None):
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        return str(self.args[0])


class InvalidArgument(StreamreplError):
    code = errno.EINVAL


class NotFound(StreamreplError):
    code = errno.ENOENT


class AlreadyExists(StreamreplError):
    code = errno.EEXIST


class PermissionDenied(StreamreplError):
    code = errno.EPERM


class Unreachable(StreamreplError):
    code = errno.ETIMEDOUT


class ConcurrentEdit(StreamreplError):
    code = errno.EAGAIN


class RegistryError(StreamreplError):
    code = errno.ENOENT


class LimitExceeded(StreamreplError):
    code = errno.ENOSPC
