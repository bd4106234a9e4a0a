"""Replication into a destination cluster by gateways, split the way MirrorMaker 2 splits its work.

- links, plan: which links and replica partitions the stream metadata asks for; replica topics created
- membership: the slot group that spreads the partitions over the live gateways
- watcher: the thread that follows the metadata and publishes each new plan
- units: the replica partitions this gateway applies now (acquire, follow a plan, drop, fail)
- feeds, quiet, lanes: the source consumers and the feeds they read; quiet feeds, their ends watched
- guard: whether a replica still matches its source and its own end (verdicts, never actions)
- writes: the producer, its deliveries and the restarts of the writes
- mover: the hot loop's work: source records through the guard to their offsets in the replicas, throttles
- stats, metrics: the counters the loop keeps, and the Prometheus endpoint that reads them
- reports: the gateway's and its partitions' state in the status topic
- cursor_sync: committed consumer-group cursors carried to the replicas
- gateway: the Gateway that composes these; process: `gateway start` in the foreground (signals, exit)
- live: which gateways run (`cluster gateway list`)
"""
