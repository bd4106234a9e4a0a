"""Bulk work: copystream and diffstreams, and the Spark data source for streams.

Both jobs plan one work item per (topic, partition) and run tasks that open their own
confluent-kafka clients, so records never pass through the JVM: small jobs run the tasks in
threads of this process, large ones (or any given -master) as Spark tasks. Nothing here imports pyspark at module level (except
`spark_source`, which is only ever loaded inside a Spark session); the CLI's `--help` stays
free of it.

    inprocess     which engine a job runs on, and running its tasks in threads here
    spark         the Spark session of one job, and running a job so that it can be cancelled
    lock          the copy lock kept in the destination stream's metadata
    reader        the records of one source partition range, in batches
    copystream    planning the copy, then copying one partition
    copyresult    what one copystream run did, and its summary line
    diffstreams   planning the comparison, then comparing one partition
    progress      the progress bar both jobs show on a terminal
    access        who may read or copy a stream (both jobs and the data source check it)
    spark_source  `spark.read.format("streamrepl")`
"""
