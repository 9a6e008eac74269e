/* The benchmark's C producer: librdkafka with nothing per record but a pointer to one shared value, so the client is
 * not the bound of the small-record produce rows.
 *
 * usage: cproduce BOOTSTRAP TOPIC PARTITIONS COUNT SIZE ACKS [QUEUE [IDEMPOTENT]]
 * Fetches the topic's metadata and writes one 1-byte record to each partition (every one acknowledged: a connection to
 * each partition's leader, and the producer id assigned, before the timed run; librdkafka asks for the id again on a
 * 500 ms timer when no broker was up at its first try, which took 0.45 s of some factor-1 samples of
 * bench/replicated.py), prints "ready" and waits for a line on stdin (so several processes start together),
 * then sends COUNT values of SIZE bytes round-robin over partitions 0..PARTITIONS-1 with the settings of
 * bench/produce.py's Python producer (linger.ms=5, batch.size=1 MiB, idempotence with acks=all unless IDEMPOTENT is 0;
 * at most QUEUE records queued or in flight, queue.buffering.max.messages, default 1,000,000), waits for every acknowledgement and prints
 * "acknowledged seconds p50 p99": the seconds from the go line to the last acknowledgement, and the median and 99th
 * percentile of the acknowledged records' latencies (from the produce call that queued a record to its delivery
 * report: the client's queue included, so with a full queue the latency is QUEUE / the rate, Little's law).
 * Built by bench/cclient.py. */
#include <librdkafka/rdkafka.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long long acknowledged;
static int warmed; /* warm-up records acknowledged (their opaque: -1) */
static double *queued_at; /* per record index: when its produce call returned */
static double *latencies; /* per acknowledged record, in delivery order */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void set(rd_kafka_conf_t *conf, const char *key, const char *value) {
    char err[512];
    if (rd_kafka_conf_set(conf, key, value, err, sizeof err) != RD_KAFKA_CONF_OK) {
        fprintf(stderr, "cproduce: %s=%s: %s\n", key, value, err);
        exit(2);
    }
}

static void delivered(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
    if ((intptr_t)m->_private < 0)
        warmed += !m->err;
    else if (!m->err)
        latencies[acknowledged++] = now() - queued_at[(long long)(intptr_t)m->_private];
}

static int ascending(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double quantile(double q) {
    if (acknowledged == 0)
        return 0.0;
    long long i = (long long)(q * acknowledged);
    return latencies[i < acknowledged ? i : acknowledged - 1];
}

int main(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: cproduce BOOTSTRAP TOPIC PARTITIONS COUNT SIZE ACKS [QUEUE]\n");
        return 2;
    }
    int partitions = atoi(argv[3]);
    long long count = atoll(argv[4]);
    size_t size = (size_t)atoll(argv[5]);
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    set(conf, "bootstrap.servers", argv[1]);
    set(conf, "acks", argv[6]);
    set(conf, "linger.ms", "5");
    set(conf, "batch.size", "1048576");
    set(conf, "queue.buffering.max.messages", argc > 7 ? argv[7] : "1000000");
    int idempotent = strcmp(argv[6], "all") == 0 && !(argc > 8 && strcmp(argv[8], "0") == 0);
    set(conf, "enable.idempotence", idempotent ? "true" : "false");
    rd_kafka_conf_set_dr_msg_cb(conf, delivered);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (!rk) {
        fprintf(stderr, "cproduce: %s\n", err);
        return 2;
    }
    rd_kafka_topic_t *topic = rd_kafka_topic_new(rk, argv[2], NULL);
    const struct rd_kafka_metadata *md;
    if (rd_kafka_metadata(rk, 0, topic, &md, 30000)) {
        fprintf(stderr, "cproduce: no metadata for %s\n", argv[2]);
        return 2;
    }
    rd_kafka_metadata_destroy(md);
    for (int p = 0; p < partitions; p++) {
        if (rd_kafka_produce(topic, p, RD_KAFKA_MSG_F_COPY, "w", 1, NULL, 0, (void *)(intptr_t)-1) == -1) {
            fprintf(stderr, "cproduce: warm-up: %s\n", rd_kafka_err2str(rd_kafka_last_error()));
            return 2;
        }
    }
    rd_kafka_flush(rk, 30000);
    if (warmed < partitions) {
        fprintf(stderr, "cproduce: warm-up: %d of %d records acknowledged\n", warmed, partitions);
        return 2;
    }
    queued_at = malloc(sizeof(double) * (count > 0 ? count : 1));
    latencies = malloc(sizeof(double) * (count > 0 ? count : 1));
    char *value = malloc(size);
    memset(value, 'x', size);
    printf("ready\n");
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin))
        return 2;
    double start = now();
    for (long long i = 0; i < count; i++) {
        while (rd_kafka_produce(topic, (int32_t)(i % partitions), 0, value, size, NULL, 0, (void *)(intptr_t)i) == -1) {
            if (rd_kafka_last_error() != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
                fprintf(stderr, "cproduce: %s\n", rd_kafka_err2str(rd_kafka_last_error()));
                return 2;
            }
            rd_kafka_poll(rk, 10);
        }
        queued_at[i] = now();
        if (i % 1000 == 0)
            rd_kafka_poll(rk, 0);
    }
    rd_kafka_flush(rk, 120000);
    double seconds = now() - start;
    qsort(latencies, (size_t)acknowledged, sizeof(double), ascending);
    printf("%lld %.6f %.6f %.6f\n", acknowledged, seconds, quantile(0.5), quantile(0.99));
    free(value);
    free(queued_at);
    free(latencies);
    rd_kafka_topic_destroy(topic);
    rd_kafka_destroy(rk);
    return acknowledged < count;
}
