// kafka-clients round trip over a secured listener: Admin, KafkaProducer and KafkaConsumer configured from a
// client properties file (security.protocol, ssl.* / sasl.*), as an application passes them.
//
// Usage: java -cp <kafka-clients jars> SecureRoundTrip.java BOOTSTRAP TOPIC COUNT CLIENT_PROPERTIES
// Creates TOPIC (1 partition; an existing one is fine) and prints "cluster" (host:port of each node DescribeCluster
// names), produces COUNT records (value "value-<i>") and prints "produced", reads partition 0 from the beginning
// and prints "consumed" (count, values_ok). Any exception is one "error" event (the exception's class and
// message, the root cause's too) and exit code 2; every call is bounded (10 s timeouts).

import java.io.FileReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class SecureRoundTrip {
    public static void main(String[] argv) throws Exception {
        String bootstrap = argv[0], topic = argv[1];
        int count = Integer.parseInt(argv[2]);
        Properties base = new Properties();
        try (FileReader reader = new FileReader(argv[3])) {
            base.load(reader);
        }
        base.put("bootstrap.servers", bootstrap);
        base.put("request.timeout.ms", "10000");
        base.put("default.api.timeout.ms", "10000");
        try {
            run(base, topic, count);
        } catch (Throwable e) {
            Throwable cause = e instanceof ExecutionException && e.getCause() != null ? e.getCause() : e;
            Throwable root = cause;
            while (root.getCause() != null) root = root.getCause();
            println("{\"event\":\"error\",\"name\":" + json(cause.getClass().getSimpleName()) + ",\"message\":"
                    + json(cause.getMessage()) + ",\"root\":" + json(root.getClass().getSimpleName() + ": "
                    + root.getMessage()) + "}");
            System.exit(2);
        }
    }

    static void run(Properties base, String topic, int count) throws Exception {
        Properties adminConfig = (Properties) base.clone();
        try (Admin admin = Admin.create(adminConfig)) {
            List<String> nodes = new ArrayList<>();
            for (Node node : admin.describeCluster().nodes().get()) nodes.add(json(node.host() + ":" + node.port()));
            println("{\"event\":\"cluster\",\"nodes\":[" + String.join(",", nodes) + "]}");
            try {
                admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get();
            } catch (ExecutionException e) {
                if (!(e.getCause() instanceof TopicExistsException)) throw e;
            }
        }
        Properties producerConfig = (Properties) base.clone();
        producerConfig.put("key.serializer", ByteArraySerializer.class.getName());
        producerConfig.put("value.serializer", ByteArraySerializer.class.getName());
        producerConfig.put("max.block.ms", "10000");
        producerConfig.put("delivery.timeout.ms", "20000");
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(producerConfig)) {
            for (int i = 0; i < count; i++) {
                producer.send(new ProducerRecord<>(topic, 0, null, ("value-" + i).getBytes(StandardCharsets.UTF_8))).get();
            }
        }
        println("{\"event\":\"produced\",\"count\":" + count + "}");
        Properties consumerConfig = (Properties) base.clone();
        consumerConfig.put("key.deserializer", ByteArrayDeserializer.class.getName());
        consumerConfig.put("value.deserializer", ByteArrayDeserializer.class.getName());
        consumerConfig.put("enable.auto.commit", "false");
        List<String> values = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(consumerConfig)) {
            TopicPartition partition = new TopicPartition(topic, 0);
            consumer.assign(List.of(partition));
            consumer.seekToBeginning(List.of(partition));
            long deadline = System.currentTimeMillis() + 20000;
            while (values.size() < count && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> record : consumer.poll(Duration.ofMillis(500))) {
                    values.add(new String(record.value(), StandardCharsets.UTF_8));
                }
            }
        }
        boolean ok = values.size() == count;
        for (int i = 0; ok && i < count; i++) ok = values.get(i).equals("value-" + i);
        println("{\"event\":\"consumed\",\"count\":" + values.size() + ",\"values_ok\":" + ok + "}");
    }

    static String json(String s) {
        if (s == null) return "null";
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }

    static synchronized void println(String line) {
        System.out.println(line);
        System.out.flush();
    }
}
