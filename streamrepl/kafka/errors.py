"""What a Kafka error means for us: the broker is unreachable, access is refused, the topic is
missing, a write's fate is unknown. And how an unexpected failure is told in one line, with
no registry secret in it.
"""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Iterable, Iterator

from confluent_kafka import KafkaError, KafkaException

from ..errors import Unreachable
from ..masking import scrub
from ..registry import Cluster
from .tlscheck import tls_problem

#: The broker did not answer (connection refused or lost, request timed out): waiting may cure it.
TRANSPORT = frozenset({KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT})

#: The topic or partition does not exist.
UNKNOWN_TOPIC = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION})

#: The credentials or the TLS setup were refused, or the principal may not use the topic:
#: waiting will not cure it.
ACCESS_DENIED = frozenset(
    {
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError._AUTHENTICATION,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError._SSL,
    }
)

#: Delivery errors after which nothing is known of where the writer's records are: they expired in the
#: producer's queue, or the producer was fenced or purged.
UNCERTAIN_DELIVERY = frozenset(
    {
        KafkaError._MSG_TIMED_OUT,
        KafkaError._PURGE_QUEUE,
        KafkaError._PURGE_INFLIGHT,
        KafkaError._FATAL,
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
        KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER,
        KafkaError.UNKNOWN_PRODUCER_ID,
    }
)


def kafka_error(e: BaseException) -> KafkaError | None:
    """The KafkaError a KafkaException carries, or None for any other exception."""
    if isinstance(e, KafkaException) and e.args and isinstance(e.args[0], KafkaError):
        return e.args[0]
    return None


def error_code(e: BaseException | KafkaError | None) -> int | None:
    """The librdkafka error code of a KafkaError or of the KafkaException carrying one, else None."""
    err = e if isinstance(e, KafkaError) else kafka_error(e) if e is not None else None
    return err.code() if err is not None else None


def is_transport(e: BaseException | KafkaError | None) -> bool:
    return error_code(e) in TRANSPORT


def is_all_brokers_down(e: BaseException | KafkaError | None) -> bool:
    """The client lost every broker of its cluster (a single-broker cluster that stopped, or a whole cluster)."""
    return error_code(e) == KafkaError._ALL_BROKERS_DOWN


def is_unknown_topic(e: BaseException | KafkaError | None) -> bool:
    return error_code(e) in UNKNOWN_TOPIC


def is_access_denied(e: BaseException | KafkaError | None) -> bool:
    return error_code(e) in ACCESS_DENIED


def is_partition_eof(err: KafkaError | None) -> bool:
    """True for the event a consumer with enable.partition.eof gives at a partition's end."""
    return err is not None and err.code() == KafkaError._PARTITION_EOF


def is_fatal(err: KafkaError | None) -> bool:
    """A client in a fatal state: librdkafka hands the fatal error over as an event of code _FATAL, whose own
    fatal() is False (a static consumer fenced by another with its group.instance.id arrives so)."""
    return err is not None and (bool(err.fatal()) or err.code() == KafkaError._FATAL)


def is_retriable(e: BaseException) -> bool:
    err = kafka_error(e)
    return err is not None and bool(err.retriable())


def unreachable(cluster: Cluster, what: str = "") -> Unreachable:
    detail = f" while {what}" if what else ""
    refused = tls_problem(cluster)  # librdkafka's error says only "transport failure"
    if refused:
        return Unreachable(
            scrub(
                f"cluster '{cluster.name}' ({cluster.shown_bootstrap}) cannot be reached over TLS{detail}: {refused}",
                cluster.secrets(),
            )
        )
    return Unreachable(
        f"cluster '{cluster.name}' ({cluster.shown_bootstrap}) does not answer{detail};"
        " check that its brokers are up and the registry's bootstrap.servers"
    )


@contextlib.contextmanager
def answering(cluster: Cluster, what: str) -> Iterator[None]:
    """The block's reads of `cluster`: one that timed out, or found no broker, is `unreachable`, never an answer."""
    try:
        yield
    except TimeoutError:
        raise unreachable(cluster, what) from None
    except KafkaException as e:
        if is_transport(e):
            raise unreachable(cluster, what) from None
        raise


def describe_exception(e: BaseException, secrets: Iterable[str] = ()) -> tuple[int, str]:
    """A one-line description of an unexpected failure, with secrets removed."""
    err = kafka_error(e)
    if err is not None:
        return errno.EIO, scrub(f"broker error {err.name()}: {err.str()}", secrets)
    text = " ".join(str(e).split()) or type(e).__name__
    return errno.EIO, scrub(f"unexpected {type(e).__name__}: {text}", secrets)
