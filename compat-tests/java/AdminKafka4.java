// Issue 17's admin surface on the real kafka-clients Admin: authorized operations (describeTopics /
// describeCluster with includeAuthorizedOperations), GROUP config resources (KIP-848 group configs) and dynamic
// BROKER configs with incrementalAlterConfigs / describeConfigs, as kafka-configs --entity-type groups|brokers does:
// per-broker (SASL/listener) and cluster-wide (thread counts, log configs) entries, synonyms, what is refused.
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
import org.apache.kafka.clients.admin.DescribeConfigsOptions;
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
        alter(admin, resource, name, value, AlterConfigOp.OpType.SET);
    }

    static void alter(Admin admin, ConfigResource resource, String name, String value, AlterConfigOp.OpType type)
            throws Exception {
        AlterConfigOp op = new AlterConfigOp(new ConfigEntry(name, value), type);
        admin.incrementalAlterConfigs(Map.of(resource, (Collection<AlterConfigOp>) List.of(op)))
                .all().get(30, TimeUnit.SECONDS);
    }

    // The exception class and message of a refused change ("null": accepted).
    static String refused(Admin admin, ConfigResource resource, String name, String value, AlterConfigOp.OpType type)
            throws Exception {
        try {
            alter(admin, resource, name, value, type);
            return "null";
        } catch (ExecutionException e) {
            return "[\"" + e.getCause().getClass().getSimpleName() + "\", \""
                    + String.valueOf(e.getCause().getMessage()).replace("\"", "'") + "\"]";
        }
    }

    static String synonyms(ConfigEntry e) {
        List<String> out = new java.util.ArrayList<>();
        e.synonyms().forEach(s -> out.add("[\"" + s.value() + "\", \"" + s.source().name() + "\"]"));
        return "[" + String.join(", ", out) + "]";
    }

    static String namedSynonyms(ConfigEntry e) {
        List<String> out = new java.util.ArrayList<>();
        e.synonyms().forEach(s -> out.add("[\"" + s.name() + "\", \"" + s.value() + "\", \"" + s.source().name() + "\"]"));
        return "[" + String.join(", ", out) + "]";
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

            // Kafka's per-broker and cluster-wide dynamic configs (librdkafka's 0081 sets the first one)
            String kerberos = "sasl.kerberos.min.time.before.relogin";
            alter(admin, node, kerberos, "58000");
            alter(admin, cluster, "background.threads", "9");
            alter(admin, cluster, "log.cleanup.policy", "compact", AlterConfigOp.OpType.APPEND);
            alter(admin, node, "listener.name.plain.ssl.key.password", "secret");
            Config withSynonyms = admin.describeConfigs(List.of(node), new DescribeConfigsOptions().includeSynonyms(true))
                    .all().get(30, TimeUnit.SECONDS).get(node);
            ConfigEntry password = withSynonyms.get("listener.name.plain.ssl.key.password");
            emit("dynamic", "\"kerberos\": " + entry(withSynonyms, kerberos)
                    + ", \"kerberos_synonyms\": " + synonyms(withSynonyms.get(kerberos))
                    + ", \"threads\": " + entry(withSynonyms, "background.threads")
                    + ", \"threads_synonyms\": " + synonyms(withSynonyms.get("background.threads"))
                    + ", \"policy\": " + entry(withSynonyms, "log.cleanup.policy")
                    + ", \"broker_id_read_only\": " + withSynonyms.get("broker.id").isReadOnly()
                    + ", \"password\": [" + (password.value() == null ? "null" : "\"" + password.value() + "\"")
                    + ", " + password.isSensitive() + "]"
                    + ", \"cluster\": " + entry(describe(admin, cluster), "background.threads")
                    + ", \"cluster_kerberos\": " + entry(describe(admin, cluster), kerberos));
            emit("dynamic_refused", "\"per_broker_on_cluster\": "
                    + refused(admin, cluster, kerberos, "1", AlterConfigOp.OpType.SET)
                    + ", \"doubled\": " + refused(admin, cluster, "background.threads", "40", AlterConfigOp.OpType.SET)
                    + ", \"bad_type\": " + refused(admin, node, kerberos, "soon", AlterConfigOp.OpType.SET)
                    + ", \"append_not_list\": " + refused(admin, node, kerberos, "1", AlterConfigOp.OpType.APPEND)
                    + ", \"unknown\": " + refused(admin, node, "no.such.config", "1", AlterConfigOp.OpType.SET));

            // a topic's configs with their synonyms, in Kafka's order: the topic's own, then its broker config's
            ConfigResource topicResource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            alter(admin, topicResource, "retention.ms", "5000");
            alter(admin, node, "log.retention.ms", "7200000");
            Config topicSynonyms = admin.describeConfigs(List.of(topicResource),
                    new DescribeConfigsOptions().includeSynonyms(true)).all().get(30, TimeUnit.SECONDS).get(topicResource);
            emit("topic_synonyms", "\"retention\": " + entry(topicSynonyms, "retention.ms")
                    + ", \"retention_synonyms\": " + namedSynonyms(topicSynonyms.get("retention.ms"))
                    + ", \"segment\": " + entry(topicSynonyms, "segment.bytes")
                    + ", \"segment_synonyms\": " + namedSynonyms(topicSynonyms.get("segment.bytes"))
                    + ", \"policy_synonyms\": " + namedSynonyms(topicSynonyms.get("cleanup.policy"))
                    + ", \"roll_synonyms\": " + namedSynonyms(topicSynonyms.get("segment.ms")));
            emit("checks_refused", "\"hours\": " + refused(admin, cluster, "log.retention.hours", "1", AlterConfigOp.OpType.SET)
                    + ", \"network_threads\": " + refused(admin, cluster, "num.network.threads", "7", AlterConfigOp.OpType.SET)
                    + ", \"cleaner_threads\": " + refused(admin, cluster, "log.cleaner.threads", "0", AlterConfigOp.OpType.SET)
                    + ", \"dedupe\": " + refused(admin, cluster, "log.cleaner.dedupe.buffer.size", "1048576", AlterConfigOp.OpType.SET));
        } catch (Exception e) {
            emit("error", "\"error\": \"" + e.getClass().getSimpleName() + ": "
                    + String.valueOf(e.getMessage()).replace("\"", "'") + "\"");
            System.exit(1);
        }
    }
}
