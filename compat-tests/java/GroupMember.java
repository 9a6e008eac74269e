// A long-running group member on the real kafka-clients: subscribe([T]) with group.id=G,
// auto.offset.reset=earliest, manual commits; prints the JSON lines of compat-tests/clients/common.py
// ("record" events) plus "assignment" (the whole assignment after every rebalance callback), "committed"
// and "closed". Commits what it read synchronously in onPartitionsRevoked and at the end. SIGTERM: wakeup(), commit,
// close() (which leaves the group), exit 0.
//
// Usage: java -cp <kafka-clients jars> GroupMember.java <bootstrap> <topic> <group> [--protocol classic|consumer]
//        [--timeout SECONDS]

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
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

    public static void main(String[] argv) throws Exception {
        String bootstrap = argv[0], topic = argv[1], group = argv[2];
        String protocol = "classic";
        double timeout = 60;
        for (int i = 3; i < argv.length; i++) {
            if (argv[i].equals("--protocol")) protocol = argv[++i];
            else if (argv[i].equals("--timeout")) timeout = Double.parseDouble(argv[++i]);
        }
        Properties config = new Properties();
        config.put("bootstrap.servers", bootstrap);
        config.put("group.id", group);
        config.put("group.protocol", protocol);
        config.put("auto.offset.reset", "earliest");
        config.put("enable.auto.commit", "false");
        config.put("key.deserializer", ByteArrayDeserializer.class.getName());
        config.put("value.deserializer", ByteArrayDeserializer.class.getName());
        KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(config);
        TreeSet<Integer> mine = new TreeSet<>();
        Map<TopicPartition, Long> next = new ConcurrentHashMap<>();  // next offset to read, per partition read from
        CountDownLatch closed = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {  // SIGTERM: stop polling, commit, close, exit 0
            consumer.wakeup();
            try {
                closed.await();
            } catch (InterruptedException ignored) {
            }
            Runtime.getRuntime().halt(0);
        }));

        ConsumerRebalanceListener listener = new ConsumerRebalanceListener() {
            void commit(Collection<TopicPartition> parts, String why) {
                Map<TopicPartition, OffsetAndMetadata> offsets = consumedOf(parts, next);
                if (offsets.isEmpty()) return;
                consumer.commitSync(offsets);
                List<String> shown = new ArrayList<>();
                offsets.forEach((tp, om) -> shown.add("\"" + tp.partition() + "\": " + om.offset()));
                emit("{\"event\": \"committed\", \"why\": \"" + why + "\", \"offsets\": {" + String.join(", ", shown)
                        + "}, \"errors\": []}");
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
                show("assign");
            }

            @Override
            public void onPartitionsLost(Collection<TopicPartition> parts) {
                parts.forEach(tp -> mine.remove(tp.partition()));
                show("lost");
            }
        };
        int code = 0;
        long count = 0;
        long deadline = System.nanoTime() + (long) (timeout * 1e9);
        try {
            consumer.subscribe(List.of(topic), listener);
            while (true) {
                if (System.nanoTime() > deadline) {
                    emit("{\"event\": \"error\", \"message\": \"timed out after " + timeout + " s with " + count
                            + " records\"}");
                    code = 2;
                    break;
                }
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    List<String> headers = new ArrayList<>();
                    for (Header h : r.headers()) headers.add("[" + quote(h.key()) + ", " + quote(text(h.value())) + "]");
                    emit("{\"event\": \"record\", \"partition\": " + r.partition() + ", \"offset\": " + r.offset()
                            + ", \"timestamp\": " + r.timestamp() + ", \"timestamp_type\": " + quote(r.timestampType().name)
                            + ", \"key\": " + quote(text(r.key())) + ", \"value\": " + quote(text(r.value()))
                            + ", \"headers\": [" + String.join(", ", headers) + "]}");
                    next.put(new TopicPartition(r.topic(), r.partition()), r.offset() + 1);
                    count++;
                }
            }
        } catch (WakeupException stopping) {
            // SIGTERM
        }
        try {
            Map<TopicPartition, OffsetAndMetadata> positions = consumedOf(consumer.assignment(), next);
            if (!positions.isEmpty()) {
                try {
                    consumer.commitSync(positions);
                } catch (WakeupException late) {  // the wakeup landed outside poll(): it fires once, retry
                    consumer.commitSync(positions);
                }
            }
            emit("{\"event\": \"summary\", \"records\": " + count + "}");
            consumer.close();
            emit("{\"event\": \"closed\"}");
        } finally {
            closed.countDown();
        }
        System.exit(code);
    }
}
