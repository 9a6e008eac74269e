// Admin.describeProducers (KIP-664, DescribeProducers key 61), as kafka-transactions.sh describe-producers calls it.
//
// Usage: java -cp <kafka-clients jars> DescribeProducers.java BOOTSTRAP TOPIC PARTITION
// Output: one JSON object per line, "producer" (id, epoch, last_sequence, last_timestamp, coordinator_epoch or
// null, txn_start_offset or null) per active producer of the partition, sorted by id; or "error" (the exception's
// class) when the call fails.

import java.util.Comparator;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.common.TopicPartition;

public class DescribeProducers {
    public static void main(String[] argv) throws Exception {
        Properties config = new Properties();
        config.put("bootstrap.servers", argv[0]);
        TopicPartition tp = new TopicPartition(argv[1], Integer.parseInt(argv[2]));
        try (Admin admin = Admin.create(config)) {
            List<ProducerState> producers = admin.describeProducers(List.of(tp)).partitionResult(tp).get()
                    .activeProducers();
            producers.stream().sorted(Comparator.comparingLong(ProducerState::producerId)).forEach(p ->
                System.out.println("{\"event\":\"producer\",\"id\":" + p.producerId() + ",\"epoch\":" + p.producerEpoch()
                        + ",\"last_sequence\":" + p.lastSequence() + ",\"last_timestamp\":" + p.lastTimestamp()
                        + ",\"coordinator_epoch\":" + (p.coordinatorEpoch().isPresent() ? p.coordinatorEpoch().getAsInt() : "null")
                        + ",\"txn_start_offset\":" + (p.currentTransactionStartOffset().isPresent()
                            ? p.currentTransactionStartOffset().getAsLong() : "null") + "}"));
        } catch (ExecutionException e) {
            System.out.println("{\"event\":\"error\",\"name\":\"" + e.getCause().getClass().getSimpleName() + "\"}");
        }
    }
}
