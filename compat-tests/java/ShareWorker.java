// A share-group worker on the real kafka-clients (KIP-932 KafkaShareConsumer): subscribe([T]) in share group G,
// explicit acknowledgement (share.acknowledgement.mode=explicit); every record is printed as a JSON line
// {"event": "record", "partition", "offset", "delivery_count", "value"} and ACCEPTed (RELEASEd when its value is
// --release-value V), committed with commitSync after each poll. Stops after --max-records N records (counting
// every delivery), or once no record came for --idle SECONDS after at least one did, or at --timeout SECONDS (then
// prints an "error" and exits 2); prints {"event": "closed"} after close().
//
// Usage: java -cp <kafka-clients jars> ShareWorker.java <bootstrap> <topic> <group> [--max-records N]
//        [--idle SECONDS] [--timeout SECONDS] [--release-value V] [--set KEY=VALUE]...

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Properties;

import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class ShareWorker {
    static String quote(String s) {
        if (s == null) return "null";
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }

    public static void main(String[] args) {
        String bootstrap = args[0], topic = args[1], group = args[2];
        long maxRecords = Long.MAX_VALUE;
        double idle = 5, timeout = 60;
        String release = null;
        Properties props = new Properties();
        for (int i = 3; i < args.length; i += 2) {
            switch (args[i]) {
                case "--max-records" -> maxRecords = Long.parseLong(args[i + 1]);
                case "--idle" -> idle = Double.parseDouble(args[i + 1]);
                case "--timeout" -> timeout = Double.parseDouble(args[i + 1]);
                case "--release-value" -> release = args[i + 1];
                case "--set" -> {
                    String[] kv = args[i + 1].split("=", 2);
                    props.put(kv[0], kv[1]);
                }
                default -> throw new IllegalArgumentException(args[i]);
            }
        }
        props.put("bootstrap.servers", bootstrap);
        props.put("group.id", group);
        props.put("share.acknowledgement.mode", "explicit");
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        long seen = 0;
        long start = System.nanoTime(), last = 0;
        int code = 0;
        try (KafkaShareConsumer<byte[], byte[]> consumer = new KafkaShareConsumer<>(props)) {
            consumer.subscribe(List.of(topic));
            while (seen < maxRecords) {
                long now = System.nanoTime();
                if ((now - start) / 1e9 > timeout) {
                    System.out.println("{\"event\": \"error\", \"error\": \"timeout\"}");
                    code = 2;
                    break;
                }
                if (last != 0 && (now - last) / 1e9 > idle) break;
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(500));
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    String value = r.value() == null ? null : new String(r.value(), StandardCharsets.UTF_8);
                    System.out.println("{\"event\": \"record\", \"partition\": " + r.partition() + ", \"offset\": "
                            + r.offset() + ", \"delivery_count\": " + r.deliveryCount().orElse((short) -1)
                            + ", \"value\": " + quote(value) + "}");
                    consumer.acknowledge(r, value != null && value.equals(release)
                            ? AcknowledgeType.RELEASE : AcknowledgeType.ACCEPT);
                    seen++;
                    last = System.nanoTime();
                }
                if (!records.isEmpty()) consumer.commitSync();
            }
        }
        System.out.println("{\"event\": \"closed\"}");
        System.out.flush();
        System.exit(code);
    }
}
