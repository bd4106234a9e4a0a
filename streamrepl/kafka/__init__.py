"""Everything streamrepl does with Kafka clients, and the only package that imports confluent_kafka.

Timeouts, error meanings and secret handling are decided here once: a broker that does not answer
gives a clear error within seconds, never a hang, and no error text carries a registry secret.

    clients   consumer, producer and admin client factories for a registry cluster
    errors    what an error means (transport, access denied, unknown topic...), one-line descriptions
    admin     topics: list, create (also shared and compacted ones, racing other creators), delete, grow, configure
    reading   partitions read to their end within a deadline; real ends; first and last records
    groups    consumer groups: list, committed offsets, commit, describe

Callers write `from . import kafka` and `kafka.consumer(...)`, `kafka.true_ends(...)`: the names
below are the package's interface; the modules only sort them. The confluent_kafka types callers
need (to build a TopicPartition, to annotate a Consumer, to compare an error code) come from here
too, so that nothing else imports confluent_kafka.
"""

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    OFFSET_STORED,
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from . import errors
from .admin import (
    COMPACTED,
    add_partitions,
    create_compacted_topic,
    create_shared_topic,
    create_topics,
    delete_topics,
    ping,
    set_topic_configs,
    topics,
)
from .brokers import (
    busy_fetch_wait_ms,
    honours_static_membership,
    leaves_group_safely,
    quiet_end_check_ms,
    watermark_is_exact,
)
from .clients import REQUEST_TIMEOUT, admin_client, client_config, consumer, producer
from .errors import (
    ACCESS_DENIED,
    TRANSPORT,
    UNCERTAIN_DELIVERY,
    UNKNOWN_TOPIC,
    answering,
    describe_exception,
    error_code,
    is_access_denied,
    is_all_brokers_down,
    is_fatal,
    is_partition_eof,
    is_retriable,
    is_transport,
    is_unknown_topic,
    kafka_error,
    scrub,
    unreachable,
)
from .groups import (
    INTERNAL_GROUP_PREFIX,
    GroupAdmin,
    GroupInfo,
    Member,
    Offsets,
    commit_offsets,
    committed_offsets,
    describe_groups,
    group_offset,
    list_groups,
    settled,
)
from .reading import (
    LATEST,
    ends_and_records,
    first_record,
    high_mark,
    last_record,
    partition_ends,
    partitions_of,
    read_partition,
    tails,
    topic_ends,
    true_end,
    true_ends,
    watermarks,
)

__all__ = [
    "ends_and_records",
    "watermark_is_exact",
    "honours_static_membership",
    "busy_fetch_wait_ms",
    "leaves_group_safely",
    "quiet_end_check_ms",
    "ACCESS_DENIED",
    "COMPACTED",
    "INTERNAL_GROUP_PREFIX",
    "OFFSET_BEGINNING",
    "OFFSET_END",
    "LATEST",
    "OFFSET_INVALID",
    "OFFSET_STORED",
    "REQUEST_TIMEOUT",
    "TRANSPORT",
    "UNCERTAIN_DELIVERY",
    "UNKNOWN_TOPIC",
    "AdminClient",
    "Consumer",
    "ConsumerGroupTopicPartitions",
    "GroupAdmin",
    "GroupInfo",
    "KafkaError",
    "KafkaException",
    "Member",
    "Message",
    "Offsets",
    "Producer",
    "TopicPartition",
    "add_partitions",
    "admin_client",
    "client_config",
    "commit_offsets",
    "committed_offsets",
    "consumer",
    "create_compacted_topic",
    "create_shared_topic",
    "create_topics",
    "delete_topics",
    "answering",
    "describe_exception",
    "describe_groups",
    "error_code",
    "errors",
    "first_record",
    "high_mark",
    "group_offset",
    "is_access_denied",
    "is_fatal",
    "is_partition_eof",
    "is_retriable",
    "is_all_brokers_down",
    "is_transport",
    "is_unknown_topic",
    "kafka_error",
    "last_record",
    "list_groups",
    "partition_ends",
    "partitions_of",
    "ping",
    "producer",
    "read_partition",
    "scrub",
    "set_topic_configs",
    "settled",
    "tails",
    "topic_ends",
    "topics",
    "true_end",
    "true_ends",
    "unreachable",
    "watermarks",
]
