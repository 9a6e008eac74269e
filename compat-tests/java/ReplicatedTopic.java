// A replicated topic as a Kafka user makes and writes one (issue 25): the Admin's createTopics with replication
// factor 3 and min.insync.replicas=2, describeTopics until every partition names a leader and three replicas in
// sync, describeConfigs of min.insync.replicas, then a KafkaProducer with acks=all (idempotent, the default) sends
// COUNT records and listOffsets names each partition's end.
// Prints one JSON object per step: {"step": ..., ...}; any exception ends the run with {"step": "error", ...}.
//
// Usage: java -cp <kafka-clients jars> ReplicatedTopic.java BOOTSTRAP TOPIC PARTITIONS COUNT

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringSerializer;

public class ReplicatedTopic {
    static void emit(String step, String json) {
        System.out.println("{\"step\": \"" + step + "\", " + json + "}");
        System.out.flush();
    }

    static String ids(List<Node> nodes) {
        List<String> out = new ArrayList<>();
        nodes.forEach(n -> out.add(String.valueOf(n.id())));
        return "[" + String.join(", ", out) + "]";
    }

    static boolean settled(TopicDescription d) {
        for (TopicPartitionInfo p : d.partitions()) {
            if (p.leader() == null || p.replicas().size() != 3 || p.isr().size() != 3) return false;
        }
        return true;
    }

    public static void main(String[] argv) throws Exception {
        String bootstrap = argv[0], topic = argv[1];
        int partitions = Integer.parseInt(argv[2]), count = Integer.parseInt(argv[3]);
        Properties config = new Properties();
        config.put("bootstrap.servers", bootstrap);
        config.put("default.api.timeout.ms", "30000");
        try (Admin admin = Admin.create(config)) {
            NewTopic created = new NewTopic(topic, partitions, (short) 3).configs(Map.of("min.insync.replicas", "2"));
            var result = admin.createTopics(List.of(created));
            result.all().get(30, TimeUnit.SECONDS);
            emit("create", "\"partitions\": " + result.numPartitions(topic).get() + ", \"replication_factor\": "
                 + result.replicationFactor(topic).get());
            TopicDescription d = null;
            for (long deadline = System.nanoTime() + 30_000_000_000L; System.nanoTime() < deadline; Thread.sleep(200)) {
                d = admin.describeTopics(List.of(topic)).allTopicNames().get(30, TimeUnit.SECONDS).get(topic);
                if (settled(d)) break;
            }
            List<String> parts = new ArrayList<>();
            for (TopicPartitionInfo p : d.partitions()) {
                int leader = p.leader() == null ? -1 : p.leader().id();
                parts.add("{\"partition\": " + p.partition() + ", \"leader\": " + leader + ", \"replicas\": "
                          + ids(p.replicas()) + ", \"isr\": " + ids(p.isr()) + "}");
            }
            emit("describe", "\"partitions\": [" + String.join(", ", parts) + "]");
            ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            ConfigEntry minIsr = admin.describeConfigs(List.of(resource)).all().get(30, TimeUnit.SECONDS)
                    .get(resource).get("min.insync.replicas");
            emit("config", "\"value\": \"" + minIsr.value() + "\", \"source\": \"" + minIsr.source() + "\"");

            Properties p = new Properties();
            p.put("bootstrap.servers", bootstrap);
            p.put("acks", "all");
            p.put("key.serializer", StringSerializer.class.getName());
            p.put("value.serializer", StringSerializer.class.getName());
            int errors = 0;
            try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
                List<java.util.concurrent.Future<?>> sent = new ArrayList<>();
                for (int i = 0; i < count; i++) {
                    sent.add(producer.send(new ProducerRecord<>(topic, i % partitions, "k" + i, "v" + i)));
                }
                for (java.util.concurrent.Future<?> f : sent) {
                    try {
                        f.get(60, TimeUnit.SECONDS);
                    } catch (Exception e) {
                        errors++;
                    }
                }
            }
            emit("produce", "\"sent\": " + count + ", \"errors\": " + errors);
            Map<TopicPartition, OffsetSpec> latest = new HashMap<>();
            for (int i = 0; i < partitions; i++) latest.put(new TopicPartition(topic, i), OffsetSpec.latest());
            List<String> ends = new ArrayList<>();
            var offsets = admin.listOffsets(latest).all().get(30, TimeUnit.SECONDS);
            for (int i = 0; i < partitions; i++) {
                ends.add(String.valueOf(offsets.get(new TopicPartition(topic, i)).offset()));
            }
            emit("ends", "\"offsets\": [" + String.join(", ", ends) + "]");
        } catch (Exception e) {
            emit("error", "\"class\": \"" + e.getClass().getSimpleName() + "\", \"message\": \""
                 + String.valueOf(e.getMessage()).replace("\\", "\\\\").replace("\"", "\\\"") + "\"");
        }
    }
}
