// The Admin's createTopics, one topic at a time, in the order given: each outcome printed as one JSON line
// {"topic": ..., "error": null | the exception's class, "message": ...}.
//
// Usage: java -cp <kafka-clients jars> CreateTopics.java BOOTSTRAP TOPIC...

import java.util.List;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;

public class CreateTopics {
    public static void main(String[] argv) throws Exception {
        Properties config = new Properties();
        config.put("bootstrap.servers", argv[0]);
        config.put("request.timeout.ms", "20000");
        config.put("default.api.timeout.ms", "20000");
        try (Admin admin = Admin.create(config)) {
            for (int i = 1; i < argv.length; i++) {
                String error = null, message = null;
                try {
                    admin.createTopics(List.of(new NewTopic(argv[i], 1, (short) 1))).all().get(30, TimeUnit.SECONDS);
                } catch (ExecutionException e) {
                    error = e.getCause().getClass().getSimpleName();
                    message = e.getCause().getMessage();
                }
                System.out.println("{\"topic\":" + json(argv[i]) + ",\"error\":" + json(error) + ",\"message\":"
                                   + json(message) + "}");
            }
        }
    }

    static String json(String s) {
        if (s == null) return "null";
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }
}
