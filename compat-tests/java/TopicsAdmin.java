// The Admin calls of kafka-topics (--create / --describe / --alter --partitions / --delete), kafka-configs
// (--describe / --alter --add-config) and kafka-delete-records, in one round trip on the real kafka-clients.
// Prints one JSON object per step: {"step": ..., ...}; any exception ends the run with {"step": "error", ...}.
//
// Usage: java -cp <kafka-clients jars> TopicsAdmin.java <bootstrap> <topic> <partitions>

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringSerializer;

public class TopicsAdmin {
    static void emit(String step, String json) {
        System.out.println("{\"step\": \"" + step + "\"" + (json.isEmpty() ? "" : ", " + json) + "}");
        System.out.flush();
    }

    static String partitions(Admin admin, String topic) throws Exception {
        TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get(30, TimeUnit.SECONDS).get(topic);
        List<String> parts = new ArrayList<>();
        d.partitions().forEach(p -> parts.add("[" + p.partition() + ", " + p.leader().id() + ", " + p.replicas().size()
                + ", " + p.isr().size() + "]"));
        return "\"topic_id\": \"" + d.topicId() + "\", \"partitions\": [" + String.join(", ", parts) + "]";
    }

    static String configs(Admin admin, ConfigResource r) throws Exception {
        Config c = admin.describeConfigs(List.of(r)).all().get(30, TimeUnit.SECONDS).get(r);
        Map<String, String> values = new TreeMap<>();
        for (ConfigEntry e : c.entries()) values.put(e.name(), e.value() + "|" + e.source());
        List<String> out = new ArrayList<>();
        values.forEach((k, v) -> out.add("\"" + k + "\": \"" + v + "\""));
        return "\"configs\": {" + String.join(", ", out) + "}";
    }

    static String lows(Admin admin, String topic, int n) throws Exception {
        Map<TopicPartition, OffsetSpec> want = new TreeMap<>((a, b) -> Integer.compare(a.partition(), b.partition()));
        for (int p = 0; p < n; p++) want.put(new TopicPartition(topic, p), OffsetSpec.earliest());
        List<String> out = new ArrayList<>();
        var got = admin.listOffsets(want).all().get(30, TimeUnit.SECONDS);
        for (TopicPartition tp : want.keySet()) out.add(String.valueOf(got.get(tp).offset()));
        return "\"earliest\": [" + String.join(", ", out) + "]";
    }

    public static void main(String[] argv) throws Exception {
        String bootstrap = argv[0], topic = argv[1];
        int n = Integer.parseInt(argv[2]);
        Properties config = new Properties();
        config.put("bootstrap.servers", bootstrap);
        ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        try (Admin admin = Admin.create(config)) {
            admin.createTopics(List.of(new NewTopic(topic, n, (short) 1).configs(Map.of("retention.ms", "86400000"))))
                    .all().get(30, TimeUnit.SECONDS);
            emit("created", "");
            emit("described", partitions(admin, topic));
            emit("configs", configs(admin, resource));
            admin.incrementalAlterConfigs(Map.of(resource, List.of(
                    new AlterConfigOp(new ConfigEntry("retention.bytes", "10485760"), AlterConfigOp.OpType.SET),
                    new AlterConfigOp(new ConfigEntry("retention.ms", null), AlterConfigOp.OpType.DELETE))))
                    .all().get(30, TimeUnit.SECONDS);
            emit("altered", configs(admin, resource));
            admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(n + 2))).all().get(30, TimeUnit.SECONDS);
            emit("grown", partitions(admin, topic));
            Properties pc = new Properties();
            pc.put("bootstrap.servers", bootstrap);
            pc.put("key.serializer", StringSerializer.class.getName());
            pc.put("value.serializer", StringSerializer.class.getName());
            try (KafkaProducer<String, String> producer = new KafkaProducer<>(pc)) {
                for (int i = 0; i < 10 * (n + 2); i++) producer.send(new ProducerRecord<>(topic, i % (n + 2), "k", "v" + i));
                producer.flush();
            }
            emit("produced", lows(admin, topic, n + 2));
            var deleted = admin.deleteRecords(Map.of(new TopicPartition(topic, 0), RecordsToDelete.beforeOffset(4)))
                    .all();
            deleted.get(30, TimeUnit.SECONDS);
            emit("records_deleted", lows(admin, topic, n + 2));
            admin.deleteTopics(List.of(topic)).all().get(30, TimeUnit.SECONDS);
            emit("deleted", "\"listed\": " + admin.listTopics().names().get(30, TimeUnit.SECONDS).contains(topic));
        } catch (Exception e) {
            Throwable cause = e.getCause() != null ? e.getCause() : e;
            emit("error", "\"type\": \"" + cause.getClass().getSimpleName() + "\", \"message\": \""
                    + String.valueOf(cause.getMessage()).replace("\"", "'") + "\"");
            System.exit(1);
        }
    }
}
