// The Admin calls of kafka-acls (--add / --list / --remove) on the real kafka-clients: createAcls of a few bindings
// (LITERAL, PREFIXED, the wildcard topic, a DENY, a group and the cluster), describeAcls with filters (ANY, a MATCH
// on one topic, a principal), deleteAcls with a filter, then describeAcls again.
// Prints one JSON object per step: {"step": ..., "acls": [[type, name, pattern, principal, host, op, perm], ...]};
// an exception ends the run with {"step": "error", "class": ..., "message": ...} and exit code 1.
//
// Usage: java -cp <kafka-clients jars> AclsAdmin.java <bootstrap>

import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourcePatternFilter;
import org.apache.kafka.common.resource.ResourceType;

public class AclsAdmin {
    static AclBinding acl(ResourceType type, String name, PatternType pattern, String principal, AclOperation op,
                          AclPermissionType perm) {
        return new AclBinding(new ResourcePattern(type, name, pattern), new AccessControlEntry(principal, "*", op, perm));
    }

    static String json(Collection<AclBinding> acls) {
        List<String> out = new ArrayList<>();
        for (AclBinding b : acls) {
            out.add("[\"" + b.pattern().resourceType() + "\", \"" + b.pattern().name() + "\", \"" + b.pattern().patternType()
                    + "\", \"" + b.entry().principal() + "\", \"" + b.entry().host() + "\", \"" + b.entry().operation()
                    + "\", \"" + b.entry().permissionType() + "\"]");
        }
        out.sort(null);
        return "[" + String.join(", ", out) + "]";
    }

    static void emit(String step, Collection<AclBinding> acls) {
        System.out.println("{\"step\": \"" + step + "\", \"acls\": " + json(acls) + "}");
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("request.timeout.ms", "20000");
        props.put("default.api.timeout.ms", "30000");
        try (Admin admin = Admin.create(props)) {
            List<AclBinding> bindings = List.of(
                acl(ResourceType.TOPIC, "orders", PatternType.LITERAL, "User:alice", AclOperation.READ, AclPermissionType.ALLOW),
                acl(ResourceType.TOPIC, "logs.", PatternType.PREFIXED, "User:alice", AclOperation.WRITE, AclPermissionType.ALLOW),
                acl(ResourceType.TOPIC, "*", PatternType.LITERAL, "User:*", AclOperation.DESCRIBE, AclPermissionType.ALLOW),
                acl(ResourceType.TOPIC, "orders", PatternType.LITERAL, "User:bob", AclOperation.ALL, AclPermissionType.DENY),
                acl(ResourceType.GROUP, "app-", PatternType.PREFIXED, "User:alice", AclOperation.READ, AclPermissionType.ALLOW),
                acl(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL, "User:admin", AclOperation.ALTER,
                    AclPermissionType.ALLOW));
            admin.createAcls(bindings).all().get(30, TimeUnit.SECONDS);
            emit("created", bindings);
            emit("listed", admin.describeAcls(AclBindingFilter.ANY).values().get(30, TimeUnit.SECONDS));
            AclBindingFilter orders = new AclBindingFilter(
                new ResourcePatternFilter(ResourceType.TOPIC, "orders", PatternType.MATCH), AccessControlEntryFilter.ANY);
            emit("matching_orders", admin.describeAcls(orders).values().get(30, TimeUnit.SECONDS));
            AclBindingFilter alice = new AclBindingFilter(ResourcePatternFilter.ANY,
                new AccessControlEntryFilter("User:alice", null, AclOperation.ANY, AclPermissionType.ANY));
            emit("of_alice", admin.describeAcls(alice).values().get(30, TimeUnit.SECONDS));
            emit("deleted", admin.deleteAcls(List.of(alice)).all().get(30, TimeUnit.SECONDS));
            emit("after_delete", admin.describeAcls(AclBindingFilter.ANY).values().get(30, TimeUnit.SECONDS));
            try {
                admin.createAcls(List.of(acl(ResourceType.CLUSTER, "other", PatternType.LITERAL, "User:x",
                    AclOperation.ALTER, AclPermissionType.ALLOW))).all().get(30, TimeUnit.SECONDS);
                emit("bad_created", List.of());
            } catch (ExecutionException e) {
                System.out.println("{\"step\": \"bad_refused\", \"class\": \"" + e.getCause().getClass().getSimpleName() + "\"}");
            }
        } catch (Exception e) {
            Throwable c = e instanceof ExecutionException && e.getCause() != null ? e.getCause() : e;
            System.out.println("{\"step\": \"error\", \"class\": \"" + c.getClass().getSimpleName() + "\", \"message\": \""
                               + String.valueOf(c.getMessage()).replace("\"", "'") + "\"}");
            System.exit(1);
        }
    }
}
