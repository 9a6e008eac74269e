// The Admin's describeCluster (Kafka's DescribeCluster API, key 60): one JSON line
// {"cluster_id": ..., "controller": <id or -1>, "nodes": [[id, "host", port], ...]} (nodes by id).
//
// Usage: java -cp <kafka-clients jars> DescribeClusterNodes.java BOOTSTRAP

import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.common.Node;

public class DescribeClusterNodes {
    public static void main(String[] argv) throws Exception {
        Properties config = new Properties();
        config.put("bootstrap.servers", argv[0]);
        config.put("request.timeout.ms", "20000");
        config.put("default.api.timeout.ms", "20000");
        try (Admin admin = Admin.create(config)) {
            DescribeClusterResult result = admin.describeCluster();
            List<Node> nodes = new ArrayList<>(result.nodes().get(30, TimeUnit.SECONDS));
            nodes.sort(Comparator.comparingInt(Node::id));
            Node controller = result.controller().get(30, TimeUnit.SECONDS);
            StringBuilder out = new StringBuilder();
            out.append("{\"cluster_id\":\"").append(result.clusterId().get(30, TimeUnit.SECONDS)).append("\"");
            out.append(",\"controller\":").append(controller == null ? -1 : controller.id()).append(",\"nodes\":[");
            for (int i = 0; i < nodes.size(); i++) {
                Node n = nodes.get(i);
                out.append(i == 0 ? "" : ",").append("[").append(n.id()).append(",\"").append(n.host())
                   .append("\",").append(n.port()).append("]");
            }
            System.out.println(out.append("]}"));
        }
    }
}
