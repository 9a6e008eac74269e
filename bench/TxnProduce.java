// Transactional produce throughput of one kafka-clients KafkaProducer (bench/transactions.py runs it).
//
// Usage: java -cp <kafka-clients jars> TxnProduce.java BOOTSTRAP TOPIC COUNT TXN_RECORDS SIZE
// Sends COUNT values of SIZE bytes in transactions of TXN_RECORDS (acks=all, idempotent, linger.ms=5), each
// committed, and prints one JSON line: {"records_per_s": ...}.

import java.util.Properties;
import java.util.UUID;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class TxnProduce {
    public static void main(String[] argv) {
        try {
            run(argv);
        } catch (Exception e) {  // printed here: the source launcher hides a short stack behind its own exception
            e.printStackTrace();
            System.exit(1);
        }
    }

    static void run(String[] argv) throws Exception {
        String bootstrap = argv[0], topic = argv[1];
        int count = Integer.parseInt(argv[2]), perTxn = Integer.parseInt(argv[3]), size = Integer.parseInt(argv[4]);
        Properties config = new Properties();
        config.put("bootstrap.servers", bootstrap);
        config.put("key.serializer", ByteArraySerializer.class.getName());
        config.put("value.serializer", ByteArraySerializer.class.getName());
        config.put("transactional.id", "bench-" + UUID.randomUUID());
        config.put("linger.ms", "5");
        byte[] value = new byte[size];
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(config)) {
            producer.initTransactions();
            long start = System.nanoTime();
            for (int first = 0; first < count; first += perTxn) {
                producer.beginTransaction();
                for (int i = first; i < Math.min(count, first + perTxn); i++) {
                    producer.send(new ProducerRecord<>(topic, value));
                }
                producer.commitTransaction();
            }
            double seconds = (System.nanoTime() - start) / 1e9;
            System.out.println("{\"records_per_s\":" + (count / seconds) + "}");
        }
    }
}
