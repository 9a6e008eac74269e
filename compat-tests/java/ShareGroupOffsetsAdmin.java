// Share groups' administration through the real kafka-clients Admin (KIP-932): operations separated by "--", run in
// order by one Admin; before each operation's results a line {"op": <its index>}, then one JSON line per result, a
// failed item as {"item": "...", "error": "<exception class>"}:
//   list [all]                         listGroups (share groups only, or every type): {"group", "type", "state"}
//   describe <group>...                describeShareGroups: {"group", "state", "members"} or {"item": group, "error"}
//   offsets <group> [topic:partition]  listShareGroupOffsets: {"tp", "start", "lag"} (start null: no offset)
//   alter <group> <topic:partition=offset>...   alterShareGroupOffsets: {"item": tp} or its error
//   delete-offsets <group> <topic>...  deleteShareGroupOffsets: {"item": topic} or its error
//   delete <group>...                  deleteShareGroups: {"item": group} or its error
// Anything else failing: {"event": "error", "error": "<exception class>: <message>"}, exit code 2.
//
// Usage: java -cp <kafka-clients jars> ShareGroupOffsetsAdmin.java <bootstrap> <operation> <args>... [-- <operation>...]

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.ListShareGroupOffsetsSpec;
import org.apache.kafka.clients.admin.ShareGroupDescription;
import org.apache.kafka.clients.admin.SharePartitionOffsetInfo;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.TopicPartition;

public class ShareGroupOffsetsAdmin {
    static TopicPartition tp(String s) {
        int colon = s.lastIndexOf(':');
        return new TopicPartition(s.substring(0, colon), Integer.parseInt(s.substring(colon + 1)));
    }

    static void outcome(String item, KafkaFuture<Void> future) throws InterruptedException {
        try {
            future.get();
            System.out.println("{\"item\": \"" + item + "\"}");
        } catch (ExecutionException e) {
            System.out.println("{\"item\": \"" + item + "\", \"error\": \"" + e.getCause().getClass().getSimpleName()
                    + "\"}");
        }
    }

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        List<List<String>> ops = new ArrayList<>();
        ops.add(new ArrayList<>());
        for (String a : Arrays.asList(args).subList(1, args.length)) {
            if (a.equals("--")) ops.add(new ArrayList<>());
            else ops.get(ops.size() - 1).add(a);
        }
        try (Admin admin = Admin.create(props)) {
            for (int i = 0; i < ops.size(); i++) {
                System.out.println("{\"op\": " + i + "}");
                run(admin, ops.get(i).get(0), ops.get(i).subList(1, ops.get(i).size()));
            }
        } catch (Exception e) {
            Throwable cause = e.getCause() != null ? e.getCause() : e;
            System.out.println("{\"event\": \"error\", \"error\": \"" + cause.getClass().getName() + ": "
                    + String.valueOf(cause.getMessage()).replace("\"", "'") + "\"}");
            System.exit(2);
        }
    }

    static void run(Admin admin, String op, List<String> rest) throws Exception {
        {
            if (op.equals("list")) {
                ListGroupsOptions options = rest.contains("all") ? new ListGroupsOptions() : ListGroupsOptions.forShareGroups();
                for (GroupListing g : admin.listGroups(options).all().get()) {
                    System.out.println("{\"group\": \"" + g.groupId() + "\", \"type\": \""
                            + g.type().map(Object::toString).orElse("") + "\", \"state\": \""
                            + g.groupState().map(Object::toString).orElse("") + "\"}");
                }
            } else if (op.equals("describe")) {
                var described = admin.describeShareGroups(rest).describedGroups();
                for (String group : rest) {
                    try {
                        ShareGroupDescription d = described.get(group).get();
                        System.out.println("{\"group\": \"" + d.groupId() + "\", \"state\": \"" + d.groupState()
                                + "\", \"members\": " + d.members().size() + "}");
                    } catch (ExecutionException e) {
                        System.out.println("{\"item\": \"" + group + "\", \"error\": \""
                                + e.getCause().getClass().getSimpleName() + "\"}");
                    }
                }
            } else if (op.equals("offsets")) {
                ListShareGroupOffsetsSpec spec = new ListShareGroupOffsetsSpec();
                if (rest.size() > 1) {
                    List<TopicPartition> parts = new ArrayList<>();
                    for (String s : rest.subList(1, rest.size())) parts.add(tp(s));
                    spec.topicPartitions(parts);
                }
                Map<TopicPartition, SharePartitionOffsetInfo> offsets = admin.listShareGroupOffsets(
                        Map.of(rest.get(0), spec)).partitionsToOffsetInfo(rest.get(0)).get();
                TreeMap<String, SharePartitionOffsetInfo> sorted = new TreeMap<>();
                offsets.forEach((k, v) -> sorted.put(k.topic() + ":" + k.partition(), v));
                sorted.forEach((k, v) -> System.out.println("{\"tp\": \"" + k + "\", \"start\": "
                        + (v == null ? "null" : v.startOffset()) + ", \"lag\": "
                        + (v == null ? "null" : v.lag().map(String::valueOf).orElse("null")) + "}"));
            } else if (op.equals("alter")) {
                Map<TopicPartition, Long> offsets = new HashMap<>();
                for (String s : rest.subList(1, rest.size())) {
                    String[] kv = s.split("=");
                    offsets.put(tp(kv[0]), Long.parseLong(kv[1]));
                }
                var result = admin.alterShareGroupOffsets(rest.get(0), offsets);
                for (String s : rest.subList(1, rest.size())) {
                    String item = s.split("=")[0];
                    outcome(item, result.partitionResult(tp(item)));
                }
            } else if (op.equals("delete-offsets")) {
                var result = admin.deleteShareGroupOffsets(rest.get(0), new HashSet<>(rest.subList(1, rest.size())));
                for (String topic : rest.subList(1, rest.size())) outcome(topic, result.topicResult(topic));
            } else if (op.equals("delete")) {
                var result = admin.deleteShareGroups(rest);
                for (String group : rest) outcome(group, result.deletedGroups().get(group));
            } else {
                throw new IllegalArgumentException("unknown operation " + op);
            }
        }
    }
}
