// A transactional KafkaProducer as an application runs one (transactional.id set: idempotence, acks=all).
//
// Usage: java -cp <kafka-clients jars> TransactionalProducer.java BOOTSTRAP TOPIC TRANSACTIONAL_ID [--leave-open]
// With --leave-open: initTransactions, a transaction of "open-0".."open-2" (partition i % 2) sent and flushed, step
// "open", then the JVM halts without ending it (a producer that died mid-transaction). Otherwise:
// 1. initTransactions; a transaction of 3 records "commit-0".."commit-2" (partition i % 2), committed;
// 2. a transaction of 2 records "abort-0", "abort-1", aborted;
// 3. a second producer with the same transactional.id initialises (the first is now a zombie); the first begins a
//    transaction, sends "zombie-0" and commits: that must fail (ProducerFencedException under transaction version 1;
//    under version 2 the fenced send is InvalidProducerEpochException, abortable), then aborts: ProducerFencedException;
// 4. the second producer commits "fenced-by-0".
// Output: one JSON object per line: "step" (name, ok, and the exception's class and message when it failed).
// Exit code 0 whatever the steps answered (the test reads them), non-zero on anything else.

import java.time.Duration;
import java.util.Properties;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

public class TransactionalProducer {
    public static void main(String[] argv) throws Exception {
        String bootstrap = argv[0], topic = argv[1], tid = argv[2];
        if (argv.length > 3 && argv[3].equals("--leave-open")) {
            KafkaProducer<String, String> open = producer(bootstrap, tid);
            step("open", () -> {
                open.initTransactions();
                open.beginTransaction();
                for (int i = 0; i < 3; i++) open.send(new ProducerRecord<>(topic, i % 2, "k" + i, "open-" + i));
                open.flush();
            });
            Runtime.getRuntime().halt(0);
        }
        try (KafkaProducer<String, String> first = producer(bootstrap, tid)) {
            step("init", () -> first.initTransactions());
            step("commit", () -> {
                first.beginTransaction();
                for (int i = 0; i < 3; i++) first.send(new ProducerRecord<>(topic, i % 2, "k" + i, "commit-" + i));
                first.commitTransaction();
            });
            step("abort", () -> {
                first.beginTransaction();
                for (int i = 0; i < 2; i++) first.send(new ProducerRecord<>(topic, i % 2, "k" + i, "abort-" + i));
                first.flush();
                first.abortTransaction();
            });
            try (KafkaProducer<String, String> second = producer(bootstrap, tid)) {
                step("second-init", () -> second.initTransactions());
                step("zombie-commit", () -> {
                    first.beginTransaction();
                    first.send(new ProducerRecord<>(topic, 0, "z", "zombie-0"));
                    first.commitTransaction();
                });
                step("zombie-abort", () -> first.abortTransaction());
                step("second-commit", () -> {
                    second.beginTransaction();
                    second.send(new ProducerRecord<>(topic, 1, "s", "fenced-by-0"));
                    second.commitTransaction();
                });
            }
        }
    }

    interface Step {
        void run() throws Exception;
    }

    static void step(String name, Step step) {
        try {
            step.run();
            System.out.println("{\"event\":\"step\",\"name\":" + json(name) + ",\"ok\":true}");
        } catch (Exception e) {
            Throwable cause = e.getCause() != null && e instanceof java.util.concurrent.ExecutionException
                    ? e.getCause() : e;
            System.out.println("{\"event\":\"step\",\"name\":" + json(name) + ",\"ok\":false,\"error\":"
                    + json(cause.getClass().getSimpleName()) + ",\"message\":" + json(String.valueOf(cause.getMessage()))
                    + "}");
        }
        System.out.flush();
    }

    static KafkaProducer<String, String> producer(String bootstrap, String tid) {
        Properties config = new Properties();
        config.put("bootstrap.servers", bootstrap);
        config.put("key.serializer", StringSerializer.class.getName());
        config.put("value.serializer", StringSerializer.class.getName());
        config.put("transactional.id", tid);
        config.put("transaction.timeout.ms", "60000");
        config.put("max.block.ms", "30000");
        return new KafkaProducer<>(config);
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
