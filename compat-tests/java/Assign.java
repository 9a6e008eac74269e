// A reader on the real kafka-clients with manual assign(): KafkaConsumer with a fresh group.id that never commits
// (enable.auto.commit=false), byte-array deserializers, auto.offset.reset from --reset ("error" = "none").
// partitionsFor -> "metadata" {brokers (the partition leaders), partitions}; beginningOffsets/endOffsets ->
// "watermarks" {partition, low, high}; assign(all partitions); seek per --start (beginning: seekToBeginning,
// end: seekToEnd, <offset>: seek, ts:<ms>: offsetsForTimes -> "start" {partition, offset|null}, no match:
// seekToEnd); poll -> "record" events (the JSON lines of compat-tests/clients/common.py); "summary" {records,
// positions}. Without --follow it reads every partition up to the high watermark seen at start (records at or
// past it are not printed); --follow N prints "ready" {positions} after assign, seek and the first position()
// calls, then polls until N records arrived in total. Exits 0. An InvalidOffsetException (OffsetOutOfRange or
// NoOffsetForPartition, e.g. --reset none and a start below the log start) is an "error" {name, message} with
// exit 0; any other failure, or --timeout passing, is an "error" with exit 2.
//
// Usage: java -cp <kafka-clients jars> Assign.java <bootstrap> <topic> [--start beginning|end|<offset>|ts:<ms>]
//        [--reset earliest|latest|none] [--follow N] [--timeout SECONDS]

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeSet;
import java.util.UUID;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.InvalidOffsetException;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class Assign {
    static String quote(String s) {
        if (s == null) return "null";
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"' -> b.append("\\\"");
                case '\\' -> b.append("\\\\");
                case '\n' -> b.append("\\n");
                case '\r' -> b.append("\\r");
                case '\t' -> b.append("\\t");
                default -> {
                    if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
                    else b.append(c);
                }
            }
        }
        return b.append('"').toString();
    }

    static String text(byte[] data) {
        return data == null ? null : new String(data, StandardCharsets.UTF_8);
    }

    static void emit(String json) {
        System.out.println(json);
        System.out.flush();
    }

    static void emitError(Throwable e) {
        emit("{\"event\": \"error\", \"name\": " + quote(e.getClass().getSimpleName()) + ", \"message\": "
                + quote(String.valueOf(e.getMessage())) + "}");
    }

    static final class Timeout extends RuntimeException {
        Timeout(String message) {
            super(message);
        }
    }

    static final Duration POLL = Duration.ofMillis(500);
    static long deadline;
    static double timeout = 30;

    /** What is left of --timeout, for a blocking call; a Timeout once it has passed. */
    static Duration left(String doing) {
        long nanos = deadline - System.nanoTime();
        if (nanos <= 0) throw new Timeout("timed out after " + timeout + " s " + doing);
        return Duration.ofNanos(nanos);
    }

    static Duration shortest(Duration a, Duration b) {
        return a.compareTo(b) <= 0 ? a : b;
    }

    static String positions(KafkaConsumer<byte[], byte[]> consumer, List<TopicPartition> tps) {
        List<String> shown = new ArrayList<>();
        for (TopicPartition tp : tps) {
            shown.add("\"" + tp.partition() + "\": " + consumer.position(tp, left("in position()")));
        }
        return "{" + String.join(", ", shown) + "}";
    }

    public static void main(String[] argv) {
        String bootstrap = argv[0], topic = argv[1];
        String start = "beginning", reset = "earliest";
        long follow = -1;
        for (int i = 2; i < argv.length; i++) {
            switch (argv[i]) {
                case "--start" -> start = argv[++i];
                case "--reset" -> reset = argv[++i];
                case "--follow" -> follow = Long.parseLong(argv[++i]);
                case "--timeout" -> timeout = Double.parseDouble(argv[++i]);
                default -> throw new IllegalArgumentException("unknown argument " + argv[i]);
            }
        }
        deadline = System.nanoTime() + (long) (timeout * 1e9);
        Properties config = new Properties();
        config.put("bootstrap.servers", bootstrap);
        config.put("group.id", "walgate-compat-" + UUID.randomUUID());
        config.put("enable.auto.commit", "false");
        config.put("auto.offset.reset", reset.equals("error") ? "none" : reset);
        config.put("key.deserializer", ByteArrayDeserializer.class.getName());
        config.put("value.deserializer", ByteArrayDeserializer.class.getName());
        int code = 0;
        KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(config);
        try {
            List<PartitionInfo> infos = consumer.partitionsFor(topic, left("in partitionsFor()"));
            if (infos == null || infos.isEmpty()) throw new IllegalStateException("no partitions for " + topic);
            TreeSet<String> brokers = new TreeSet<>();
            TreeSet<Integer> ids = new TreeSet<>();
            for (PartitionInfo p : infos) {
                ids.add(p.partition());
                Node leader = p.leader();
                if (leader != null && !leader.isEmpty()) brokers.add(quote(leader.host() + ":" + leader.port()));
            }
            emit("{\"event\": \"metadata\", \"brokers\": [" + String.join(", ", brokers) + "], \"partitions\": "
                    + ids + "}");
            List<TopicPartition> tps = new ArrayList<>();
            for (int p : ids) tps.add(new TopicPartition(topic, p));
            Map<TopicPartition, Long> low = consumer.beginningOffsets(tps, left("in beginningOffsets()"));
            Map<TopicPartition, Long> high = consumer.endOffsets(tps, left("in endOffsets()"));
            for (TopicPartition tp : tps) {
                emit("{\"event\": \"watermarks\", \"partition\": " + tp.partition() + ", \"low\": " + low.get(tp)
                        + ", \"high\": " + high.get(tp) + "}");
            }
            consumer.assign(tps);
            try {
                if (start.equals("beginning")) consumer.seekToBeginning(tps);
                else if (start.equals("end")) consumer.seekToEnd(tps);
                else if (start.startsWith("ts:")) {
                    Map<TopicPartition, Long> query = new HashMap<>();
                    for (TopicPartition tp : tps) query.put(tp, Long.parseLong(start.substring(3)));
                    Map<TopicPartition, OffsetAndTimestamp> found =
                            consumer.offsetsForTimes(query, left("in offsetsForTimes()"));
                    for (TopicPartition tp : tps) {
                        OffsetAndTimestamp at = found.get(tp);
                        emit("{\"event\": \"start\", \"partition\": " + tp.partition() + ", \"offset\": "
                                + (at == null ? "null" : at.offset()) + "}");
                        if (at == null) consumer.seekToEnd(List.of(tp));
                        else consumer.seek(tp, at.offset());
                    }
                } else {
                    long offset = Long.parseLong(start);
                    for (TopicPartition tp : tps) consumer.seek(tp, offset);
                }
                if (follow >= 0) emit("{\"event\": \"ready\", \"positions\": " + positions(consumer, tps) + "}");
                long count = 0;
                while (follow >= 0 ? count < follow : unfinished(consumer, tps, high)) {
                    Duration wait = shortest(POLL, left("with " + count + " records"));
                    for (ConsumerRecord<byte[], byte[]> r : consumer.poll(wait).records(topic)) {
                        if (follow < 0 && r.offset() >= high.get(new TopicPartition(topic, r.partition()))) continue;
                        List<String> headers = new ArrayList<>();
                        for (Header h : r.headers()) {
                            headers.add("[" + quote(h.key()) + ", " + quote(text(h.value())) + "]");
                        }
                        emit("{\"event\": \"record\", \"partition\": " + r.partition() + ", \"offset\": " + r.offset()
                                + ", \"timestamp\": " + r.timestamp()
                                + ", \"timestamp_type\": " + quote(r.timestampType().name)
                                + ", \"key\": " + quote(text(r.key())) + ", \"value\": " + quote(text(r.value()))
                                + ", \"headers\": [" + String.join(", ", headers) + "]}");
                        count++;
                    }
                }
                emit("{\"event\": \"summary\", \"records\": " + count + ", \"positions\": " + positions(consumer, tps)
                        + "}");
            } catch (InvalidOffsetException e) {  // OffsetOutOfRangeException, NoOffsetForPartitionException
                emitError(e);
            }
        } catch (Exception e) {
            emitError(e);
            code = 2;
        } finally {
            consumer.close(Duration.ofSeconds(5));
        }
        System.exit(code);
    }

    /** Whether a partition's position is still below the high watermark seen at start. */
    static boolean unfinished(KafkaConsumer<byte[], byte[]> consumer, List<TopicPartition> tps,
                              Map<TopicPartition, Long> high) {
        for (TopicPartition tp : tps) {
            if (consumer.position(tp, left("in position()")) < high.get(tp)) return true;
        }
        return false;
    }
}
