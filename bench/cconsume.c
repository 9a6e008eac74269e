/* The benchmark's C consumer: librdkafka with nothing per record but counting, so the client is not the bound.
 *
 * usage: cconsume BOOTSTRAP TOPIC PARTITIONS EXPECTED [TIMEOUT_S [KEY=VALUE ...]]
 * KEY=VALUE: more client settings (e.g. security.protocol=SSL, ssl.ca.location=...). Assigns the comma-separated PARTITIONS (e.g. 0,1,2,3) from offset 0, reads until EXPECTED records arrived (or the timeout), and
 * prints "records value_bytes seconds" on one line; the clock starts at the first record, so connecting is not
 * part of the rate. Built by bench/cclient.py with `cc -O2 ... -lrdkafka`. */
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void set(rd_kafka_conf_t *conf, const char *key, const char *value) {
    char err[512];
    if (rd_kafka_conf_set(conf, key, value, err, sizeof err) != RD_KAFKA_CONF_OK) {
        fprintf(stderr, "cconsume: %s=%s: %s\n", key, value, err);
        exit(2);
    }
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: cconsume BOOTSTRAP TOPIC PARTITIONS EXPECTED [TIMEOUT_S [KEY=VALUE ...]]\n");
        return 2;
    }
    long long expected = atoll(argv[4]);
    double timeout = argc > 5 ? atof(argv[5]) : 120.0;
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    set(conf, "bootstrap.servers", argv[1]);
    set(conf, "group.id", "bench-c");
    set(conf, "enable.auto.commit", "false");
    set(conf, "fetch.max.bytes", "67108864");
    set(conf, "max.partition.fetch.bytes", "16777216");
    set(conf, "queued.max.messages.kbytes", "262144");
    set(conf, "fetch.queue.backoff.ms", "10"); /* as bench/produce.py FETCH_CONF */
    for (int i = 6; i < argc; i++) {
        char *eq = strchr(argv[i], '=');
        if (!eq) {
            fprintf(stderr, "cconsume: %s: expected KEY=VALUE\n", argv[i]);
            return 2;
        }
        *eq = '\0';
        set(conf, argv[i], eq + 1);
    }
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
    if (!rk) {
        fprintf(stderr, "cconsume: %s\n", err);
        return 2;
    }
    rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(4);
    for (char *p = argv[3]; *p; p += strcspn(p, ",") + (p[strcspn(p, ",")] == ','))
        rd_kafka_topic_partition_list_add(parts, argv[2], atoi(p))->offset = 0;
    rd_kafka_resp_err_t e = rd_kafka_assign(rk, parts);
    rd_kafka_topic_partition_list_destroy(parts);
    if (e) {
        fprintf(stderr, "cconsume: assign: %s\n", rd_kafka_err2str(e));
        return 2;
    }
    rd_kafka_queue_t *queue = rd_kafka_queue_get_consumer(rk);
    rd_kafka_message_t *batch[10000];
    long long records = 0, bytes = 0;
    double start = 0, deadline = now() + timeout;
    while (records < expected && now() < deadline) {
        /* no more than the records still expected: a batch call returns once it has its size or after the 1 s
         * timeout, so a larger last batch would add up to a second to the read */
        long long left = expected - records;
        ssize_t n = rd_kafka_consume_batch_queue(queue, 1000, batch, left < 10000 ? (size_t)left : 10000);
        for (ssize_t i = 0; i < n; i++) {
            if (!batch[i]->err) {
                if (!start)
                    start = now();
                records++;
                bytes += batch[i]->len;
            } else if (batch[i]->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
                fprintf(stderr, "cconsume: %s\n", rd_kafka_message_errstr(batch[i]));
            }
            rd_kafka_message_destroy(batch[i]);
        }
    }
    double seconds = start ? now() - start : 0;
    printf("%lld %lld %.6f\n", records, bytes, seconds);
    rd_kafka_queue_destroy(queue);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return records < expected;
}
