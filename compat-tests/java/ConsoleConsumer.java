// The calls kafka-console-consumer (tools/ConsoleConsumer) makes for
//   --bootstrap-server B --topic T --group G --from-beginning --max-messages N [--timeout-ms MS]
//   [--property print.key=true] [--property print.partition=true] [--property print.offset=true]
//   [--consumer-property K=V ...] (e.g. group.protocol=consumer)
// KafkaConsumer with group.id=G, auto.offset.reset=earliest (--from-beginning), byte-array deserializers and the
// default enable.auto.commit=true; subscribe([T]); poll until N messages were printed (a poll with no record
// within --timeout-ms ends the run with an error, as the tool does); close() (which commits the consumed
// positions). Each record is printed by DefaultMessageFormatter's rules: "Partition:p\t", "Offset:o\t",
// key + "\t" when asked for, then the value. "Processed a total of N messages" goes to stderr.
//
// Usage: java -cp <kafka-clients jars> ConsoleConsumer.java <the options above>

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class ConsoleConsumer {
    public static void main(String[] argv) {
        Map<String, String> opts = new HashMap<>();
        Map<String, String> props = new HashMap<>();
        Map<String, String> consumerProps = new HashMap<>();
        boolean fromBeginning = false;
        for (int i = 0; i < argv.length; i++) {
            String a = argv[i];
            if (a.equals("--from-beginning")) fromBeginning = true;
            else if (a.equals("--property")) {
                String[] kv = argv[++i].split("=", 2);
                props.put(kv[0], kv[1]);
            } else if (a.equals("--consumer-property")) {
                String[] kv = argv[++i].split("=", 2);
                consumerProps.put(kv[0], kv[1]);
            } else opts.put(a.replaceFirst("^--", ""), argv[++i]);
        }
        long maxMessages = Long.parseLong(opts.getOrDefault("max-messages", "-1"));
        long timeoutMs = Long.parseLong(opts.getOrDefault("timeout-ms", "-1"));
        boolean printKey = Boolean.parseBoolean(props.getOrDefault("print.key", "false"));
        boolean printPartition = Boolean.parseBoolean(props.getOrDefault("print.partition", "false"));
        boolean printOffset = Boolean.parseBoolean(props.getOrDefault("print.offset", "false"));

        Properties config = new Properties();
        config.put("bootstrap.servers", opts.get("bootstrap-server"));
        config.put("group.id", opts.get("group"));
        config.put("auto.offset.reset", fromBeginning ? "earliest" : "latest");
        config.put("key.deserializer", ByteArrayDeserializer.class.getName());
        config.put("value.deserializer", ByteArrayDeserializer.class.getName());
        config.putAll(consumerProps);

        long processed = 0;
        int code = 0;
        KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(config);
        try {
            consumer.subscribe(List.of(opts.get("topic")));
            Duration pollTimeout = timeoutMs >= 0 ? Duration.ofMillis(timeoutMs) : Duration.ofMillis(Long.MAX_VALUE);
            outer:
            while (maxMessages < 0 || processed < maxMessages) {
                var records = consumer.poll(pollTimeout);
                if (records.isEmpty()) {
                    System.err.println("ERROR Error processing message, terminating consumer process:  "
                            + "org.apache.kafka.common.errors.TimeoutException");
                    code = 1;
                    break;
                }
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    StringBuilder line = new StringBuilder();
                    if (printPartition) line.append("Partition:").append(r.partition()).append('\t');
                    if (printOffset) line.append("Offset:").append(r.offset()).append('\t');
                    if (printKey) line.append(text(r.key())).append('\t');
                    line.append(text(r.value()));
                    System.out.println(line);
                    processed++;
                    if (maxMessages >= 0 && processed >= maxMessages) break outer;
                }
            }
        } finally {
            System.out.flush();
            consumer.close();
            System.err.println("Processed a total of " + processed + " messages");
        }
        System.exit(code);
    }

    static String text(byte[] b) {
        return b == null ? "null" : new String(b, StandardCharsets.UTF_8);
    }
}
