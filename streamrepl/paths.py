"""Stream and topic names, and how they map onto Kafka topic names.

A stream path is `/<cluster>/<path inside the cluster>`; `/mapr/<cluster>/...` is accepted
so that existing maprcli scripts run, and a path whose first segment is not a known
cluster is on the default cluster. A topic is `<stream path>:<topic>`.

Kafka has no directories, so each (stream, topic) pair maps to one Kafka topic name:

    sr.<escaped stream path>.<topic>

where the escaped path is the stream path without its leading '/', with every character
other than ASCII letters and digits written as `_xx` (two lowercase hex digits): `/` is
`_2f`, `.` is `_2e`, `_` is `_5f`. The escaped path therefore never holds a '.', so the
first '.' after the prefix separates it from the topic, and the mapping is reversible.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import InvalidArgument
from .output import one_line

KAFKA_PREFIX = "sr."
METADATA_TOPIC = "__streamrepl_metadata"
MAX_KAFKA_TOPIC = 249

_TOPIC_RE = re.compile(r"[A-Za-z0-9._-]+")
#: Control characters and line breaks: a path holding one could not be printed on one line.
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


@dataclass(frozen=True)
class StreamPath:
    cluster: str
    path: str  # inside the cluster, always starting with '/'

    def __str__(self) -> str:
        return f"/{self.cluster}{self.path}"

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class TopicPath:
    stream: StreamPath
    topic: str

    def __str__(self) -> str:
        return f"{self.stream}:{self.topic}"


#: How much of a name an error message shows: a 10,000-character path must not make a 10 KB error line.
SHOWN_CHARACTERS = 120


def show(text: str) -> str:
    """`text` for an error message: one line, whatever control characters or bad bytes it holds, and short."""
    if len(text) > SHOWN_CHARACTERS:
        return one_line(text[:SHOWN_CHARACTERS]) + f"... ({len(text)} characters)"
    return one_line(text)


def _check_segments(raw: str, segments: list[str]) -> None:
    """Refuse segments no stream path may hold; `raw` is the path as given, for the message."""
    for seg in segments:
        if _CONTROL_RE.search(seg):
            raise InvalidArgument(f"stream path '{show(raw)}' holds a control character; remove it")
        try:
            seg.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidArgument(
                f"stream path '{show(raw)}' is not valid UTF-8; check the locale of the shell or script"
            ) from None
        if seg in (".", ".."):
            raise InvalidArgument(
                f"stream path '{show(raw)}' holds a '{seg}' segment; write the path without '.' or '..'"
            )
        if not seg.strip():
            raise InvalidArgument(f"stream path '{show(raw)}' has a blank segment; remove it")
    name = segments[-1]
    if ":" in name:
        raise InvalidArgument(
            f"stream name '{show(name)}' in '{show(raw)}' contains ':'; stream names cannot contain ':' or '/'"
            " (to name a topic use -topic)"
        )


def parse_stream(text: str, clusters: set[str] | dict, default: str) -> StreamPath:
    """Parse a stream path; `clusters` are the registry's cluster names."""
    if not text or not text.strip():
        raise InvalidArgument("empty stream path; give one like /sanfrancisco/activity")
    raw = text.strip()
    if not raw.startswith("/"):
        raise InvalidArgument(f"stream path '{show(raw)}' must start with '/', e.g. /sanfrancisco/activity")
    if "//" in raw or raw.endswith("/"):
        raise InvalidArgument(f"stream path '{show(raw)}' has an empty segment; remove the extra '/'")
    segments = raw[1:].split("/")
    if segments[0] == "mapr" and len(segments) > 1:
        # /mapr/<cluster>/... names its cluster explicitly: an unknown one is a mistake, not a directory.
        if segments[1] not in clusters:
            known = ", ".join(sorted(clusters)) or "none"
            raise InvalidArgument(
                f"unknown cluster '{show(segments[1])}' in stream path '{show(raw)}' (known: {known});"
                " add it to the cluster registry"
            )
        segments = segments[1:]
    if segments[0] in clusters and len(segments) > 1:
        cluster, rest = segments[0], segments[1:]
    elif segments[0] in clusters:
        raise InvalidArgument(f"stream path '{show(raw)}' names cluster '{segments[0]}' but no stream in it")
    else:
        cluster, rest = default, segments
    _check_segments(raw, rest)
    stream = StreamPath(cluster, "/" + "/".join(rest))
    kafka_topic_name(stream, "x")  # refuses paths too long to map onto Kafka names
    return stream


def split_topic(text: str) -> tuple[str, str | None]:
    """Split `<stream path>:<topic>` at the last ':' of the last segment."""
    head, sep, tail = text.rpartition("/")
    if ":" in tail:
        name, _, topic = tail.partition(":")
        return f"{head}{sep}{name}", topic
    return text, None


def validate_topic(topic: str) -> str:
    if not topic:
        raise InvalidArgument("empty topic name; give one with -topic NAME")
    if topic in (".", ".."):
        raise InvalidArgument(f"invalid topic name '{topic}': '.' and '..' are not topic names; choose another")
    if not _TOPIC_RE.fullmatch(topic):
        raise InvalidArgument(f"invalid topic name '{show(topic)}': use letters, digits, '.', '_' and '-' only")
    return topic


def _escape(path: str) -> str:
    return "".join(chr(b) if chr(b).isalnum() and b < 128 else f"_{b:02x}" for b in path.encode())


def _unescape(text: str) -> str:
    out = bytearray()
    i = 0
    while i < len(text):
        if text[i] == "_":
            out.append(int(text[i + 1 : i + 3], 16))
            i += 3
        else:
            out += text[i].encode()
            i += 1
    return out.decode()


def kafka_topic_name(stream: StreamPath, topic: str) -> str:
    name = f"{KAFKA_PREFIX}{_escape(stream.path[1:])}.{topic}"
    if len(name) > MAX_KAFKA_TOPIC:
        raise InvalidArgument(
            f"stream path '{show(str(stream))}' with topic '{show(topic)}' is too long for a Kafka topic name"
            f" ({len(name)} > {MAX_KAFKA_TOPIC} characters); use a shorter path or topic"
        )
    return name


def from_kafka_topic_name(cluster: str, name: str) -> TopicPath | None:
    """The (stream, topic) a Kafka topic stands for, or None for topics that are not ours.

    Only names the mapping itself makes are recognised: `kafka_topic_name` of the result
    gives `name` back, so no two Kafka topics ever stand for the same (stream, topic).
    """
    if not name.startswith(KAFKA_PREFIX):
        return None
    body = name[len(KAFKA_PREFIX) :]
    escaped, dot, topic = body.partition(".")
    if not dot or not escaped or not _TOPIC_RE.fullmatch(topic):
        return None
    try:
        inner = _unescape(escaped)
        if _escape(inner) != escaped:  # not canonical (upper-case hex, escaped letters or digits)
            return None
        _check_segments(inner, inner.split("/"))
    except (ValueError, UnicodeDecodeError, InvalidArgument):
        return None
    return TopicPath(StreamPath(cluster, "/" + inner), topic)
