// Share groups through the real kafka-clients Admin (KIP-932): describeShareGroups of the groups named, printed as
// one JSON line per group {"group", "state", "members": [{"member", "client", "partitions": ["topic:partition"]}]};
// an error as {"event": "error", "error": "<exception class>: <message>"} with exit code 2.
//
// Usage: java -cp <kafka-clients jars> ShareGroupsAdmin.java <bootstrap> <group>...

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeSet;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ShareGroupDescription;
import org.apache.kafka.clients.admin.ShareMemberDescription;
import org.apache.kafka.common.TopicPartition;

public class ShareGroupsAdmin {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        List<String> groups = Arrays.asList(args).subList(1, args.length);
        try (Admin admin = Admin.create(props)) {
            Map<String, ShareGroupDescription> described = admin.describeShareGroups(groups).all().get();
            for (String group : groups) {
                ShareGroupDescription d = described.get(group);
                List<String> members = new ArrayList<>();
                for (ShareMemberDescription m : d.members()) {
                    TreeSet<String> parts = new TreeSet<>();
                    for (TopicPartition tp : m.assignment().topicPartitions()) {
                        parts.add("\"" + tp.topic() + ":" + tp.partition() + "\"");
                    }
                    members.add("{\"member\": \"" + m.consumerId() + "\", \"client\": \"" + m.clientId()
                            + "\", \"partitions\": [" + String.join(", ", parts) + "]}");
                }
                System.out.println("{\"group\": \"" + d.groupId() + "\", \"state\": \"" + d.groupState()
                        + "\", \"members\": [" + String.join(", ", members) + "]}");
            }
        } catch (Exception e) {
            Throwable cause = e.getCause() != null ? e.getCause() : e;
            System.out.println("{\"event\": \"error\", \"error\": \"" + cause.getClass().getName() + ": "
                    + String.valueOf(cause.getMessage()).replace("\"", "'") + "\"}");
            System.exit(2);
        }
    }
}
