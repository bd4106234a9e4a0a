"""streamrepl.kafka.errors on made-up errors: no broker needed."""

from __future__ import annotations

import errno

import pytest

from streamrepl import kafka
from streamrepl.errors import Unreachable
from streamrepl.kafka import KafkaError, KafkaException
from streamrepl.registry import Cluster

SECRET = "s3cr3t-token"


def failure(code: int, reason: str = "") -> KafkaException:
    return KafkaException(KafkaError(code, reason))


@pytest.mark.parametrize(
    ("code", "transport", "unknown_topic", "denied"),
    [
        (KafkaError._TRANSPORT, True, False, False),
        (KafkaError._ALL_BROKERS_DOWN, True, False, False),
        (KafkaError._TIMED_OUT, True, False, False),
        (KafkaError.UNKNOWN_TOPIC_OR_PART, False, True, False),
        (KafkaError._UNKNOWN_TOPIC, False, True, False),
        (KafkaError._UNKNOWN_PARTITION, False, True, False),
        (KafkaError.TOPIC_AUTHORIZATION_FAILED, False, False, True),
        (KafkaError.SASL_AUTHENTICATION_FAILED, False, False, True),
        (KafkaError._AUTHENTICATION, False, False, True),
        (KafkaError._SSL, False, False, True),
        (KafkaError.TOPIC_ALREADY_EXISTS, False, False, False),
    ],
)
def test_classification(code: int, transport: bool, unknown_topic: bool, denied: bool) -> None:
    for e in (failure(code), KafkaError(code)):
        assert kafka.is_transport(e) is transport
        assert kafka.is_unknown_topic(e) is unknown_topic
        assert kafka.is_access_denied(e) is denied
        assert kafka.error_code(e) == code


def test_other_exceptions_are_not_kafka_errors() -> None:
    for e in (ValueError("x"), KafkaException("no KafkaError inside"), KafkaException()):
        assert kafka.kafka_error(e) is None
        assert kafka.error_code(e) is None
        assert not kafka.is_transport(e)
    assert kafka.error_code(None) is None


def test_partition_eof() -> None:
    assert kafka.is_partition_eof(KafkaError(KafkaError._PARTITION_EOF))
    assert not kafka.is_partition_eof(KafkaError(KafkaError._TRANSPORT))
    assert not kafka.is_partition_eof(None)


def test_uncertain_delivery_holds_the_expired_and_fenced_writes() -> None:
    assert {KafkaError._MSG_TIMED_OUT, KafkaError._FENCED, KafkaError.PRODUCER_FENCED} <= kafka.UNCERTAIN_DELIVERY
    assert KafkaError._TRANSPORT not in kafka.UNCERTAIN_DELIVERY


def test_unreachable_names_the_cluster_and_not_its_secrets() -> None:
    c = Cluster("east", {"bootstrap.servers": "b1:9092", "sasl.password": SECRET})
    e = kafka.unreachable(c, "listing topics")
    assert isinstance(e, Unreachable)
    assert e.message.startswith("cluster 'east' (b1:9092) does not answer while listing topics;")
    assert SECRET not in e.message


def test_describe_a_broker_error_in_one_line_without_secrets() -> None:
    code, text = kafka.describe_exception(failure(KafkaError._AUTHENTICATION, f"bad password {SECRET}"), [SECRET])
    assert code == errno.EIO
    assert text.startswith("broker error _AUTHENTICATION: ")
    assert SECRET not in text and "********" in text


def test_describe_any_exception_in_one_line_without_secrets() -> None:
    code, text = kafka.describe_exception(RuntimeError(f"failed\n  with\ttoken={SECRET}\n"), ["", "ab", SECRET])
    assert code == errno.EIO
    assert text == "unexpected RuntimeError: failed with token=********"
    assert kafka.describe_exception(RuntimeError())[1] == "unexpected RuntimeError: RuntimeError"


def test_scrub_ignores_secrets_too_short_to_be_told_apart() -> None:
    # A one- or two-character "secret" would blank out ordinary words.
    assert kafka.scrub("a bc def", ["a", "bc", "def"]) == "a bc ********"


def test_a_fatal_event_counts_as_fatal_though_its_own_flag_says_not() -> None:
    # How librdkafka hands over a static consumer's fence: code _FATAL, fatal() False.
    from confluent_kafka import KafkaError as KE

    from streamrepl import kafka as k

    assert KE(KE._FATAL).fatal() is False
    assert k.is_fatal(KE(KE._FATAL)) and k.is_fatal(KE(KE.OUT_OF_ORDER_SEQUENCE_NUMBER, fatal=True))
    assert not k.is_fatal(KE(KE._TRANSPORT))
