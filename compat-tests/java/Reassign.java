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
// Any other exception ends the run with {"step": "error", ...}.
//
// Usage: java -cp <kafka-clients jars> Reassign.java BOOTSTRAP TOPIC PARTITION ACTION...

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.clients.admin.PartitionReassignment;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;

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
