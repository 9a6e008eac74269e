// A share-group member on the real kafka-clients (KIP-932 KafkaShareConsumer) that acquires records and never
// acknowledges them: subscribe([T]) in share group G (share.acknowledgement.mode=explicit), poll until a batch
// comes, print each record as a JSON line {"event": "record", "partition", "offset", "delivery_count", "value"}, then
// {"event": "holding"}, then sleep (heartbeats go on, nothing is acknowledged) until --hold SECONDS have passed or it
// is killed: the test kills it (kill -9) to show what happens to records a dead member held. At --timeout SECONDS
// without a record it prints an "error" and exits 2.
//
// Usage: java -cp <kafka-clients jars> ShareHolder.java <bootstrap> <topic> <group> [--hold SECONDS]
//        [--timeout SECONDS]

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class ShareHolder {
    public static void main(String[] args) throws InterruptedException {
        String bootstrap = args[0], topic = args[1], group = args[2];
        double hold = 120, timeout = 60;
        for (int i = 3; i < args.length; i += 2) {
            switch (args[i]) {
                case "--hold" -> hold = Double.parseDouble(args[i + 1]);
                case "--timeout" -> timeout = Double.parseDouble(args[i + 1]);
                default -> throw new IllegalArgumentException(args[i]);
            }
        }
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("group.id", group);
        props.put("share.acknowledgement.mode", "explicit");
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        KafkaShareConsumer<byte[], byte[]> consumer = new KafkaShareConsumer<>(props);
        consumer.subscribe(List.of(topic));
        long start = System.nanoTime();
        while (true) {
            if ((System.nanoTime() - start) / 1e9 > timeout) {
                System.out.println("{\"event\": \"error\", \"error\": \"timeout\"}");
                System.out.flush();
                System.exit(2);
            }
            ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(500));
            if (records.isEmpty()) continue;
            for (ConsumerRecord<byte[], byte[]> r : records) {
                String value = r.value() == null ? "" : new String(r.value(), StandardCharsets.UTF_8);
                System.out.println("{\"event\": \"record\", \"partition\": " + r.partition() + ", \"offset\": "
                        + r.offset() + ", \"delivery_count\": " + r.deliveryCount().orElse((short) -1)
                        + ", \"value\": \"" + value + "\"}");
            }
            break;
        }
        System.out.println("{\"event\": \"holding\"}");
        System.out.flush();
        Thread.sleep((long) (hold * 1000));  // the background thread heartbeats; nothing is acknowledged
        System.exit(0);
    }
}
