// Leader elections as a Kafka operator asks for them (issue 26; KIP-460): the Admin's electLeaders of one type
// (PREFERRED or UNCLEAN) for some partitions of a topic, then describeTopics of it.
// Prints one JSON object per partition elected, {"step": "elect", "partition": P, "result": "ok" or the simple
// name of the exception its future failed with (ElectionNotNeededException, PreferredLeaderNotAvailableException,
// EligibleLeadersNotAvailableException, ...)}, then {"step": "describe", "partitions": [{"partition", "leader",
// "replicas", "isr"}, ...]}; any other exception ends the run with {"step": "error", ...}.
//
// Usage: java -cp <kafka-clients jars> ElectLeaders.java BOOTSTRAP preferred|unclean TOPIC PARTITION...

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;

public class ElectLeaders {
    static void emit(String step, String json) {
        System.out.println("{\"step\": \"" + step + "\", " + json + "}");
        System.out.flush();
    }

    static String ids(List<Node> nodes) {
        List<String> out = new ArrayList<>();
        nodes.forEach(n -> out.add(String.valueOf(n.id())));
        return "[" + String.join(", ", out) + "]";
    }

    public static void main(String[] argv) throws Exception {
        String bootstrap = argv[0], topic = argv[2];
        ElectionType type = ElectionType.valueOf(argv[1].toUpperCase());
        Set<TopicPartition> partitions = new HashSet<>();
        for (int i = 3; i < argv.length; i++) partitions.add(new TopicPartition(topic, Integer.parseInt(argv[i])));
        Properties config = new Properties();
        config.put("bootstrap.servers", bootstrap);
        config.put("default.api.timeout.ms", "30000");
        try (Admin admin = Admin.create(config)) {
            Map<TopicPartition, Optional<Throwable>> results =
                    admin.electLeaders(type, partitions).partitions().get(30, TimeUnit.SECONDS);
            for (Map.Entry<TopicPartition, Optional<Throwable>> e : results.entrySet()) {
                String result = e.getValue().map(t -> t.getClass().getSimpleName()).orElse("ok");
                emit("elect", "\"partition\": " + e.getKey().partition() + ", \"result\": \"" + result + "\"");
            }
            TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get(30, TimeUnit.SECONDS)
                    .get(topic);
            List<String> parts = new ArrayList<>();
            for (TopicPartitionInfo p : d.partitions()) {
                int leader = p.leader() == null ? -1 : p.leader().id();
                parts.add("{\"partition\": " + p.partition() + ", \"leader\": " + leader + ", \"replicas\": "
                          + ids(p.replicas()) + ", \"isr\": " + ids(p.isr()) + "}");
            }
            emit("describe", "\"partitions\": [" + String.join(", ", parts) + "]");
        } catch (Exception e) {
            Throwable cause = e.getCause() != null ? e.getCause() : e;
            emit("error", "\"type\": \"" + cause.getClass().getSimpleName() + "\", \"message\": \""
                 + String.valueOf(cause.getMessage()).replace("\\", "\\\\").replace("\"", "'") + "\"");
        }
    }
}
