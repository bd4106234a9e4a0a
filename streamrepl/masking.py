"""What a registry secret is, and how it is hidden wherever streamrepl shows a cluster or quotes an error.

Two kinds: properties whose names say they hold one (passwords, keys, tokens), shown as MASK; and a `user:password@`
written in front of an address in bootstrap.servers (librdkafka does not use it, but people paste it there). The
password of such an address may hold '@', ',', ':' and spaces, which are also what separates servers, so where it
ends cannot always be told: everything from the first user's ':' to the last '@' is hidden, the hosts after it shown.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MASK = "********"

#: Property names holding secrets: passwords, keys, tokens, and the free-form SASL configs
#: (sasl.oauthbearer.config, sasl.jaas.config) that often carry a client secret inline.
SECRET_MARKERS = (
    "password",
    "secret",
    "token",
    "key.pem",
    "private",
    "credentials",
    "oauthbearer.config",
    "oauthbearer.extensions",
    "jaas",
)

#: Where a userinfo `user:` starts: at the start of the value, after a separator or after `scheme://`; the ':' is
#: neither a scheme's (`SASL_SSL://`) nor a port's (`h1:9092,`).
_USER_RE = re.compile(r"(?:^|(?<=[\s,])|(?<=//))[^\s,/@:\[\]]*:(?!//)(?!\d+(?:[\s,]|$))")
#: What librdkafka splits bootstrap.servers at: an error of its may quote any piece.
_SEPARATORS_RE = re.compile(r"[\s,]+")
#: Shorter strings would blank out ordinary words of a message.
_SHORTEST_SCRUBBED = 3


def is_secret(prop: str) -> bool:
    p = prop.lower()
    return any(m in p for m in SECRET_MARKERS)


def _userinfo(value: str) -> tuple[int, int] | None:
    """The span of `value` to hide (the password, or all before the last '@' when no `user:` can be told apart)."""
    end = value.rfind("@")
    if end < 0:
        return None
    user = _USER_RE.search(value, 0, end)
    return (user.end() if user else 0), end


def mask_address(value: str) -> str:
    """bootstrap.servers as it may be shown: any userinfo password replaced by MASK."""
    span = _userinfo(value)
    return value if span is None else value[: span[0]] + MASK + value[span[1] :]


def address_secrets(value: str) -> list[str]:
    """The hidden part of bootstrap.servers, whole and in the pieces a Kafka client splits it into."""
    span = _userinfo(value)
    if span is None or span[0] == span[1]:
        return []
    hidden = value[span[0] : span[1]]
    pieces = [p for p in _SEPARATORS_RE.split(hidden) if p and p != hidden]
    return [hidden, *pieces]


def scrub(text: str, secrets: Iterable[str]) -> str:
    """`text` with every secret replaced by MASK, the longest first (a shorter one may be part of it)."""
    for s in sorted({s for s in secrets if s and len(s) >= _SHORTEST_SCRUBBED}, key=len, reverse=True):
        text = text.replace(s, MASK)
    return text
