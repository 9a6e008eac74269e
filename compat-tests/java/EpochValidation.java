// KIP-320 on the real kafka-clients: a consumer positioned with a leader epoch validates that position with
// OffsetForLeaderEpoch before it fetches, and detects a log truncated under it. For each TOPIC:OFFSET:EPOCH argument a fresh
// KafkaConsumer (manual assign of partition 0, auto.offset.reset=none, no commits) seeks to
// OffsetAndMetadata(OFFSET, Optional.of(EPOCH)) and polls up to the high watermark or --timeout; it prints
// {"event": "case", "topic", "offset", "epoch", "records": [offsets read], "position": position() at the end or null,
//  "truncation": null | {"divergent": offset or null, "divergent_epoch": epoch or null}}
// where a LogTruncationException (the broker's epoch ends below the position, or it holds no such epoch) stops the
// case. Any other failure is an "error" {name, message} with exit 2.
//
// Usage: java -cp <kafka-clients jars> EpochValidation.java <bootstrap> TOPIC:OFFSET:EPOCH... [--timeout SECONDS]

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.LogTruncationException;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class EpochValidation {
    static String quote(String s) {
        if (s == null) return "null";
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n") + "\"";
    }

    public static void main(String[] argv) {
        String bootstrap = argv[0];
        long timeoutMs = 30_000;
        List<String> cases = new ArrayList<>();
        for (int i = 1; i < argv.length; i++) {
            if (argv[i].equals("--timeout")) timeoutMs = Long.parseLong(argv[++i]) * 1000;
            else cases.add(argv[i]);
        }
        try {
            for (String c : cases) {
                String[] parts = c.split(":");
                run(bootstrap, parts[0], Long.parseLong(parts[1]), Integer.parseInt(parts[2]), timeoutMs);
            }
        } catch (Exception e) {
            System.out.println("{\"event\":\"error\",\"name\":" + quote(e.getClass().getSimpleName())
                               + ",\"message\":" + quote(String.valueOf(e.getMessage())) + "}");
            System.exit(2);
        }
    }

    static void run(String bootstrap, String topic, long offset, int epoch, long timeoutMs) {
        Properties config = new Properties();
        config.put("bootstrap.servers", bootstrap);
        config.put("auto.offset.reset", "none");
        config.put("enable.auto.commit", "false");
        config.put("key.deserializer", ByteArrayDeserializer.class.getName());
        config.put("value.deserializer", ByteArrayDeserializer.class.getName());
        TopicPartition tp = new TopicPartition(topic, 0);
        List<Long> read = new ArrayList<>();
        String truncation = "null";
        Long position = null;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(config)) {
            consumer.assign(List.of(tp));
            long end = consumer.endOffsets(List.of(tp)).get(tp);
            consumer.seek(tp, new OffsetAndMetadata(offset, Optional.of(epoch), ""));
            long deadline = System.currentTimeMillis() + timeoutMs;
            try {
                while (System.currentTimeMillis() < deadline) {
                    for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) read.add(r.offset());
                    position = consumer.position(tp);
                    if (position >= end) break;
                }
            } catch (LogTruncationException e) {
                Map<TopicPartition, OffsetAndMetadata> divergent = e.divergentOffsets();
                OffsetAndMetadata at = divergent.get(tp);
                truncation = "{\"divergent\":" + (at == null ? "null" : at.offset()) + ",\"divergent_epoch\":"
                             + (at == null ? "null" : at.leaderEpoch().map(String::valueOf).orElse("null")) + "}";
                position = null;
            }
        }
        System.out.println("{\"event\":\"case\",\"topic\":" + quote(topic) + ",\"offset\":" + offset + ",\"epoch\":" + epoch + ",\"records\":"
                           + read + ",\"position\":" + position + ",\"truncation\":" + truncation + "}");
    }
}
