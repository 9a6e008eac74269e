// Issue 17's admin surface on the real kafka-clients Admin: authorized operations (describeTopics /
// describeCluster with includeAuthorizedOperations), GROUP config resources (KIP-848 group configs) and dynamic
// BROKER configs with incrementalAlterConfigs / describeConfigs, as kafka-configs --entity-type groups|brokers does.
// Prints one JSON object per step: {"step": ..., ...}; any exception ends the run with {"step": "error", ...}.
//
// Usage: java -cp <kafka-clients jars> AdminKafka4.java <bootstrap> <topic> <group>

import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.DescribeClusterOptions;
import org.apache.kafka.clients.admin.DescribeTopicsOptions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.config.ConfigResource;

public class AdminKafka4 {
    static void emit(String step, String json) {
        System.out.println("{\"step\": \"" + step + "\"" + (json.isEmpty() ? "" : ", " + json) + "}");
        System.out.flush();
    }

    static String ops(Set<AclOperation> operations) {
        Set<String> names = new TreeSet<>();
        if (operations != null) operations.forEach(o -> names.add("\"" + o.name() + "\""));
        return "[" + String.join(", ", names) + "]";
    }

    static String entry(Config config, String name) {
        ConfigEntry e = config.get(name);
        return e == null ? "null" : "[\"" + e.value() + "\", \"" + e.source().name() + "\"]";
    }

    static Config describe(Admin admin, ConfigResource resource) throws Exception {
        return admin.describeConfigs(List.of(resource)).all().get(30, TimeUnit.SECONDS).get(resource);
    }

    static void alter(Admin admin, ConfigResource resource, String name, String value) throws Exception {
        AlterConfigOp op = new AlterConfigOp(new ConfigEntry(name, value), AlterConfigOp.OpType.SET);
        admin.incrementalAlterConfigs(Map.of(resource, (Collection<AlterConfigOp>) List.of(op)))
                .all().get(30, TimeUnit.SECONDS);
    }

    public static void main(String[] argv) throws Exception {
        Properties config = new Properties();
        config.put("bootstrap.servers", argv[0]);
        String topic = argv[1], group = argv[2];
        try (Admin admin = Admin.create(config)) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get(30, TimeUnit.SECONDS);
            Set<AclOperation> topicOps = admin.describeTopics(List.of(topic),
                    new DescribeTopicsOptions().includeAuthorizedOperations(true)).allTopicNames()
                    .get(30, TimeUnit.SECONDS).get(topic).authorizedOperations();
            Set<AclOperation> clusterOps = admin.describeCluster(
                    new DescribeClusterOptions().includeAuthorizedOperations(true)).authorizedOperations()
                    .get(30, TimeUnit.SECONDS);
            emit("authorized", "\"topic\": " + ops(topicOps) + ", \"cluster\": " + ops(clusterOps));

            ConfigResource groupResource = new ConfigResource(ConfigResource.Type.GROUP, group);
            emit("group_default", "\"session\": " + entry(describe(admin, groupResource), "consumer.session.timeout.ms"));
            alter(admin, groupResource, "consumer.heartbeat.interval.ms", "6000");
            emit("group_set", "\"heartbeat\": " + entry(describe(admin, groupResource), "consumer.heartbeat.interval.ms"));

            ConfigResource cluster = new ConfigResource(ConfigResource.Type.BROKER, "");
            ConfigResource node = new ConfigResource(ConfigResource.Type.BROKER, "0");
            alter(admin, cluster, "log.retention.ms", "3600000");
            alter(admin, node, "log.segment.bytes", "2097152");
            Config brokerConfig = describe(admin, node);
            Config topicConfig = describe(admin, new ConfigResource(ConfigResource.Type.TOPIC, topic));
            emit("broker_set", "\"broker_retention\": " + entry(brokerConfig, "log.retention.ms")
                    + ", \"broker_segment\": " + entry(brokerConfig, "log.segment.bytes")
                    + ", \"topic_retention\": " + entry(topicConfig, "retention.ms")
                    + ", \"topic_segment\": " + entry(topicConfig, "segment.bytes"));
            try {
                alter(admin, node, "broker.id", "7");
                emit("read_only", "\"error\": null");
            } catch (ExecutionException e) {
                emit("read_only", "\"error\": \"" + e.getCause().getClass().getSimpleName() + "\"");
            }
        } catch (Exception e) {
            emit("error", "\"error\": \"" + e.getClass().getSimpleName() + ": "
                    + String.valueOf(e.getMessage()).replace("\"", "'") + "\"");
            System.exit(1);
        }
    }
}
