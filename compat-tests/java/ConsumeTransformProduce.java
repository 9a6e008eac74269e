// Exactly-once consume-transform-produce as Kafka Streams and hand-written Java applications run it (KIP-447): a
// read_committed consumer in a group and a transactional producer that, per poll, sends the transformed records and
// sendOffsetsToTransaction(offsets, consumer.groupMetadata()) (the group's generation / member epoch and member id
// travel with the offsets), then commits.
//
// Usage: java -cp <kafka-clients jars> ConsumeTransformProduce.java BOOTSTRAP IN OUT GROUP TRANSACTIONAL_ID COUNT
//            PROTOCOL
// PROTOCOL: classic or consumer (KIP-848, group.protocol=consumer). Stops once COUNT records were consumed (or after
// 60 s). Output: one JSON object per line: "summary" (consumed, transactions), or "error" (class and message).

import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class ConsumeTransformProduce {
    public static void main(String[] argv) {
        String bootstrap = argv[0], in = argv[1], out = argv[2], group = argv[3], tid = argv[4];
        int count = Integer.parseInt(argv[5]);
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("group.id", group);
        c.put("group.protocol", argv[6]);
        c.put("isolation.level", "read_committed");
        c.put("enable.auto.commit", "false");
        c.put("auto.offset.reset", "earliest");
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("transactional.id", tid);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        int consumed = 0, transactions = 0;
        long deadline = System.currentTimeMillis() + 60_000;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c);
             KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            producer.initTransactions();
            consumer.subscribe(List.of(in));
            while (consumed < count && System.currentTimeMillis() < deadline) {
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(500));
                if (records.isEmpty()) continue;
                producer.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (ConsumerRecord<String, String> r : records) {
                    producer.send(new ProducerRecord<>(out, r.partition(), r.key(), "out-" + r.value()));
                    offsets.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                    consumed++;
                }
                producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                producer.commitTransaction();
                transactions++;
            }
            System.out.println("{\"event\":\"summary\",\"consumed\":" + consumed + ",\"transactions\":" + transactions
                    + "}");
        } catch (Exception e) {
            System.out.println("{\"event\":\"error\",\"name\":\"" + e.getClass().getSimpleName() + "\",\"message\":\""
                    + String.valueOf(e.getMessage()).replace("\\", "\\\\").replace("\"", "'") + "\"}");
        }
    }
}
