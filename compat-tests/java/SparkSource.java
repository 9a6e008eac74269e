// What Spark's Kafka source (connector/kafka-0-10-sql) does to a topic, on the real kafka-clients API.
//
// Driver (KafkaOffsetReaderAdmin): Admin.describeTopics -> partitions; Admin.listOffsets with
// OffsetSpec.earliest / latest / forTimestamp and ListOffsetsOptions(<isolation.level of the driver's params>,
// READ_UNCOMMITTED by default): under read_committed "latest" is the last stable offset.
// Executors (KafkaDataConsumer / InternalKafkaConsumer): one KafkaConsumer per topic-partition with
// group.id=<uuid>-executor, auto.offset.reset=none, enable.auto.commit=false, byte-array deserializers,
// the user's isolation.level, assign(); every fetch is seek -> poll -> position, then seekToBeginning+position
// and seekToEnd+position (the available range; its end is the LSO under read_committed). fetchRecord's checks
// with failOnDataLoss=true: a record below the asked offset is an IllegalStateException, an empty poll outside
// [earliest, latest) is data loss, an empty poll whose position did not move is a TimeoutException. An offset
// with no record for the consumer (a transaction marker; an aborted record under read_committed) is "invisible":
// a record above the asked offset while asked >= earliest, or an empty poll whose position moved, makes Spark
// go on from that record / position, without data loss. Spark always does that; here (--holes) a skip is
// reported as an error by default under read_uncommitted (offsets must be dense on a topic without
// transactions) and as a "skipped" line under read_committed or with --holes skip.
//
// Usage: java -cp <kafka-clients jars> SparkSource.java --bootstrap H:P --topic T
//            [--starting earliest|timestamp:<ms>] [--starting-timestamp-strategy error|latest]
//            [--poll-timeout-ms 10000] [--holes error|skip] [--kafka.<setting> <value> ...]
// --starting-timestamp-strategy is Spark's startingOffsetsByTimestampStrategy: a partition with no offset for the
// timestamp (ListOffsets answers -1: no record at or after it, e.g. an empty vgroup) fails the driver with Spark's
// IllegalArgumentException message under error (Spark's default), or starts at the partition's latest offset.
// --kafka.<setting> is Spark's kafka.-prefixed source option: the client setting (security.protocol, sasl.*,
// ssl.*, isolation.level, ...) goes, without the prefix, into the driver's Admin and every executor's consumer,
// under the settings Spark fixes itself (KafkaSourceProvider's ConfigUpdater sets those over the user's).
// --kafka.isolation.level read_committed is Spark's option for reading committed records only.
// Output: one JSON object per line: describe, offsets (per partition), range, record, skipped (from, to: the
// invisible offsets [from, to) of a partition), summary; on failure an "error" line (kind data_loss | hole |
// illegal_state | timeout | no_offset_matched) and exit code 1.

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.ListIterator;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.UUID;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class SparkSource {
    static final long UNKNOWN_OFFSET = -2L;
    static long pollTimeoutMs = 10_000;
    static boolean holesAreErrors = true;

    static final class Failure extends RuntimeException {
        final String kind;
        final TopicPartition tp;
        final long offset;

        Failure(String kind, TopicPartition tp, long offset, String message) {
            super(message);
            this.kind = kind;
            this.tp = tp;
            this.offset = offset;
        }
    }

    public static void main(String[] argv) throws Exception {
        Map<String, String> args = new HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) args.put(argv[i].replaceFirst("^--", ""), argv[i + 1]);
        String bootstrap = args.get("bootstrap");
        String topic = args.get("topic");
        String starting = args.getOrDefault("starting", "earliest");
        String timestampStrategy = args.getOrDefault("starting-timestamp-strategy", "error");
        if (!timestampStrategy.equals("error") && !timestampStrategy.equals("latest")) {
            throw new IllegalArgumentException("--starting-timestamp-strategy error|latest, not " + timestampStrategy);
        }
        pollTimeoutMs = Long.parseLong(args.getOrDefault("poll-timeout-ms", "10000"));
        Map<String, Object> specified = new HashMap<>();
        for (Map.Entry<String, String> e : args.entrySet()) {
            if (e.getKey().startsWith("kafka.")) specified.put(e.getKey().substring("kafka.".length()), e.getValue());
        }

        // KafkaSourceProvider.kafkaParamsForDriver; the Admin is created from the same map.
        Map<String, Object> driver = new HashMap<>(specified);
        driver.put("bootstrap.servers", bootstrap);
        driver.put("key.deserializer", ByteArrayDeserializer.class.getName());
        driver.put("value.deserializer", ByteArrayDeserializer.class.getName());
        driver.put("auto.offset.reset", "earliest");
        driver.put("enable.auto.commit", "false");
        driver.put("max.poll.records", "1");
        driver.put("receive.buffer.bytes", "65536");
        driver.put("default.api.timeout.ms", "60000");
        driver.put("request.timeout.ms", "30000");

        // KafkaOffsetReaderAdmin.isolationLevel; the executors get the same setting through `specified`.
        IsolationLevel isolation = IsolationLevel.valueOf(
                String.valueOf(driver.getOrDefault("isolation.level", "read_uncommitted")).toUpperCase(Locale.ROOT));
        holesAreErrors = !args.getOrDefault("holes", isolation == IsolationLevel.READ_COMMITTED ? "skip" : "error")
                .equals("skip");

        Map<Integer, long[]> ranges = new TreeMap<>();
        try (Admin admin = Admin.create(driver)) {
            TopicDescription td = admin.describeTopics(List.of(topic)).allTopicNames().get(60, TimeUnit.SECONDS).get(topic);
            List<String> parts = new ArrayList<>();
            List<TopicPartition> tps = new ArrayList<>();
            for (TopicPartitionInfo p : td.partitions()) {
                String leader = p.leader() == null ? "null" : json(p.leader().host() + ":" + p.leader().port());
                parts.add("{\"partition\":" + p.partition() + ",\"leader\":" + leader + "}");
                tps.add(new TopicPartition(topic, p.partition()));
            }
            println("{\"event\":\"describe\",\"topic\":" + json(td.name()) + ",\"topic_id\":" + json(String.valueOf(td.topicId()))
                    + ",\"partitions\":[" + String.join(",", parts) + "]}");

            ListOffsetsOptions options = new ListOffsetsOptions(isolation);
            Map<TopicPartition, Long> earliest = listOffsets(admin, tps, OffsetSpec.earliest(), options);
            Map<TopicPartition, Long> latest = listOffsets(admin, tps, OffsetSpec.latest(), options);
            Map<TopicPartition, Long> byTime = null;
            long ts = -1;
            if (starting.startsWith("timestamp:")) {
                ts = Long.parseLong(starting.substring("timestamp:".length()));
                byTime = listOffsets(admin, tps, OffsetSpec.forTimestamp(ts), options);
            }
            for (TopicPartition tp : tps) {
                long from = earliest.get(tp);
                String extra = "";
                if (byTime != null) {
                    long o = byTime.get(tp);
                    extra = ",\"timestamp\":" + ts + ",\"timestamp_offset\":" + o;
                    from = o == -1 ? latest.get(tp) : o; // no match: startingOffsetsByTimestampStrategy=latest
                }
                println("{\"event\":\"offsets\",\"partition\":" + tp.partition() + ",\"earliest\":" + earliest.get(tp)
                        + ",\"latest\":" + latest.get(tp) + extra + "}");
                if (byTime != null && byTime.get(tp) == -1 && timestampStrategy.equals("error")) {
                    // KafkaOffsetReaderAdmin.readTimestampOffsets: Spark's IllegalArgumentException
                    fail(new Failure("no_offset_matched", tp, ts, "No offset matched from request of topic-partition "
                            + tp + " and timestamp " + ts + "."));
                }
                if (from > latest.get(tp)) {
                    fail(new Failure("illegal_state", tp, from, "starting offset " + from + " > ending offset " + latest.get(tp)));
                }
                ranges.put(tp.partition(), new long[] {from, latest.get(tp)});
            }
        } catch (Failure f) {
            fail(f);
        }

        // Executors: one consumer per partition, each reads [from, until) record by record.
        String groupId = "spark-kafka-source-" + UUID.randomUUID() + "-executor";
        long total = 0;
        int polls = 0;
        Map<Integer, Long> perPartition = new LinkedHashMap<>();
        for (Map.Entry<Integer, long[]> e : ranges.entrySet()) {
            TopicPartition tp = new TopicPartition(topic, e.getKey());
            long from = e.getValue()[0], until = e.getValue()[1];
            println("{\"event\":\"range\",\"partition\":" + tp.partition() + ",\"from\":" + from + ",\"until\":" + until + "}");
            long n = 0;
            try (Reader reader = new Reader(tp, bootstrap, groupId, specified)) {
                long offset = from;
                while (offset < until) {
                    ConsumerRecord<byte[], byte[]> r = reader.get(offset, until);
                    if (r == null) break;
                    printRecord(r);
                    n++;
                    offset = r.offset() + 1;
                }
                polls += reader.polls;
            } catch (Failure f) {
                fail(f);
            }
            perPartition.put(tp.partition(), n);
            total += n;
        }
        StringBuilder pp = new StringBuilder();
        for (Map.Entry<Integer, Long> e : perPartition.entrySet()) {
            if (pp.length() > 0) pp.append(',');
            pp.append('"').append(e.getKey()).append("\":").append(e.getValue());
        }
        println("{\"event\":\"summary\",\"records\":" + total + ",\"polls\":" + polls + ",\"per_partition\":{" + pp + "}}");
    }

    static Map<TopicPartition, Long> listOffsets(Admin admin, List<TopicPartition> tps, OffsetSpec spec,
                                                 ListOffsetsOptions options) throws Exception {
        Map<TopicPartition, OffsetSpec> request = new HashMap<>();
        for (TopicPartition tp : tps) request.put(tp, spec);
        Map<TopicPartition, Long> out = new HashMap<>();
        for (Map.Entry<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> e
                : admin.listOffsets(request, options).all().get(60, TimeUnit.SECONDS).entrySet()) {
            out.put(e.getKey(), e.getValue().offset());
        }
        return out;
    }

    /** InternalKafkaConsumer + KafkaDataConsumer.get/fetchRecord (failOnDataLoss = true) for one partition. */
    static final class Reader implements AutoCloseable {
        final TopicPartition tp;
        final KafkaConsumer<byte[], byte[]> consumer;
        ListIterator<ConsumerRecord<byte[], byte[]>> records = Collections.emptyListIterator();
        long nextOffsetInFetchedData = UNKNOWN_OFFSET;
        long offsetAfterPoll = UNKNOWN_OFFSET;
        long rangeEarliest = UNKNOWN_OFFSET;
        int polls = 0;

        Reader(TopicPartition tp, String bootstrap, String groupId, Map<String, Object> specified) {
            // KafkaSourceProvider.kafkaParamsForExecutors
            Map<String, Object> p = new HashMap<>(specified);
            p.put("bootstrap.servers", bootstrap);
            p.put("key.deserializer", ByteArrayDeserializer.class.getName());
            p.put("value.deserializer", ByteArrayDeserializer.class.getName());
            p.put("auto.offset.reset", "none");
            p.put("group.id", groupId);
            p.put("enable.auto.commit", "false");
            p.put("receive.buffer.bytes", "65536");
            p.put("default.api.timeout.ms", "60000");
            this.tp = tp;
            this.consumer = new KafkaConsumer<>(p);
            consumer.assign(List.of(tp));
        }

        long[] availableOffsetRange() {
            consumer.seekToBeginning(Set.of(tp));
            long earliest = consumer.position(tp);
            consumer.seekToEnd(Set.of(tp));
            long latest = consumer.position(tp);
            return new long[] {earliest, latest};
        }

        void fetchData(long offset) {
            consumer.seek(tp, offset);
            ConsumerRecords<byte[], byte[]> polled = consumer.poll(Duration.ofMillis(pollTimeoutMs));
            polls++;
            List<ConsumerRecord<byte[], byte[]>> r = polled.records(tp);
            long after = consumer.position(tp);
            long[] range = availableOffsetRange();
            records = r.listIterator();
            nextOffsetInFetchedData = UNKNOWN_OFFSET;
            offsetAfterPoll = after;
            rangeEarliest = range[0];
            if (r.isEmpty()) {
                if (offset < range[0] || offset >= range[1]) {
                    throw new Failure("data_loss", tp, offset, "offset " + offset + " out of range [" + range[0] + ", "
                            + range[1] + ") (OffsetOutOfRangeException -> failOnDataLoss)");
                } else if (offset == after) {
                    throw new Failure("timeout", tp, offset, "Cannot fetch record for offset " + offset + " in "
                            + pollTimeoutMs + " milliseconds");
                }
            }
        }

        /** The record at {@code offset}, or null when [offset, until) holds only invisible records. */
        ConsumerRecord<byte[], byte[]> get(long offset, long until) {
            long toFetch = offset;
            while (true) {
                Object fetched = fetchRecord(toFetch, until);
                if (fetched instanceof ConsumerRecord) {
                    @SuppressWarnings("unchecked")
                    ConsumerRecord<byte[], byte[]> r = (ConsumerRecord<byte[], byte[]>) fetched;
                    return r;
                }
                long next = (Long) fetched;
                skipped(toFetch, next);
                toFetch = next;
                if (toFetch >= until) {
                    reset();
                    return null;
                }
            }
        }

        /** Spark goes on from {@code to}: the offsets [from, to) are invisible (no record for this consumer). */
        void skipped(long from, long to) {
            if (holesAreErrors) {
                throw new Failure("hole", tp, from, "asked offset " + from + " (earliest " + rangeEarliest
                        + ") but the next visible offset is " + to);
            }
            println("{\"event\":\"skipped\",\"partition\":" + tp.partition() + ",\"from\":" + from + ",\"to\":" + to + "}");
        }

        /** A ConsumerRecord, or the next offset to fetch (Long) when the asked one is invisible. */
        Object fetchRecord(long offset, long until) {
            if (offset != nextOffsetInFetchedData) {
                fetchData(offset);
            } else if (!records.hasNext()) {
                if (offset < offsetAfterPoll) {
                    long next = offsetAfterPoll;
                    reset();
                    return next;
                }
                fetchData(offset);
            }
            if (!records.hasNext()) {
                if (offset > offsetAfterPoll) {
                    throw new Failure("illegal_state", tp, offset, "seek to " + offset + " and poll but the offset was reset to "
                            + offsetAfterPoll);
                }
                return offsetAfterPoll;
            }
            ConsumerRecord<byte[], byte[]> record = records.next();
            nextOffsetInFetchedData = record.offset() + 1;
            if (record.offset() > offset) {
                if (rangeEarliest <= offset) {
                    // [offset, record.offset) is invisible: the next call returns this record.
                    records.previous();
                    nextOffsetInFetchedData = record.offset();
                    return record.offset();
                }
                throw new Failure("data_loss", tp, offset, "Cannot fetch offset range [" + offset + ", " + record.offset()
                        + "): records aged out (earliest " + rangeEarliest + ")");
            } else if (record.offset() < offset) {
                throw new Failure("illegal_state", tp, offset, "Tried to fetch " + offset + " but the returned record offset was "
                        + record.offset());
            }
            return record;
        }

        void reset() {
            records = Collections.emptyListIterator();
            nextOffsetInFetchedData = UNKNOWN_OFFSET;
            offsetAfterPoll = UNKNOWN_OFFSET;
        }

        @Override
        public void close() {
            consumer.close(Duration.ofSeconds(10));
        }
    }

    static void printRecord(ConsumerRecord<byte[], byte[]> r) {
        StringBuilder h = new StringBuilder();
        for (Header header : r.headers()) {
            if (h.length() > 0) h.append(',');
            h.append('[').append(json(header.key())).append(',').append(json(text(header.value()))).append(']');
        }
        println("{\"event\":\"record\",\"partition\":" + r.partition() + ",\"offset\":" + r.offset() + ",\"timestamp\":"
                + r.timestamp() + ",\"timestamp_type\":" + json(r.timestampType().name) + ",\"key\":" + json(text(r.key()))
                + ",\"value\":" + json(text(r.value())) + ",\"headers\":[" + h + "]}");
    }

    static void fail(Failure f) {
        println("{\"event\":\"error\",\"kind\":" + json(f.kind) + ",\"partition\":" + (f.tp == null ? -1 : f.tp.partition())
                + ",\"offset\":" + f.offset + ",\"message\":" + json(f.getMessage()) + "}");
        f.printStackTrace();
        System.exit(1);
    }

    static String text(byte[] b) {
        return b == null ? null : new String(b, StandardCharsets.UTF_8);
    }

    static void println(String line) {
        System.out.println(line);
        System.out.flush();
    }

    static String json(String s) {
        if (s == null) return "null";
        StringBuilder out = new StringBuilder("\"");
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"': out.append("\\\""); break;
                case '\\': out.append("\\\\"); break;
                case '\n': out.append("\\n"); break;
                case '\r': out.append("\\r"); break;
                case '\t': out.append("\\t"); break;
                default:
                    if (c < 0x20) out.append(String.format("\\u%04x", (int) c));
                    else out.append(c);
            }
        }
        return out.append('"').toString();
    }
}
