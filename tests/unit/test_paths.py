"""Stream paths, topic names and their mapping onto Kafka topic names (no broker needed)."""

from __future__ import annotations

import re

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from streamrepl.errors import InvalidArgument
from streamrepl.paths import (
    KAFKA_PREFIX,
    MAX_KAFKA_TOPIC,
    StreamPath,
    TopicPath,
    from_kafka_topic_name,
    kafka_topic_name,
    parse_stream,
    split_topic,
    validate_topic,
)

CLUSTERS = {"sanfrancisco", "newyork"}
DEFAULT = "sanfrancisco"
KAFKA_LEGAL = re.compile(r"[A-Za-z0-9._-]{1,249}")


def parse(text: str) -> StreamPath:
    return parse_stream(text, CLUSTERS, DEFAULT)


# -- parse_stream -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, cluster, path",
    [
        ("/sanfrancisco/activity", "sanfrancisco", "/activity"),
        ("/newyork/activity", "newyork", "/activity"),
        ("/newyork/a/b/c", "newyork", "/a/b/c"),
        ("/mapr/newyork/activity", "newyork", "/activity"),
        ("/mapr/sanfrancisco/apps/s1", "sanfrancisco", "/apps/s1"),
        # A first segment that is not a cluster: the default cluster.
        ("/activity", DEFAULT, "/activity"),
        ("/apps/activity", DEFAULT, "/apps/activity"),
        ("/mapr", DEFAULT, "/mapr"),
        # ':' is allowed in directory names, only the stream name may not hold one.
        ("/newyork/my/path/with:/to/mystream", "newyork", "/my/path/with:/to/mystream"),
        ("  /newyork/activity  ", "newyork", "/activity"),
        ("/newyork/newyork", "newyork", "/newyork"),
        ("/newyork/sanfrancisco/x", "newyork", "/sanfrancisco/x"),
        ("/newyork/ü-stream", "newyork", "/ü-stream"),
    ],
)
def test_parse_stream(text: str, cluster: str, path: str) -> None:
    sp = parse(text)
    assert (sp.cluster, sp.path) == (cluster, path)
    assert str(sp) == f"/{cluster}{path}"
    assert sp.name == path.rsplit("/", 1)[-1]
    assert parse(str(sp)) == sp  # the printed form parses back to the same stream


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty stream path"),
        ("   ", "empty stream path"),
        ("activity", "must start with '/'"),
        ("sanfrancisco/activity", "must start with '/'"),
        ("/sanfrancisco//activity", "empty segment"),
        ("/sanfrancisco/activity/", "empty segment"),
        ("//activity", "empty segment"),
        ("/", "empty segment"),
        ("/sanfrancisco", "no stream"),
        ("/mapr/newyork", "no stream"),
        ("/sanfrancisco/activity:clicks", "contains ':'"),
        ("/sanfrancisco/my/path/with:/to/mystream:withcolon", "contains ':'"),
        ("/sanfrancisco/a\nb", "control character"),
        ("/sanfrancisco/a\tb", "control character"),
        ("/sanfrancisco/a\x00b", "control character"),
        ("/sanfrancisco/a\n/b", "control character"),
        ("/sanfrancisco/a\x7f", "control character"),
        ("/sanfrancisco/a\u2028b", "control character"),
        ("/sanfrancisco/a\udcffb", "UTF-8"),  # an undecodable byte in argv
        ("/sanfrancisco/a/../b", "'..'"),
        ("/sanfrancisco/./b", "'.'"),
        ("/sanfrancisco/..", "'..'"),
        ("/sanfrancisco/a/   /b", "blank"),
        ("/mapr/nowhere/activity", "unknown cluster 'nowhere'"),
        ("/sanfrancisco/" + "x" * 300, "too long"),
    ],
)
def test_parse_stream_refuses(text: str, message: str) -> None:
    with pytest.raises(InvalidArgument) as e:
        parse(text)
    assert message in e.value.message
    assert "\n" not in e.value.message  # errors are one line, whatever the input held


def test_default_cluster_is_the_registry_default() -> None:
    assert parse_stream("/activity", CLUSTERS, "newyork") == StreamPath("newyork", "/activity")
    assert parse_stream("/sanfrancisco/activity", CLUSTERS, "newyork").cluster == "sanfrancisco"


def test_split_topic() -> None:
    assert split_topic("/sanfrancisco/activity:clicks") == ("/sanfrancisco/activity", "clicks")
    assert split_topic("/sanfrancisco/activity") == ("/sanfrancisco/activity", None)
    assert split_topic("/a/with:/to/s:t") == ("/a/with:/to/s", "t")


# -- validate_topic -----------------------------------------------------------------------
@pytest.mark.parametrize("topic", ["clicks", "a", "A.b_c-d", "0", "x" * 100, "..a", "-", "..."])
def test_validate_topic_accepts(topic: str) -> None:
    assert validate_topic(topic) == topic


@pytest.mark.parametrize(
    "topic", ["", "a b", "a/b", "a:b", "é", "a\n", "a*", "a\x00", "clicks\n", "\nclicks", "a\udcff"]
)
def test_validate_topic_refuses(topic: str) -> None:
    with pytest.raises(InvalidArgument) as e:
        validate_topic(topic)
    assert "\n" not in e.value.message


# -- Kafka topic names ----------------------------------------------------------------------
def test_kafka_topic_name_documented_examples() -> None:
    assert kafka_topic_name(StreamPath("sanfrancisco", "/activity"), "clicks") == "sr.activity.clicks"
    assert kafka_topic_name(StreamPath("x", "/apps/s.1_a"), "t") == "sr.apps_2fs_2e1_5fa.t"
    # The cluster is not part of the name: each cluster has its own brokers.
    assert kafka_topic_name(StreamPath("newyork", "/activity"), "clicks") == "sr.activity.clicks"


def test_kafka_topic_name_refuses_too_long() -> None:
    with pytest.raises(InvalidArgument, match="too long"):
        kafka_topic_name(StreamPath("c", "/s"), "t" * 250)


@pytest.mark.parametrize(
    "name",
    [
        "clicks",  # not ours
        "__streamrepl_metadata",
        "sr.",
        "sr.activity",  # no topic
        "sr.activity.",  # empty topic
        "sr..clicks",  # empty stream path
        "sr.a_zz.t",  # bad escape
        "sr.a_2.t",  # truncated escape
        "sr.a_.t",
        "sr._41.t",  # '_41' is 'A', which the mapping writes as 'A': not a name we make
        "sr.a_2F.t",  # upper-case hex: not a name we make
        "sr.a_2f_2fb.t",  # '//' : not a path we accept
        "sr.a_0a.t",  # a control character in the path
        "sr._ff.t",  # not UTF-8
    ],
)
def test_from_kafka_topic_name_ignores_names_not_made_by_the_mapping(name: str) -> None:
    assert from_kafka_topic_name("c", name) is None


# -- properties -----------------------------------------------------------------------------
SEGMENT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp"), blacklist_characters="/"),
    min_size=1,
    max_size=12,
).filter(lambda s: s.strip() and s not in (".", ".."))
# The CLI strips the path it is given, so a stream name never ends in white space.
STREAM_NAME = SEGMENT.filter(lambda s: ":" not in s and s == s.rstrip())
TOPIC = st.from_regex(r"[A-Za-z0-9._-]{1,40}", fullmatch=True)


@st.composite
def stream_paths(draw: st.DrawFn) -> StreamPath:
    dirs = draw(st.lists(SEGMENT, max_size=4))
    name = draw(STREAM_NAME)
    return StreamPath(draw(st.sampled_from(sorted(CLUSTERS))), "/" + "/".join([*dirs, name]))


@settings(max_examples=300, deadline=None)
@given(stream_paths(), TOPIC)
@example(StreamPath("newyork", "/a.b/c_d"), "t.x")
@example(StreamPath("newyork", "/_2f"), "_2f")
@example(StreamPath("newyork", "/sr.x"), "sr.y")
def test_kafka_name_round_trip_and_legal(sp: StreamPath, topic: str) -> None:
    try:
        name = kafka_topic_name(sp, topic)
    except InvalidArgument as e:
        assert "too long" in e.message
        return
    assert KAFKA_LEGAL.fullmatch(name), name
    assert name not in (".", "..")
    assert name.startswith(KAFKA_PREFIX)
    assert len(name) <= MAX_KAFKA_TOPIC
    assert from_kafka_topic_name(sp.cluster, name) == TopicPath(sp, topic)


@settings(max_examples=300, deadline=None)
@given(stream_paths(), stream_paths(), TOPIC, TOPIC)
def test_kafka_names_are_distinct(a: StreamPath, b: StreamPath, ta: str, tb: str) -> None:
    assume((a.path, ta) != (b.path, tb))
    try:
        na, nb = kafka_topic_name(a, ta), kafka_topic_name(b, tb)
    except InvalidArgument:
        return
    assert na != nb


@settings(max_examples=300, deadline=None)
@given(stream_paths())
def test_parse_accepts_its_own_output(sp: StreamPath) -> None:
    try:
        parsed = parse(str(sp))
    except InvalidArgument as e:
        assert "too long" in e.message
        return
    assert parsed == sp
    assert parse(f"/mapr{sp}") == sp


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_parse_never_fails_but_with_invalid_argument(text: str) -> None:
    try:
        sp = parse(text)
    except InvalidArgument as e:
        assert "\n" not in e.message
        return
    assert sp.cluster in CLUSTERS
    assert sp.path.startswith("/")
    assert ":" not in sp.name
    assert KAFKA_LEGAL.fullmatch(kafka_topic_name(sp, "x"))


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=60))
def test_from_kafka_topic_name_only_accepts_what_the_mapping_makes(name: str) -> None:
    tp = from_kafka_topic_name("c", name)
    if tp is not None:
        assert kafka_topic_name(tp.stream, tp.topic) == name
        assert validate_topic(tp.topic) == tp.topic


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=30))
def test_validate_topic_matches_the_documented_alphabet(topic: str) -> None:
    if re.fullmatch(r"[A-Za-z0-9._-]+", topic) and topic not in (".", ".."):
        assert validate_topic(topic) == topic
    else:
        with pytest.raises(InvalidArgument):
            validate_topic(topic)
