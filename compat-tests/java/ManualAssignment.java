// The Admin's createTopics and createPartitions with manual replica assignments (kafka-topics --replica-assignment),
// one operation per argument group, in the order given; each outcome printed as one JSON line
// {"op": ..., "topic": ..., "error": null | the exception's class, "message": ...}.
//
// Usage: java -cp <kafka-clients jars> ManualAssignment.java BOOTSTRAP OP...
//   create TOPIC ASSIGNMENT          NewTopic(TOPIC, assignments): the topic, one partition per ASSIGNMENT item
//   grow TOPIC COUNT ASSIGNMENT      NewPartitions.increaseTo(COUNT, assignments)
// an OP ending in "-validate" (create-validate, grow-validate) sets validateOnly. ASSIGNMENT: partitions separated by
// ",", each partition's replicas by "+" ("2,1+3": partition 0 on broker 2, partition 1 on brokers 1 and 3); "-" is
// no partition at all (an empty list).

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.CreatePartitionsOptions;
import org.apache.kafka.clients.admin.CreateTopicsOptions;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;

public class ManualAssignment {
    public static void main(String[] argv) throws Exception {
        Properties config = new Properties();
        config.put("bootstrap.servers", argv[0]);
        config.put("request.timeout.ms", "20000");
        config.put("default.api.timeout.ms", "20000");
        try (Admin admin = Admin.create(config)) {
            int i = 1;
            while (i < argv.length) {
                String op = argv[i], topic = argv[i + 1];
                boolean validate = op.endsWith("-validate");
                int step = op.startsWith("create") ? 3 : 4;
                String error = null, message = null;
                try {
                    if (op.startsWith("create")) {
                        Map<Integer, List<Integer>> assignments = new HashMap<>();
                        List<List<Integer>> replicas = parse(argv[i + 2]);
                        for (int p = 0; p < replicas.size(); p++) assignments.put(p, replicas.get(p));
                        admin.createTopics(List.of(new NewTopic(topic, assignments)),
                                           new CreateTopicsOptions().validateOnly(validate))
                             .all().get(30, TimeUnit.SECONDS);
                    } else if (op.startsWith("grow")) {
                        NewPartitions grown = NewPartitions.increaseTo(Integer.parseInt(argv[i + 2]), parse(argv[i + 3]));
                        admin.createPartitions(Map.of(topic, grown), new CreatePartitionsOptions().validateOnly(validate))
                             .all().get(30, TimeUnit.SECONDS);
                    } else {
                        throw new IllegalArgumentException("unknown operation " + op);
                    }
                } catch (ExecutionException e) {
                    error = e.getCause().getClass().getSimpleName();
                    message = e.getCause().getMessage();
                }
                i += step;
                System.out.println("{\"op\":" + json(op) + ",\"topic\":" + json(topic) + ",\"error\":" + json(error)
                                   + ",\"message\":" + json(message) + "}");
            }
        }
    }

    static List<List<Integer>> parse(String assignment) {
        List<List<Integer>> out = new ArrayList<>();
        if (assignment.equals("-")) return out;
        for (String partition : assignment.split(",")) {
            List<Integer> replicas = new ArrayList<>();
            for (String broker : partition.split("\\+")) replicas.add(Integer.parseInt(broker));
            out.add(replicas);
        }
        return out;
    }

    static String json(String s) {
        if (s == null) return "null";
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }
}
