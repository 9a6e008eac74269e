// The Admin's describeConfigs of a broker, as kafka-configs --describe --all --entity-type brokers does: one JSON
// line per config name asked for, {"name", "value", "source", "sensitive", "read_only"}, or {"name", "missing": true}.
//
// Usage: java -cp <kafka-clients jars> BrokerConfigs.java BOOTSTRAP BROKER_ID NAME...

import java.util.List;
import java.util.Properties;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.common.config.ConfigResource;

public class BrokerConfigs {
    public static void main(String[] argv) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", argv[0]);
        ConfigResource broker = new ConfigResource(ConfigResource.Type.BROKER, argv[1]);
        try (Admin admin = Admin.create(props)) {
            Config config = admin.describeConfigs(List.of(broker)).all().get(30, TimeUnit.SECONDS).get(broker);
            for (int i = 2; i < argv.length; i++) {
                ConfigEntry e = config.get(argv[i]);
                if (e == null) {
                    System.out.println("{\"name\":" + json(argv[i]) + ",\"missing\":true}");
                } else {
                    System.out.println("{\"name\":" + json(e.name()) + ",\"value\":" + json(e.value()) + ",\"source\":"
                                       + json(e.source().name()) + ",\"type\":" + json(e.type().name())
                                       + ",\"sensitive\":" + e.isSensitive() + ",\"read_only\":" + e.isReadOnly() + "}");
                }
            }
        }
    }

    static String json(String s) {
        if (s == null) return "null";
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }
}
