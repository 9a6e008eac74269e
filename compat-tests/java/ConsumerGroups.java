// The Admin calls of kafka-consumer-groups (tools/consumer/group/ConsumerGroupCommand) for
//   --bootstrap-server B --describe --group G
//       describeConsumerGroups([G]) (state, members and their assignments), listConsumerGroupOffsets(G),
//       listOffsets(latest) for those partitions; prints the tool's table:
//       GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID ("-" when unknown),
//       preceded by "Consumer group 'G' has no active members." when it has none.
//   --bootstrap-server B --reset-offsets --group G --topic T --to-earliest --execute
//       describeConsumerGroups([G]) (the group must be Empty or Dead), describeTopics([T]),
//       listOffsets(earliest), alterConsumerGroupOffsets(G, ...); prints GROUP TOPIC PARTITION NEW-OFFSET.
// Exit code 1 with an "Error: ..." line on stderr when the tool would refuse.
//
// Usage: java -cp <kafka-clients jars> ConsumerGroups.java <the options above>

import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;

public class ConsumerGroups {
    static final Comparator<TopicPartition> ORDER =
            Comparator.comparing(TopicPartition::topic).thenComparingInt(TopicPartition::partition);

    public static void main(String[] argv) throws Exception {
        Map<String, String> opts = new HashMap<>();
        for (int i = 0; i < argv.length; i++) {
            String a = argv[i].replaceFirst("^--", "");
            if (a.equals("describe") || a.equals("reset-offsets") || a.equals("to-earliest") || a.equals("execute")) {
                opts.put(a, "true");
            } else opts.put(a, argv[++i]);
        }
        Properties config = new Properties();
        config.put("bootstrap.servers", opts.get("bootstrap-server"));
        String group = opts.get("group");
        try (Admin admin = Admin.create(config)) {
            ConsumerGroupDescription desc = admin.describeConsumerGroups(List.of(group)).all()
                    .get(30, TimeUnit.SECONDS).get(group);
            if (opts.containsKey("describe")) describe(admin, group, desc);
            else if (opts.containsKey("reset-offsets")) reset(admin, group, desc, opts.get("topic"));
        }
    }

    @SuppressWarnings("deprecation")
    static String state(ConsumerGroupDescription desc) {
        return String.valueOf(desc.state());
    }

    static void describe(Admin admin, String group, ConsumerGroupDescription desc) throws Exception {
        Map<TopicPartition, OffsetAndMetadata> committed = admin.listConsumerGroupOffsets(group)
                .partitionsToOffsetAndMetadata().get(30, TimeUnit.SECONDS);
        Map<TopicPartition, MemberDescription> owner = new TreeMap<>(ORDER);
        for (MemberDescription m : desc.members()) {
            for (TopicPartition tp : m.assignment().topicPartitions()) owner.put(tp, m);
        }
        Map<TopicPartition, OffsetSpec> wanted = new TreeMap<>(ORDER);
        for (TopicPartition tp : committed.keySet()) wanted.put(tp, OffsetSpec.latest());
        for (TopicPartition tp : owner.keySet()) wanted.put(tp, OffsetSpec.latest());
        Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> ends =
                admin.listOffsets(wanted).all().get(30, TimeUnit.SECONDS);
        if (desc.members().isEmpty()) System.out.println("\nConsumer group '" + group + "' has no active members.");
        System.out.println("\nGROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID");
        for (TopicPartition tp : wanted.keySet()) {
            OffsetAndMetadata c = committed.get(tp);
            long end = ends.get(tp).offset();
            MemberDescription m = owner.get(tp);
            System.out.println(String.join(" ", group, tp.topic(), String.valueOf(tp.partition()),
                    c == null ? "-" : String.valueOf(c.offset()), String.valueOf(end),
                    c == null ? "-" : String.valueOf(end - c.offset()),
                    m == null ? "-" : m.consumerId(), m == null ? "-" : m.host(), m == null ? "-" : m.clientId()));
        }
        System.out.println("STATE " + state(desc));
    }

    static void reset(Admin admin, String group, ConsumerGroupDescription desc, String topic) throws Exception {
        String st = state(desc);
        if (!st.equalsIgnoreCase("Empty") && !st.equalsIgnoreCase("Dead")) {
            System.err.println("Error: Assignments can only be reset if the group '" + group
                    + "' is inactive, but the current state is " + st + ".");
            System.exit(1);
        }
        TopicDescription td = admin.describeTopics(List.of(topic)).allTopicNames().get(30, TimeUnit.SECONDS).get(topic);
        Map<TopicPartition, OffsetSpec> wanted = new TreeMap<>(ORDER);
        for (TopicPartitionInfo p : td.partitions()) {
            wanted.put(new TopicPartition(topic, p.partition()), OffsetSpec.earliest());
        }
        Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> earliest =
                admin.listOffsets(wanted).all().get(30, TimeUnit.SECONDS);
        Map<TopicPartition, OffsetAndMetadata> target = new TreeMap<>(ORDER);
        for (TopicPartition tp : wanted.keySet()) target.put(tp, new OffsetAndMetadata(earliest.get(tp).offset()));
        admin.alterConsumerGroupOffsets(group, target).all().get(30, TimeUnit.SECONDS);
        System.out.println("\nGROUP TOPIC PARTITION NEW-OFFSET");
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : target.entrySet()) {
            System.out.println(String.join(" ", group, e.getKey().topic(), String.valueOf(e.getKey().partition()),
                    String.valueOf(e.getValue().offset())));
        }
    }
}
