// The Java Admin's transaction calls, as kafka-transactions.sh makes them: listTransactions (ListTransactions to every
// broker) and describeTransactions (FindCoordinator key type 1, then DescribeTransactions).
//
// Usage: java -cp <kafka-clients jars> TransactionsAdmin.java BOOTSTRAP TRANSACTIONAL_ID [PATTERN]
// Output: one JSON object per line: "listed" per transaction (id, producerId, state), with PATTERN "matched" per
// transaction listTransactions filtered by that transactional id pattern answers (KIP-1152), then "described" for
// TRANSACTIONAL_ID (state, producerId, producerEpoch, timeoutMs, partitions as "topic-partition"), or "error"
// (the exception's class and message).

import java.util.TreeSet;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ListTransactionsOptions;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionListing;

public class TransactionsAdmin {
    public static void main(String[] argv) throws Exception {
        String bootstrap = argv[0], tid = argv[1];
        java.util.Properties config = new java.util.Properties();
        config.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(config)) {
            for (TransactionListing t : admin.listTransactions().all().get()) {
                System.out.println("{\"event\":\"listed\",\"id\":" + json(t.transactionalId()) + ",\"producerId\":"
                        + t.producerId() + ",\"state\":" + json(t.state().toString()) + "}");
            }
            if (argv.length > 2) {
                ListTransactionsOptions options = new ListTransactionsOptions().filterOnTransactionalIdPattern(argv[2]);
                for (TransactionListing t : admin.listTransactions(options).all().get()) {
                    System.out.println("{\"event\":\"matched\",\"id\":" + json(t.transactionalId()) + "}");
                }
            }
            TransactionDescription d = admin.describeTransactions(java.util.List.of(tid)).description(tid).get();
            TreeSet<String> partitions = new TreeSet<>();
            d.topicPartitions().forEach(tp -> partitions.add(tp.toString()));
            StringBuilder list = new StringBuilder("[");
            for (String p : partitions) list.append(list.length() > 1 ? "," : "").append(json(p));
            System.out.println("{\"event\":\"described\",\"state\":" + json(d.state().toString()) + ",\"producerId\":"
                    + d.producerId() + ",\"producerEpoch\":" + d.producerEpoch() + ",\"timeoutMs\":"
                    + d.transactionTimeoutMs() + ",\"partitions\":" + list.append("]") + "}");
        } catch (ExecutionException e) {
            System.out.println("{\"event\":\"error\",\"name\":" + json(e.getCause().getClass().getSimpleName())
                    + ",\"message\":" + json(String.valueOf(e.getCause().getMessage())) + "}");
        }
    }

    static String json(String s) {
        StringBuilder out = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') out.append('\\').append(c);
            else if (c < 0x20) out.append(String.format("\\u%04x", (int) c));
            else out.append(c);
        }
        return out.append('"').toString();
    }
}
