// A long-running group member on the real kafka-clients: subscribe([T]) with group.id=G,
// auto.offset.reset from --reset (default earliest; "error" = "none"), manual commits; prints the JSON lines of
// compat-tests/clients/common.py ("record" events) plus "assignment" (the whole assignment after every rebalance
// callback), "committed" {why, offsets}, "summary" {records} and "closed". Commits what it read synchronously in
// onPartitionsRevoked and at the end. Stops (commit, close() which leaves the group, exit 0) on SIGTERM (via
// wakeup()); after --max-records N records; with --until-end once, after it joined, every partition of the topic
// is at the end offset seen at start ("watermarks_high": endOffsets before subscribing): an assigned one by
// position() (committed, why "end", as soon as it gets there, so that members of one group stopping together see
// each other's progress), any other by the group's committed offset; for a single member: all partitions assigned
// to it and read to the end. --timeout passing, or a client exception (e.g. NoOffsetForPartition with --reset
// none), prints an "error", still commits what it read and closes, exit 2.
//
// --instance-id ID makes it a static member (group.instance.id); --set KEY=VALUE sets any other client property.
// --commit-every N also commits (commitSync) what it read of its assignment after each poll that brought the records
// read to a further multiple of N: a "committed" event (why "every"), or one with the commit's exception in "errors"
// (a rebalance took the partitions meanwhile, the coordinator stayed away past the default API timeout) and it goes on.
//
// Usage: java -cp <kafka-clients jars> GroupMember.java <bootstrap> <topic> <group> [--protocol classic|consumer]
//        [--reset earliest|latest|none] [--max-records N] [--until-end] [--timeout SECONDS] [--instance-id ID]
//        [--commit-every N] [--set KEY=VALUE]...

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class GroupMember {
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

    /** The exit code: the shutdown hook halts with it (SIGTERM: 0; System.exit runs the hook too). */
    static volatile int exitCode = 0;

    static synchronized void emit(String json) {
        System.out.println(json);
        System.out.flush();
    }

    /** The offsets to commit for parts: the next offset after the last record read (position() is not called in
     *  a revocation callback: the consumer-protocol client cannot always determine it there). */
    static Map<TopicPartition, OffsetAndMetadata> consumedOf(Collection<TopicPartition> parts,
                                                            Map<TopicPartition, Long> next) {
        Map<TopicPartition, OffsetAndMetadata> offsets = new TreeMap<>(
                (a, b) -> Integer.compare(a.partition(), b.partition()));
        for (TopicPartition tp : parts) {
            Long offset = next.get(tp);
            if (offset != null) offsets.put(tp, new OffsetAndMetadata(offset));
        }
        return offsets;
    }

    static void showCommitted(Map<TopicPartition, OffsetAndMetadata> offsets, String why) {
        List<String> shown = new ArrayList<>();
        offsets.forEach((tp, om) -> shown.add("\"" + tp.partition() + "\": " + om.offset()));
        emit("{\"event\": \"committed\", \"why\": \"" + why + "\", \"offsets\": {" + String.join(", ", shown)
                + "}, \"errors\": []}");
    }

    /** What is left until deadline, for a blocking call (at least 1 ms: the call then fails with its timeout). */
    static Duration left(long deadline) {
        return Duration.ofNanos(Math.max(1_000_000, deadline - System.nanoTime()));
    }

    /** --until-end: whether every partition of high is at its end offset: an assigned one by position() (committed,
     *  why "end", when it gets there), any other by the group's committed offset. An empty partition always is. */
    static boolean atEnd(KafkaConsumer<byte[], byte[]> consumer, Map<TopicPartition, Long> high,
                         Set<TopicPartition> endCommitted, long deadline) {
        Map<TopicPartition, OffsetAndMetadata> reached = new TreeMap<>(
                (a, b) -> Integer.compare(a.partition(), b.partition()));
        Set<TopicPartition> others = new TreeSet<>((a, b) -> Integer.compare(a.partition(), b.partition()));
        boolean done = true;
        for (Map.Entry<TopicPartition, Long> e : high.entrySet()) {
            TopicPartition tp = e.getKey();
            if (e.getValue() == 0) continue;
            if (!consumer.assignment().contains(tp)) others.add(tp);
            else {
                long position = consumer.position(tp, left(deadline));
                if (position < e.getValue()) done = false;
                else if (!endCommitted.contains(tp)) reached.put(tp, new OffsetAndMetadata(position));
            }
        }
        if (!reached.isEmpty()) {
            consumer.commitSync(reached, left(deadline));
            endCommitted.addAll(reached.keySet());
            showCommitted(reached, "end");
        }
        if (!done || others.isEmpty()) return done;
        Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(others, left(deadline));
        for (TopicPartition tp : others) {
            OffsetAndMetadata om = committed.get(tp);
            if (om == null || om.offset() < high.get(tp)) return false;
        }
        return true;
    }

    public static void main(String[] argv) throws Exception {
        String bootstrap = argv[0], topic = argv[1], group = argv[2];
        String protocol = "classic", reset = "earliest", instanceId = null;
        Properties extra = new Properties();
        double timeout = 60;
        long maxRecords = -1, commitEvery = 0;
        boolean untilEnd = false;
        for (int i = 3; i < argv.length; i++) {
            switch (argv[i]) {
                case "--protocol" -> protocol = argv[++i];
                case "--timeout" -> timeout = Double.parseDouble(argv[++i]);
                case "--reset" -> reset = argv[++i];
                case "--max-records" -> maxRecords = Long.parseLong(argv[++i]);
                case "--until-end" -> untilEnd = true;
                case "--commit-every" -> commitEvery = Long.parseLong(argv[++i]);
                case "--instance-id" -> instanceId = argv[++i];
                case "--set" -> {
                    String[] kv = argv[++i].split("=", 2);
                    extra.put(kv[0], kv[1]);
                }
                default -> throw new IllegalArgumentException("unknown argument " + argv[i]);
            }
        }
        long deadline = System.nanoTime() + (long) (timeout * 1e9);
        Properties config = new Properties();
        config.put("bootstrap.servers", bootstrap);
        config.put("group.id", group);
        config.put("group.protocol", protocol);
        config.put("auto.offset.reset", reset.equals("error") ? "none" : reset);
        config.put("enable.auto.commit", "false");
        if (instanceId != null) config.put("group.instance.id", instanceId);
        config.putAll(extra);
        config.put("key.deserializer", ByteArrayDeserializer.class.getName());
        config.put("value.deserializer", ByteArrayDeserializer.class.getName());
        KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(config);
        TreeSet<Integer> mine = new TreeSet<>();
        AtomicBoolean joined = new AtomicBoolean();  // an onPartitionsAssigned call came (possibly with nothing)
        Map<TopicPartition, Long> next = new ConcurrentHashMap<>();  // next offset to read, per partition read from
        CountDownLatch closed = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {  // SIGTERM: stop polling, commit, close, exit 0
            consumer.wakeup();
            try {
                closed.await();
            } catch (InterruptedException ignored) {
            }
            Runtime.getRuntime().halt(exitCode);
        }));

        ConsumerRebalanceListener listener = new ConsumerRebalanceListener() {
            void commit(Collection<TopicPartition> parts, String why) {
                Map<TopicPartition, OffsetAndMetadata> offsets = consumedOf(parts, next);
                if (offsets.isEmpty()) return;
                consumer.commitSync(offsets);
                showCommitted(offsets, why);
            }

            void show(String after) {
                emit("{\"event\": \"assignment\", \"after\": \"" + after + "\", \"partitions\": " + mine + "}");
            }

            @Override
            public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                commit(parts, "revoke");
                parts.forEach(tp -> mine.remove(tp.partition()));
                show("revoke");
            }

            @Override
            public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                parts.forEach(tp -> mine.add(tp.partition()));
                joined.set(true);
                show("assign");
            }

            @Override
            public void onPartitionsLost(Collection<TopicPartition> parts) {
                parts.forEach(tp -> mine.remove(tp.partition()));
                show("lost");
            }
        };
        long count = 0;
        Set<TopicPartition> endCommitted = new TreeSet<>((a, b) -> Integer.compare(a.partition(), b.partition()));
        try {
            Map<TopicPartition, Long> high = null;
            if (untilEnd) {
                List<TopicPartition> all = new ArrayList<>();
                for (PartitionInfo p : consumer.partitionsFor(topic, left(deadline))) {
                    all.add(new TopicPartition(topic, p.partition()));
                }
                high = new TreeMap<>((a, b) -> Integer.compare(a.partition(), b.partition()));
                high.putAll(consumer.endOffsets(all, left(deadline)));
                List<String> shown = new ArrayList<>();
                high.forEach((tp, o) -> shown.add("\"" + tp.partition() + "\": " + o));
                emit("{\"event\": \"watermarks_high\", \"high\": {" + String.join(", ", shown) + "}}");
            }
            consumer.subscribe(List.of(topic), listener);
            poll:
            while (true) {
                if (System.nanoTime() > deadline) {
                    emit("{\"event\": \"error\", \"message\": \"timed out after " + timeout + " s with " + count
                            + " records\"}");
                    exitCode = 2;
                    break;
                }
                if (high != null && joined.get() && atEnd(consumer, high, endCommitted, deadline)) break;
                long before = count;
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    List<String> headers = new ArrayList<>();
                    for (Header h : r.headers()) headers.add("[" + quote(h.key()) + ", " + quote(text(h.value())) + "]");
                    emit("{\"event\": \"record\", \"partition\": " + r.partition() + ", \"offset\": " + r.offset()
                            + ", \"timestamp\": " + r.timestamp() + ", \"timestamp_type\": " + quote(r.timestampType().name)
                            + ", \"key\": " + quote(text(r.key())) + ", \"value\": " + quote(text(r.value()))
                            + ", \"headers\": [" + String.join(", ", headers) + "]}");
                    next.put(new TopicPartition(r.topic(), r.partition()), r.offset() + 1);
                    count++;
                    if (count == maxRecords) break poll;
                }
                if (commitEvery > 0 && count / commitEvery > before / commitEvery) {
                    Map<TopicPartition, OffsetAndMetadata> offsets = consumedOf(consumer.assignment(), next);
                    try {
                        consumer.commitSync(offsets);
                        showCommitted(offsets, "every");
                    } catch (WakeupException stopping) {
                        throw stopping;
                    } catch (KafkaException e) {
                        emit("{\"event\": \"committed\", \"why\": \"every\", \"offsets\": {}, \"errors\": ["
                                + quote(e.getClass().getSimpleName() + ": " + e.getMessage()) + "]}");
                    }
                }
            }
        } catch (WakeupException stopping) {
            // SIGTERM
        } catch (Exception e) {
            emit("{\"event\": \"error\", \"name\": " + quote(e.getClass().getSimpleName()) + ", \"message\": "
                    + quote(String.valueOf(e.getMessage())) + "}");
            exitCode = 2;
        }
        try {
            Map<TopicPartition, OffsetAndMetadata> positions = consumedOf(consumer.assignment(), next);
            if (!positions.isEmpty()) {
                try {
                    consumer.commitSync(positions);
                } catch (WakeupException late) {  // the wakeup landed outside poll(): it fires once, retry
                    consumer.commitSync(positions);
                }
                showCommitted(positions, "close");
            }
            emit("{\"event\": \"summary\", \"records\": " + count + "}");
            consumer.close();
            emit("{\"event\": \"closed\"}");
        } catch (Exception e) {  // (told, not lost: the shutdown hook halts with exitCode once this block ends)
            emit("{\"event\": \"error\", \"name\": " + quote(e.getClass().getSimpleName()) + ", \"message\": "
                    + quote(String.valueOf(e.getMessage())) + ", \"while\": \"closing\"}");
            exitCode = 2;
        } finally {
            closed.countDown();
        }
        System.exit(exitCode);
    }
}
