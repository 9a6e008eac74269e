// The Admin calls of kafka-configs --entity-type users/clients --alter --add-config / --delete-config and
// --describe (KIP-546: alterClientQuotas, describeClientQuotas) on the real kafka-clients.
// Prints one JSON object per step: {"step": ..., ...}; any exception ends the run with {"step": "error", ...}.
//
// Usage: java -cp <kafka-clients jars> ClientQuotas.java <bootstrap> round-trip
//        java -cp <kafka-clients jars> ClientQuotas.java <bootstrap> set-clients <client-id>:<key>=<value> ...

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterClientQuotasOptions;
import org.apache.kafka.common.quota.ClientQuotaAlteration;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.apache.kafka.common.quota.ClientQuotaFilter;
import org.apache.kafka.common.quota.ClientQuotaFilterComponent;

public class ClientQuotas {
    static void emit(String step, String json) {
        System.out.println("{\"step\": \"" + step + "\"" + (json.isEmpty() ? "" : ", " + json) + "}");
        System.out.flush();
    }

    static ClientQuotaEntity entity(String user, String clientId, boolean defaultUser) {
        Map<String, String> parts = new HashMap<>();
        if (user != null || defaultUser) parts.put(ClientQuotaEntity.USER, user);  // null name: the default entity
        if (clientId != null) parts.put(ClientQuotaEntity.CLIENT_ID, clientId);
        return new ClientQuotaEntity(parts);
    }

    static ClientQuotaAlteration alteration(ClientQuotaEntity e, String key, Double value) {
        return new ClientQuotaAlteration(e, List.of(new ClientQuotaAlteration.Op(key, value)));
    }

    static String describe(Admin admin, ClientQuotaFilter filter) throws Exception {
        Map<ClientQuotaEntity, Map<String, Double>> got = admin.describeClientQuotas(filter).entities()
                .get(30, TimeUnit.SECONDS);
        Map<String, String> out = new TreeMap<>();
        got.forEach((e, values) -> {
            List<String> parts = new ArrayList<>();
            new TreeMap<>(e.entries()).forEach((k, v) -> parts.add(k + "=" + (v == null ? "<default>" : v)));
            List<String> vs = new ArrayList<>();
            new TreeMap<>(values).forEach((k, v) -> vs.add("\"" + k + "\": " + v));
            out.put(String.join(",", parts), "{" + String.join(", ", vs) + "}");
        });
        List<String> items = new ArrayList<>();
        out.forEach((k, v) -> items.add("\"" + k + "\": " + v));
        return "\"entities\": {" + String.join(", ", items) + "}";
    }

    public static void main(String[] argv) throws Exception {
        Properties config = new Properties();
        config.put("bootstrap.servers", argv[0]);
        try (Admin admin = Admin.create(config)) {
            if (argv[1].equals("set-clients")) {
                List<ClientQuotaAlteration> changes = new ArrayList<>();
                for (int i = 2; i < argv.length; i++) {  // <client-id>:<key>=<value>
                    String[] idRest = argv[i].split(":", 2), keyValue = idRest[1].split("=", 2);
                    changes.add(alteration(entity(null, idRest[0], false), keyValue[0], Double.parseDouble(keyValue[1])));
                }
                admin.alterClientQuotas(changes).all().get(30, TimeUnit.SECONDS);
                emit("set", describe(admin, ClientQuotaFilter.all()));
                return;
            }
            ClientQuotaEntity aliceApp = entity("alice", "app", false);
            ClientQuotaEntity defaultUser = entity(null, null, true);
            admin.alterClientQuotas(List.of(
                    new ClientQuotaAlteration(aliceApp, List.of(
                            new ClientQuotaAlteration.Op("producer_byte_rate", 1048576.0),
                            new ClientQuotaAlteration.Op("consumer_byte_rate", 2097152.0))),
                    new ClientQuotaAlteration(defaultUser, List.of(
                            new ClientQuotaAlteration.Op("request_percentage", 200.0)))))
                    .all().get(30, TimeUnit.SECONDS);
            emit("altered", describe(admin, ClientQuotaFilter.all()));
            emit("alice", describe(admin, ClientQuotaFilter.contains(List.of(
                    ClientQuotaFilterComponent.ofEntity(ClientQuotaEntity.USER, "alice")))));
            emit("default_user_only", describe(admin, ClientQuotaFilter.containsOnly(List.of(
                    ClientQuotaFilterComponent.ofDefaultEntity(ClientQuotaEntity.USER)))));
            admin.alterClientQuotas(List.of(alteration(entity("bob", null, false), "producer_byte_rate", 5.0)),
                    new AlterClientQuotasOptions().validateOnly(true)).all().get(30, TimeUnit.SECONDS);
            emit("validated_only", describe(admin, ClientQuotaFilter.contains(List.of(
                    ClientQuotaFilterComponent.ofEntity(ClientQuotaEntity.USER, "bob")))));
            try {
                admin.alterClientQuotas(List.of(alteration(entity("carol", null, false), "producer_byte_rate", -1.0)))
                        .all().get(30, TimeUnit.SECONDS);
                emit("refused", "\"error\": null");
            } catch (ExecutionException e) {
                emit("refused", "\"error\": \"" + e.getCause().getClass().getSimpleName() + "\"");
            }
            admin.alterClientQuotas(List.of(new ClientQuotaAlteration(aliceApp, List.of(
                    new ClientQuotaAlteration.Op("producer_byte_rate", null),
                    new ClientQuotaAlteration.Op("consumer_byte_rate", null))),
                    alteration(defaultUser, "request_percentage", null))).all().get(30, TimeUnit.SECONDS);
            emit("removed", describe(admin, ClientQuotaFilter.all()));
        } catch (Exception e) {
            emit("error", "\"message\": \"" + String.valueOf(e).replace("\\", "\\\\").replace("\"", "'") + "\"");
            System.exit(1);
        }
    }
}
