// An exactly-once consume-transform-produce application that survives its transaction coordinator's failover, written
// as Kafka's documentation says such an application handles errors (KafkaProducer's javadoc; KIP-1050's categories):
// - ProducerFencedException / InvalidProducerEpochException (application-recoverable): this producer is done; close
//   it, make a new one with the same transactional.id (initTransactions bumps the epoch and completes or aborts what
//   the old one left), and rewind the consumer to the group's committed offsets;
// - any other KafkaException of a transaction (abortable: TransactionAbortableException, a TimeoutException of the
//   coordinator being away, ...): abortTransaction (when the producer cannot, it is replaced as above), rewind, retry.
// Per poll: the transformed records ("out-" + value, same key and partition) and sendOffsetsToTransaction(offsets,
// consumer.groupMetadata()) (KIP-447), then commitTransaction. A read_committed consumer, enable.auto.commit=false.
//
// Usage: java -cp <kafka-clients jars> ExactlyOnceLoop BOOTSTRAP IN OUT GROUP TRANSACTIONAL_ID COUNT PACE_MS
//            DEADLINE_S
// Stops once the group's committed offsets of IN add up to COUNT (or after DEADLINE_S). Output: one JSON object per
// line: "committed" (records so far) after each commit, "recovered" (what failed, how it was handled) after each
// failure, "summary" (transactions, recovered) at the end, or "error" (class and message) when it gave up.

import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InvalidProducerEpochException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class ExactlyOnceLoop {
    static String bootstrap, tid;

    /** Client properties: {@code bootstrap.servers} and the name-value pairs {@code settings}. */
    static Properties properties(String... settings) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        for (int i = 0; i < settings.length; i += 2) p.put(settings[i], settings[i + 1]);
        return p;
    }

    static KafkaProducer<String, String> producer() {
        KafkaProducer<String, String> producer = new KafkaProducer<>(properties(
                "transactional.id", tid, "transaction.timeout.ms", "20000", "max.block.ms", "20000",
                "delivery.timeout.ms", "30000", "request.timeout.ms", "10000",
                "key.serializer", StringSerializer.class.getName(),
                "value.serializer", StringSerializer.class.getName()));
        try {
            producer.initTransactions();
        } catch (RuntimeException e) {
            producer.close(Duration.ZERO);
            throw e;
        }
        return producer;
    }

    /** The group's committed offsets of the consumer's partitions (read as stable: KIP-447), summed. */
    static long committed(KafkaConsumer<String, String> consumer) {
        long sum = 0;
        for (OffsetAndMetadata o : consumer.committed(consumer.assignment(), Duration.ofSeconds(20)).values()) {
            sum += o == null ? 0 : o.offset();
        }
        return sum;
    }

    /** Every assigned partition back to the group's committed offset (its beginning when there is none). */
    static void rewind(KafkaConsumer<String, String> consumer) {
        Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(consumer.assignment(),
                Duration.ofSeconds(20));
        for (TopicPartition tp : consumer.assignment()) {
            OffsetAndMetadata o = committed.get(tp);
            if (o == null) consumer.seekToBeginning(Set.of(tp));
            else consumer.seek(tp, o.offset());
        }
    }

    static String json(String s) {
        return String.valueOf(s).replace("\\", "\\\\").replace("\"", "'").replaceAll("\\p{Cntrl}", " ");
    }

    static void recovered(Exception e, String how) {
        System.out.println("{\"event\":\"recovered\",\"name\":\"" + e.getClass().getSimpleName() + "\",\"how\":\""
                + how + "\",\"message\":\"" + json(e.getMessage()) + "\"}");
    }

    public static void main(String[] argv) throws InterruptedException {
        bootstrap = argv[0];
        String in = argv[1], out = argv[2], group = argv[3];
        tid = argv[4];
        long count = Long.parseLong(argv[5]), paceMs = Long.parseLong(argv[6]);
        long deadline = System.currentTimeMillis() + 1000 * Long.parseLong(argv[7]);
        Properties c = properties("group.id", group, "isolation.level", "read_committed",
                "enable.auto.commit", "false", "auto.offset.reset", "earliest", "max.poll.records", "10",
                "key.deserializer", StringDeserializer.class.getName(),
                "value.deserializer", StringDeserializer.class.getName());
        int transactions = 0, recoveries = 0;
        KafkaProducer<String, String> producer = null;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
            consumer.subscribe(List.of(in));
            while (System.currentTimeMillis() < deadline) {
                try {
                    if (producer == null) producer = producer();
                    ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(500));
                    if (records.isEmpty()) {
                        if (!consumer.assignment().isEmpty() && committed(consumer) >= count) break;
                        continue;
                    }
                    producer.beginTransaction();
                    Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                    for (ConsumerRecord<String, String> r : records) {
                        producer.send(new ProducerRecord<>(out, r.partition(), r.key(), "out-" + r.value()));
                        offsets.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                    }
                    producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                    producer.commitTransaction();
                    transactions++;
                    System.out.println("{\"event\":\"committed\",\"transactions\":" + transactions + "}");
                    Thread.sleep(paceMs);
                } catch (ProducerFencedException | InvalidProducerEpochException e) {
                    recoveries++;
                    recovered(e, "new producer");
                    producer = replaced(producer);
                    rewindOrRetry(consumer, deadline);
                } catch (KafkaException e) {
                    recoveries++;
                    try {
                        if (producer != null) producer.abortTransaction();
                        recovered(e, "abort");
                    } catch (RuntimeException abortFailed) {  // (fatal for this producer, timed out, or a commit pending)
                        recovered(e, "abort failed (" + abortFailed.getClass().getSimpleName() + "): new producer");
                        producer = replaced(producer);
                    }
                    rewindOrRetry(consumer, deadline);
                }
            }
            System.out.println("{\"event\":\"summary\",\"transactions\":" + transactions + ",\"recovered\":"
                    + recoveries + ",\"committed\":" + committed(consumer) + "}");
        } catch (Exception e) {
            System.out.println("{\"event\":\"error\",\"name\":\"" + e.getClass().getSimpleName() + "\",\"message\":\""
                    + json(e.getMessage()) + "\"}");
        } finally {
            if (producer != null) producer.close(Duration.ofSeconds(5));
        }
    }

    static KafkaProducer<String, String> replaced(KafkaProducer<String, String> producer) {
        if (producer != null) producer.close(Duration.ofSeconds(5));
        return null;  // (the loop makes the next one, retrying its initTransactions while the coordinator moves)
    }

    /** rewind, asked again while the group's coordinator is moving (never a poll before it: the records after the
     * committed offsets would be skipped). */
    static void rewindOrRetry(KafkaConsumer<String, String> consumer, long deadline) {
        while (true) {
            try {
                rewind(consumer);
                return;
            } catch (KafkaException e) {
                if (System.currentTimeMillis() > deadline) throw e;
                recovered(e, "rewind failed: asked again");
            }
        }
    }
}
