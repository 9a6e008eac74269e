// A KafkaProducer with the client's DEFAULT settings (idempotence on and acks=all in 3.x and 4.x) plus
// compression.type: what an application or kafka-console-producer --compression-codec does.
//
// Usage: java -cp <kafka-clients jars> Producer.java BOOTSTRAP TOPIC CODEC COUNT [--first N] [--partitions 3]
//            [--transactional-id ID] [--max-block-ms MS] [--pace-ms MS]
// --pace-ms: a pause after each send() (a run spread over time, so nodes can be killed while it runs).
// Writes record i for i in [first, first + count), the same records as clients/ck_produce.py: partition
// i % partitions, timestamp BASE_TS + i, key "k" + (i % 5) (null when i % 7 == 0), value
// {"codec":CODEC,"i":i,"text":"record i of the walgate produce scenario"}, headers i=<i> and nil=null.
// Output: one JSON object per line: "delivery" per callback (index, partition, offset, error), then
// "summary" (produced, delivered, errors) after close(). With --transactional-id it only calls
// initTransactions() and prints "transactions" (ok, or the exception's class and message, and the seconds it took).

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class Producer {
    static final long BASE_TS = 1_700_000_000_000L;

    public static void main(String[] argv) throws Exception {
        String bootstrap = argv[0], topic = argv[1], codec = argv[2];
        int count = Integer.parseInt(argv[3]);
        Map<String, String> opts = new HashMap<>();
        for (int i = 4; i + 1 < argv.length; i += 2) opts.put(argv[i].replaceFirst("^--", ""), argv[i + 1]);
        int first = Integer.parseInt(opts.getOrDefault("first", "0"));
        int partitions = Integer.parseInt(opts.getOrDefault("partitions", "3"));
        long paceMs = Long.parseLong(opts.getOrDefault("pace-ms", "0"));

        Properties config = new Properties();
        config.put("bootstrap.servers", bootstrap);
        config.put("key.serializer", ByteArraySerializer.class.getName());
        config.put("value.serializer", ByteArraySerializer.class.getName());
        config.put("compression.type", codec);
        if (opts.containsKey("max-block-ms")) config.put("max.block.ms", opts.get("max-block-ms"));
        long started = System.nanoTime();

        if (opts.containsKey("transactional-id")) {
            config.put("transactional.id", opts.get("transactional-id"));
            try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(config)) {
                producer.initTransactions();
                println("{\"event\":\"transactions\",\"ok\":true,\"seconds\":" + seconds(started) + "}");
            } catch (Exception e) {
                println("{\"event\":\"transactions\",\"ok\":false,\"name\":" + json(e.getClass().getSimpleName())
                        + ",\"message\":" + json(e.getMessage()) + ",\"seconds\":" + seconds(started) + "}");
            }
            return;
        }

        List<String> errors = new ArrayList<>();
        int[] delivered = {0};
        int produced = 0;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(config)) {
            for (int i = first; i < first + count; i++) {
                byte[] key = i % 7 == 0 ? null : ("k" + (i % 5)).getBytes(StandardCharsets.UTF_8);
                byte[] value = ("{\"codec\":\"" + codec + "\",\"i\":" + i + ",\"text\":\"record " + i
                        + " of the walgate produce scenario\"}").getBytes(StandardCharsets.UTF_8);
                ProducerRecord<byte[], byte[]> record = new ProducerRecord<>(topic, i % partitions, BASE_TS + i, key, value,
                        List.of(new RecordHeader("i", String.valueOf(i).getBytes(StandardCharsets.UTF_8)),
                                new RecordHeader("nil", (byte[]) null)));
                final int index = i, partition = i % partitions;
                producer.send(record, (md, exc) -> {
                    String error = exc == null ? null : exc.getClass().getSimpleName() + ": " + exc.getMessage();
                    synchronized (errors) {
                        if (error == null) delivered[0]++;
                        else errors.add("{\"index\":" + index + ",\"error\":" + json(error) + "}");
                    }
                    println("{\"event\":\"delivery\",\"index\":" + index + ",\"partition\":"
                            + (md == null ? partition : md.partition()) + ",\"offset\":" + (md == null ? -1 : md.offset())
                            + ",\"error\":" + json(error) + "}");
                });
                produced++;
                if (paceMs > 0) Thread.sleep(paceMs);
            }
            producer.flush();
            producer.close(Duration.ofSeconds(30));
        }
        synchronized (errors) {
            println("{\"event\":\"summary\",\"produced\":" + produced + ",\"delivered\":" + delivered[0] + ",\"errors\":["
                    + String.join(",", errors.subList(0, Math.min(10, errors.size()))) + "],\"seconds\":" + seconds(started) + "}");
        }
    }

    static String seconds(long started) {
        return String.format(java.util.Locale.ROOT, "%.3f", (System.nanoTime() - started) / 1e9);
    }

    static synchronized void println(String line) {
        System.out.println(line);
        System.out.flush();
    }

    static String json(String s) {
        if (s == null) return "null";
        StringBuilder out = new StringBuilder("\"");
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"': out.append("\\\""); break;
                case '\\': out.append("\\\\"); break;
                case '\n': out.append("\\n"); break;
                case '\r': out.append("\\r"); break;
                case '\t': out.append("\\t"); break;
                default:
                    if (c < 0x20) out.append(String.format("\\u%04x", (int) c));
                    else out.append(c);
            }
        }
        return out.append('"').toString();
    }
}
