// kafka-clients over SASL_PLAINTEXT with OAUTHBEARER: Kafka's own OAuthBearerLoginCallbackHandler fetches the signed
// JWT from a file:// token endpoint (sasl.oauthbearer.token.endpoint.url; Kafka 4 reads a URL only when the JVM
// system property org.apache.kafka.sasl.oauthbearer.allowed.urls allows it, set here for the two files given).
// Prints one JSON object per step: {"step": ...}; an exception ends the run with {"step": "error", "type": <the
// simple name of the first SaslAuthenticationException in its causes, else of the exception>}.
//
// Usage: java -cp <kafka-clients jars> OAuthBearerClients.java <bootstrap> <topic> <token file> <refused token file>...
// A producer and a consumer log in with the first token, produce and read back a record, then keep working for a few
// seconds (the broker's sessions are short: KIP-368 re-authentication along the way); a producer with each refused
// token fails (one step "refused" each, in order).

import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.SaslAuthenticationException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class OAuthBearerClients {
    static void emit(String step, String json) {
        System.out.println("{\"step\": \"" + step + "\"" + (json.isEmpty() ? "" : ", " + json) + "}");
        System.out.flush();
    }

    static Properties props(String bootstrap, String tokenUrl) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("security.protocol", "SASL_PLAINTEXT");
        p.put("sasl.mechanism", "OAUTHBEARER");
        p.put("sasl.login.callback.handler.class",
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler");
        p.put("sasl.oauthbearer.token.endpoint.url", tokenUrl);
        p.put("sasl.jaas.config", "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required ;");
        p.put("max.block.ms", "15000");
        p.put("request.timeout.ms", "15000");
        p.put("default.api.timeout.ms", "15000");
        return p;
    }

    static KafkaProducer<String, String> producer(Properties base) {
        Properties p = new Properties();
        p.putAll(base);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        return new KafkaProducer<>(p);
    }

    static KafkaConsumer<String, String> consumer(Properties base, String topic) {
        Properties p = new Properties();
        p.putAll(base);
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        p.put("enable.auto.commit", "false");
        KafkaConsumer<String, String> c = new KafkaConsumer<>(p);
        TopicPartition tp = new TopicPartition(topic, 0);
        c.assign(List.of(tp));
        c.seekToBeginning(List.of(tp));
        return c;
    }

    static boolean consumed(KafkaConsumer<String, String> c, String value) {
        long deadline = System.currentTimeMillis() + 20_000;
        while (System.currentTimeMillis() < deadline) {
            for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
                if (r.value().equals(value)) return true;
            }
        }
        return false;
    }

    static String errorType(Exception e) {
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (t instanceof SaslAuthenticationException) return t.getClass().getSimpleName();
        }
        return e.getClass().getSimpleName();
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1];
        String tokenUrl = Path.of(args[2]).toUri().toString();
        List<String> refusedUrls = new ArrayList<>();
        for (int i = 3; i < args.length; i++) refusedUrls.add(Path.of(args[i]).toUri().toString());
        System.setProperty("org.apache.kafka.sasl.oauthbearer.allowed.urls",
                tokenUrl + "," + String.join(",", refusedUrls));
        try {
            Properties base = props(bootstrap, tokenUrl);
            int records = 0;
            try (KafkaProducer<String, String> p = producer(base);
                 KafkaConsumer<String, String> c = consumer(base, topic)) {
                for (int i = 0; i < 3; i++) {
                    String value = "hello from java over OAUTHBEARER " + i;
                    p.send(new ProducerRecord<>(topic, 0, null, value)).get(20, TimeUnit.SECONDS);
                    if (!consumed(c, value)) throw new IllegalStateException("record " + i + " did not come back");
                    records++;
                    Thread.sleep(1000);  // sessions last 1.5 s: both clients re-authenticate along the way
                }
            }
            emit("consumed", "\"records\": " + records);
            for (String refusedUrl : refusedUrls) {
                try (KafkaProducer<String, String> p = producer(props(bootstrap, refusedUrl))) {
                    p.send(new ProducerRecord<>(topic, 0, null, "never")).get(20, TimeUnit.SECONDS);
                    emit("error", "\"type\": \"a refused token was accepted\"");
                } catch (Exception e) {
                    emit("refused", "\"type\": \"" + errorType(e) + "\", \"message\": \""
                            + String.valueOf(e.getMessage()).replace("\"", "'") + "\"");
                }
            }
        } catch (Exception e) {
            emit("error", "\"type\": \"" + errorType(e) + "\"");
            e.printStackTrace();
        }
        System.exit(0);
    }
}
