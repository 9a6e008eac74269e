// Replica moves as a Kafka operator makes them (issue 26; KIP-455): the Admin's alterPartitionReassignments,
// listPartitionReassignments and describeTopics on one partition of a topic, as a sequence of actions:
//   move:R1,R2,...  alterPartitionReassignments to those brokers: {"step": "move", "result": "ok" or the simple name
//                   of the exception its future failed with (InvalidReplicaAssignmentException, ...)}
//   cancel          the same with no target: {"step": "cancel", "result": ...} (NoReassignmentInProgressException)
//   list            listPartitionReassignments: {"step": "list", "moving": [{"partition", "replicas", "adding",
//                   "removing"}, ...]}
//   wait            listPartitionReassignments until the partition is no longer moving (at most 60 s):
//                   {"step": "wait", "done": true|false}
//   describe        describeTopics: {"step": "describe", "replicas": [...], "isr": [...], "leader": id}
//   throttle:RATE:R1,R2,...  what kafka-reassign-partitions --execute --throttle RATE sets before a move to R1,R2,...
//                   (KIP-73): incrementalAlterConfigs SET of leader.replication.throttled.rate and
//                   follower.replication.throttled.rate on every broker describeCluster names, and the topic's
//                   leader.replication.throttled.replicas (the partition's current replicas, P:B,...) and
//                   follower.replication.throttled.replicas (the replicas the move adds): {"step": "throttle",
//                   "result": "ok" or the exception's simple name}
//   unthrottle      what kafka-reassign-partitions --verify removes once the move is done: the same four configs
//                   DELETEd: {"step": "unthrottle", "result": ...}
//   throttles       describeConfigs of every broker and of the topic: {"step": "throttles", "brokers": {"ID":
//                   {"leader": [value, source], "follower": [value, source]}}, "topic": {"leader": [...],
//                   "follower": [...]}}
// Any other exception ends the run with {"step": "error", ...}.
//
// Usage: java -cp <kafka-clients jars> Reassign.java BOOTSTRAP TOPIC PARTITION ACTION...

import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.clients.admin.PartitionReassignment;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;

public class Reassign {
    static void emit(String step, String json) {
        System.out.println("{\"step\": \"" + step + "\", " + json + "}");
        System.out.flush();
    }

    static String ints(List<Integer> ids) {
        List<String> out = new ArrayList<>();
        ids.forEach(i -> out.add(String.valueOf(i)));
        return "[" + String.join(", ", out) + "]";
    }

    static String ids(List<Node> nodes) {
        List<Integer> out = new ArrayList<>();
        nodes.forEach(n -> out.add(n.id()));
        return ints(out);
    }

    static String alter(Admin admin, TopicPartition tp, Optional<NewPartitionReassignment> target) throws Exception {
        try {
            admin.alterPartitionReassignments(Map.of(tp, target)).all().get(60, TimeUnit.SECONDS);
            return "ok";
        } catch (ExecutionException e) {
            return e.getCause().getClass().getSimpleName();
        }
    }

    static final String[] RATES = {"leader.replication.throttled.rate", "follower.replication.throttled.rate"};
    static final String[] LISTS = {"leader.replication.throttled.replicas", "follower.replication.throttled.replicas"};

    static List<ConfigResource> brokers(Admin admin) throws Exception {
        List<ConfigResource> out = new ArrayList<>();
        for (Node n : admin.describeCluster().nodes().get(60, TimeUnit.SECONDS)) {
            out.add(new ConfigResource(ConfigResource.Type.BROKER, String.valueOf(n.id())));
        }
        return out;
    }

    static List<Node> replicas(Admin admin, TopicPartition tp) throws Exception {
        return admin.describeTopics(List.of(tp.topic())).allTopicNames().get(60, TimeUnit.SECONDS).get(tp.topic())
                .partitions().get(tp.partition()).replicas();
    }

    static String pairs(int partition, Collection<Integer> brokers) {
        List<String> out = new ArrayList<>();
        brokers.forEach(b -> out.add(partition + ":" + b));
        return String.join(",", out);
    }

    /** The four throttle configs SET to ``values`` (rate, rate, leader list, follower list), or DELETEd (null). */
    static String throttle(Admin admin, TopicPartition tp, String[] values) throws Exception {
        Map<ConfigResource, Collection<AlterConfigOp>> ops = new HashMap<>();
        for (ConfigResource broker : brokers(admin)) {
            List<AlterConfigOp> each = new ArrayList<>();
            for (int i = 0; i < 2; i++) each.add(op(RATES[i], values == null ? null : values[i]));
            ops.put(broker, each);
        }
        List<AlterConfigOp> lists = new ArrayList<>();
        for (int i = 0; i < 2; i++) lists.add(op(LISTS[i], values == null ? null : values[2 + i]));
        ops.put(new ConfigResource(ConfigResource.Type.TOPIC, tp.topic()), lists);
        try {
            admin.incrementalAlterConfigs(ops).all().get(60, TimeUnit.SECONDS);
            return "ok";
        } catch (ExecutionException e) {
            return e.getCause().getClass().getSimpleName() + ": " + e.getCause().getMessage();
        }
    }

    static AlterConfigOp op(String name, String value) {
        return value == null ? new AlterConfigOp(new ConfigEntry(name, ""), AlterConfigOp.OpType.DELETE)
                             : new AlterConfigOp(new ConfigEntry(name, value), AlterConfigOp.OpType.SET);
    }

    static String pair(Config config, String name) {
        ConfigEntry e = config.get(name);
        return e == null ? "null" : "[\"" + e.value() + "\", \"" + e.source().name() + "\"]";
    }

    static String throttles(Admin admin, TopicPartition tp) throws Exception {
        ConfigResource topic = new ConfigResource(ConfigResource.Type.TOPIC, tp.topic());
        List<ConfigResource> asked = new ArrayList<>(brokers(admin));
        asked.add(topic);
        Map<ConfigResource, Config> got = admin.describeConfigs(asked).all().get(60, TimeUnit.SECONDS);
        List<String> brokers = new ArrayList<>();
        for (ConfigResource r : asked) {
            if (r.type() == ConfigResource.Type.BROKER) {
                brokers.add("\"" + r.name() + "\": {\"leader\": " + pair(got.get(r), RATES[0]) + ", \"follower\": "
                            + pair(got.get(r), RATES[1]) + "}");
            }
        }
        return "\"brokers\": {" + String.join(", ", brokers) + "}, \"topic\": {\"leader\": "
               + pair(got.get(topic), LISTS[0]) + ", \"follower\": " + pair(got.get(topic), LISTS[1]) + "}";
    }

    public static void main(String[] argv) throws Exception {
        String bootstrap = argv[0], topic = argv[1];
        TopicPartition tp = new TopicPartition(topic, Integer.parseInt(argv[2]));
        Properties config = new Properties();
        config.put("bootstrap.servers", bootstrap);
        config.put("default.api.timeout.ms", "60000");
        try (Admin admin = Admin.create(config)) {
            for (int i = 3; i < argv.length; i++) {
                String action = argv[i];
                if (action.startsWith("move:")) {
                    List<Integer> target = new ArrayList<>();
                    for (String r : action.substring(5).split(",")) target.add(Integer.parseInt(r));
                    emit("move", "\"result\": \"" + alter(admin, tp, Optional.of(new NewPartitionReassignment(target)))
                         + "\"");
                } else if (action.startsWith("throttle:")) {
                    String[] parts = action.split(":");
                    List<Integer> current = new ArrayList<>();
                    replicas(admin, tp).forEach(n -> current.add(n.id()));
                    List<Integer> adding = new ArrayList<>();
                    for (String r : parts[2].split(",")) {
                        if (!current.contains(Integer.parseInt(r))) adding.add(Integer.parseInt(r));
                    }
                    String[] values = {parts[1], parts[1], pairs(tp.partition(), current), pairs(tp.partition(), adding)};
                    emit("throttle", "\"result\": \"" + throttle(admin, tp, values) + "\"");
                } else if (action.equals("unthrottle")) {
                    emit("unthrottle", "\"result\": \"" + throttle(admin, tp, null) + "\"");
                } else if (action.equals("throttles")) {
                    emit("throttles", throttles(admin, tp));
                } else if (action.equals("cancel")) {
                    emit("cancel", "\"result\": \"" + alter(admin, tp, Optional.empty()) + "\"");
                } else if (action.equals("list")) {
                    Map<TopicPartition, PartitionReassignment> moving =
                            admin.listPartitionReassignments().reassignments().get(60, TimeUnit.SECONDS);
                    List<String> parts = new ArrayList<>();
                    moving.forEach((p, r) -> parts.add("{\"topic\": \"" + p.topic() + "\", \"partition\": "
                            + p.partition() + ", \"replicas\": " + ints(r.replicas()) + ", \"adding\": "
                            + ints(r.addingReplicas()) + ", \"removing\": " + ints(r.removingReplicas()) + "}"));
                    emit("list", "\"moving\": [" + String.join(", ", parts) + "]");
                } else if (action.equals("wait")) {
                    boolean done = false;
                    for (long end = System.nanoTime() + 60_000_000_000L; !done && System.nanoTime() < end; ) {
                        done = admin.listPartitionReassignments(Set.of(tp)).reassignments().get(60, TimeUnit.SECONDS)
                                .isEmpty();
                        if (!done) Thread.sleep(200);
                    }
                    emit("wait", "\"done\": " + done);
                } else if (action.equals("describe")) {
                    TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames()
                            .get(60, TimeUnit.SECONDS).get(topic);
                    TopicPartitionInfo p = d.partitions().get(tp.partition());
                    int leader = p.leader() == null ? -1 : p.leader().id();
                    emit("describe", "\"replicas\": " + ids(p.replicas()) + ", \"isr\": " + ids(p.isr())
                         + ", \"leader\": " + leader);
                } else {
                    throw new IllegalArgumentException("unknown action " + action);
                }
            }
        } catch (Exception e) {
            Throwable cause = e.getCause() != null ? e.getCause() : e;
            emit("error", "\"type\": \"" + cause.getClass().getSimpleName() + "\", \"message\": \""
                 + String.valueOf(cause.getMessage()).replace("\\", "\\\\").replace("\"", "'") + "\"");
        }
    }
}
