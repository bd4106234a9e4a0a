"""A Kafka-protocol proxy in front of a cluster (`streamrepl proxy start`): the wire format as the proxy reads it
(wire.py), the listeners and connections (server.py), its counters and metrics (stats.py), and the foreground run of
the command (run.py)."""
