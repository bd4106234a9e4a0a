/* The yardstick of bench/run.py: the fastest relay this machine and this client library can run.
 *
 * librdkafka consume -> produce in C, no Python: every record of partitions 0..P-1 of the source topic is
 * produced into the same partition of the destination topic, in the order it was read (so in offset order per
 * partition), with its key, value, timestamp and headers, plus one origin header (what the gateway adds).
 * Exits when N records are relayed and every one is acknowledged; prints the records and the seconds taken from
 * its start of work.
 *
 * With RELAY_WAIT=1 in the environment it starts the way bench/run.py times every relay: it makes its clients and
 * reads the metadata of both topics (its connections made, as a running gateway's are), prints "ready", and waits
 * for a line on stdin before it assigns the source; once all is acknowledged it prints its figures and waits for
 * stdin to close before it exits (bench/run.py reads its CPU time from /proc while it is still there).
 *
 * Built by bench/setup against the confluent-kafka wheel's own librdkafka, with the header of Debian's
 * librdkafka-dev (an older version: only API present in both is used here).
 *
 * usage: relay SRC_BOOTSTRAP DST_BOOTSTRAP SRC_TOPIC DST_TOPIC PARTITIONS RECORDS ORIGIN [c.NAME=VALUE|p.NAME=VALUE]...
 * (the optional c./p. properties override the consumer's and the producer's settings: for trying the yardstick's
 * own tuning). With RELAY_STATS=PREFIX in the environment both clients write librdkafka's statistics every 500 ms
 * (and a last time after the flush) to PREFIX-consumer.jsonl / PREFIX-producer.jsonl (bench/probes/request_mix.py).
 */
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BATCH 10000
#define ORIGIN_HEADER "streamrepl.origin"

static long delivery_errors = 0;
static const char *stats_prefix = NULL;

static int on_stats(rd_kafka_t *rk, char *json, size_t len, void *opaque) {
    (void)opaque;
    char path[1024];
    snprintf(path, sizeof path, "%s-%s.jsonl", stats_prefix, rd_kafka_type(rk) == RD_KAFKA_PRODUCER ? "producer" : "consumer");
    FILE *f = fopen(path, "a");
    if (f) {
        fwrite(json, 1, len, f);
        fputc('\n', f);
        fclose(f);
    }
    return 0;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *what, const char *why) {
    fprintf(stderr, "relay: %s: %s\n", what, why);
    exit(2);
}

static void set(rd_kafka_conf_t *conf, const char *name, const char *value) {
    char err[512];
    if (rd_kafka_conf_set(conf, name, value, err, sizeof err) != RD_KAFKA_CONF_OK)
        die(name, err);
}

static void set_overrides(rd_kafka_conf_t *conf, char which, int argc, char **argv) {
    for (int i = 8; i < argc; i++) {
        char *eq = strchr(argv[i], '=');
        if (argv[i][0] != which || argv[i][1] != '.' || !eq)
            continue;
        *eq = 0;
        set(conf, argv[i] + 2, eq + 1);
        *eq = '=';
    }
}

static void with_stats(rd_kafka_conf_t *conf) {
    if (!stats_prefix)
        return;
    set(conf, "statistics.interval.ms", "500");
    rd_kafka_conf_set_stats_cb(conf, on_stats);
}

/* The metadata of one topic, read through the client: its bootstrap and leader connections made before the clock. */
static void warm(rd_kafka_t *rk, const char *topic) {
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    const struct rd_kafka_metadata *md;
    rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 0, rkt, &md, 30000);
    if (e)
        die("metadata", rd_kafka_err2str(e));
    rd_kafka_metadata_destroy(md);
    rd_kafka_topic_destroy(rkt);
}

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
    (void)rk;
    (void)opaque;
    if (m->err) {
        if (delivery_errors++ == 0)
            fprintf(stderr, "relay: delivery failed: %s\n", rd_kafka_err2str(m->err));
    }
}

int main(int argc, char **argv) {
    if (argc < 8) {
        fprintf(stderr, "usage: %s SRC_BOOTSTRAP DST_BOOTSTRAP SRC_TOPIC DST_TOPIC PARTITIONS RECORDS ORIGIN\n",
                argv[0]);
        return 2;
    }
    double t0 = now();
    int wait = getenv("RELAY_WAIT") != NULL;
    const char *dst_topic = argv[4], *origin = argv[7];
    int partitions = atoi(argv[5]);
    long want = atol(argv[6]);
    size_t origin_len = strlen(origin);
    char err[512];

    stats_prefix = getenv("RELAY_STATS");
    rd_kafka_conf_t *cc = rd_kafka_conf_new();
    with_stats(cc);
    set(cc, "bootstrap.servers", argv[1]);
    set(cc, "group.id", "bench-c-relay");
    set(cc, "enable.auto.commit", "false");
    set(cc, "auto.offset.reset", "earliest");
    set(cc, "fetch.wait.max.ms", "100");
    // The gateway's prefetch: with librdkafka's default (100,000 records) this relay was bound by it at 100 B
    // (113k/s against 166-201k/s with it, same run), and no yardstick.
    set(cc, "queued.min.messages", "200000");
    // And the gateway's fetch backoff once that prefetch is full: with librdkafka's 1 s the consumer stopped
    // fetching for a second whenever it was ahead, and this relay ran at 125-193k/s against 153-348k/s with it.
    set(cc, "fetch.queue.backoff.ms", "10");
    set(cc, "log_level", "3");
    set_overrides(cc, 'c', argc, argv);
    rd_kafka_t *consumer = rd_kafka_new(RD_KAFKA_CONSUMER, cc, err, sizeof err);
    if (!consumer)
        die("consumer", err);

    rd_kafka_conf_t *pc = rd_kafka_conf_new();
    with_stats(pc);
    set(pc, "bootstrap.servers", argv[2]);
    set(pc, "linger.ms", "5");
    set(pc, "queue.buffering.max.messages", "1000000");
    set(pc, "queue.buffering.max.kbytes", "1048576");
    set(pc, "batch.num.messages", "10000");
    set(pc, "log_level", "3");
    set_overrides(pc, 'p', argc, argv);
    rd_kafka_conf_set_dr_msg_cb(pc, on_delivery);
    rd_kafka_t *producer = rd_kafka_new(RD_KAFKA_PRODUCER, pc, err, sizeof err);
    if (!producer)
        die("producer", err);

    if (wait) {
        warm(consumer, argv[3]);
        warm(producer, dst_topic);
        printf("ready\n");
        fflush(stdout);
        char line[64];
        if (!fgets(line, sizeof line, stdin))
            die("start", "stdin closed before the go");
        t0 = now();
    }

    rd_kafka_topic_partition_list_t *tps = rd_kafka_topic_partition_list_new(partitions);
    for (int i = 0; i < partitions; i++)
        rd_kafka_topic_partition_list_add(tps, argv[3], i)->offset = RD_KAFKA_OFFSET_BEGINNING;
    rd_kafka_resp_err_t e = rd_kafka_assign(consumer, tps);
    rd_kafka_topic_partition_list_destroy(tps);
    if (e)
        die("assign", rd_kafka_err2str(e));
    rd_kafka_queue_t *queue = rd_kafka_queue_get_consumer(consumer);

    rd_kafka_message_t *msgs[BATCH];
    long done = 0;
    while (done < want) {
        ssize_t got = rd_kafka_consume_batch_queue(queue, 500, msgs, BATCH);
        for (ssize_t i = 0; i < got; i++) {
            rd_kafka_message_t *m = msgs[i];
            if (!m->err && done < want) {
                rd_kafka_headers_t *src_headers = NULL, *headers;
                if (rd_kafka_message_headers(m, &src_headers) == RD_KAFKA_RESP_ERR_NO_ERROR)
                    headers = rd_kafka_headers_copy(src_headers);
                else
                    headers = rd_kafka_headers_new(1);
                rd_kafka_header_add(headers, ORIGIN_HEADER, -1, origin, (ssize_t)origin_len);
                rd_kafka_timestamp_type_t ts_type;
                int64_t ts = rd_kafka_message_timestamp(m, &ts_type);
                for (;;) {
                    e = rd_kafka_producev(producer, RD_KAFKA_V_TOPIC(dst_topic), RD_KAFKA_V_PARTITION(m->partition),
                                          RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                          RD_KAFKA_V_KEY(m->key, m->key_len), RD_KAFKA_V_VALUE(m->payload, m->len),
                                          RD_KAFKA_V_TIMESTAMP(ts > 0 ? ts : 0), RD_KAFKA_V_HEADERS(headers),
                                          RD_KAFKA_V_END);
                    if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL)
                        break;
                    rd_kafka_poll(producer, 10);
                }
                if (e) {  // on success the producer owns the headers
                    rd_kafka_headers_destroy(headers);
                    die("produce", rd_kafka_err2str(e));
                }
                done++;
            }
            rd_kafka_message_destroy(m);
        }
        rd_kafka_poll(producer, 0);
        if (stats_prefix)  // a consumer's statistics are served by its main queue, not by the batch consume
            rd_kafka_poll(consumer, 0);
    }
    if (rd_kafka_flush(producer, 120000))
        die("flush", "records not acknowledged within 120 s");
    double seconds = now() - t0;
    if (wait) {
        printf("%ld %.6f\n", done, seconds);
        fflush(stdout);
        char line[64];
        while (fgets(line, sizeof line, stdin))
            ;
    }
    for (int i = 0; stats_prefix && i < 6; i++) {  // one more snapshot of both, after the last record
        rd_kafka_poll(producer, 100);
        rd_kafka_poll(consumer, 0);
    }
    rd_kafka_queue_destroy(queue);
    rd_kafka_consumer_close(consumer);
    rd_kafka_destroy(consumer);
    rd_kafka_destroy(producer);
    if (delivery_errors)
        die("delivery", "some records were not delivered");
    if (!wait)
        printf("%ld %.6f\n", done, seconds);
    return 0;
}
