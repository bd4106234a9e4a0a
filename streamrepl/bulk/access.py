"""Who may run a bulk job on a stream: copyperm, or the plain permission the job needs."""

from __future__ import annotations

from .. import ace, streams
from ..errors import PermissionDenied
from ..model import Stream


def check_any_perm(rec: Stream, perms: tuple[str, ...], r: streams.Resolved, action: str) -> None:
    """Pass when the local identity holds at least one of `perms` on the stream."""
    for perm in perms:
        try:
            streams.check_perm(rec, perm, r.path, action)
            return
        except PermissionDenied:
            continue
    me = ace.current_identity()
    raise PermissionDenied(
        f"user '{me.user}' lacks {' or '.join(perms)} on stream {r.path}, needed to {action};"
        f" ask a user with adminperm to grant it (streamrepl stream edit -path {r.path} -{perms[0]} ...)"
    )
