"""streamrepl: MapR-Streams-style stream replication for Kafka-compatible clusters."""

__version__ = "0.1.0"
