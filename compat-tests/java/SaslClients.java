// kafka-clients over SASL_PLAINTEXT with SCRAM-SHA-512: log in, produce and consume; the Admin's
// describe/alterUserScramCredentials (KIP-554); a consumer kept working across KIP-368 re-authentications.
// Prints one JSON object per step: {"step": ...}; an exception ends the run with {"step": "error", "type": <the
// simple name of the first SaslAuthenticationException in its causes, else of the exception>}.
//
// Usage: java -cp <kafka-clients jars> SaslClients.java <bootstrap> <reauth bootstrap> <topic> <root password> <user>
//        <password>
// One JVM runs every step (a JVM start costs more than the steps): the user logs in, produces and consumes; a wrong
// password fails (step "refused"); root's Admin creates user carol with alterUserScramCredentials, describes her,
// and carol logs in; then, on the second broker (short sessions), root's consumer keeps receiving across
// re-authentications.

import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.admin.UserScramCredentialsDescription;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.SaslAuthenticationException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class SaslClients {
    static void emit(String step, String json) {
        System.out.println("{\"step\": \"" + step + "\"" + (json.isEmpty() ? "" : ", " + json) + "}");
        System.out.flush();
    }

    static Properties props(String bootstrap, String user, String password) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("security.protocol", "SASL_PLAINTEXT");
        p.put("sasl.mechanism", "SCRAM-SHA-512");
        p.put("sasl.jaas.config", "org.apache.kafka.common.security.scram.ScramLoginModule required username=\""
                + user + "\" password=\"" + password + "\";");
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

    static void login(String bootstrap, String user, String password, String topic) throws Exception {
        Properties base = props(bootstrap, user, password);
        String value = "hello from java " + user;
        try (KafkaProducer<String, String> p = producer(base)) {
            p.send(new ProducerRecord<>(topic, 0, null, value)).get(20, TimeUnit.SECONDS);
        }
        emit("produced", "\"user\": \"" + user + "\"");
        try (KafkaConsumer<String, String> c = consumer(base, topic)) {
            if (!consumed(c, value)) throw new IllegalStateException("the record did not come back");
        }
        emit("consumed", "\"value\": \"" + value + "\"");
    }

    static void admin(String bootstrap, String user, String password, String topic) throws Exception {
        try (Admin admin = Admin.create(props(bootstrap, user, password))) {
            admin.alterUserScramCredentials(List.of(new UserScramCredentialUpsertion(
                    "carol", new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), "carol-pw")))
                    .all().get(30, TimeUnit.SECONDS);
            emit("altered", "\"user\": \"carol\"");
            Map<String, UserScramCredentialsDescription> described =
                    admin.describeUserScramCredentials(List.of("carol")).all().get(30, TimeUnit.SECONDS);
            StringBuilder infos = new StringBuilder();
            for (ScramCredentialInfo info : described.get("carol").credentialInfos()) {
                if (infos.length() > 0) infos.append(", ");
                infos.append("\"").append(info.mechanism()).append(":").append(info.iterations()).append("\"");
            }
            emit("described", "\"carol\": [" + infos + "]");
        }
        login(bootstrap, "carol", "carol-pw", topic);
    }

    static void reauth(String bootstrap, String user, String password, String topic) throws Exception {
        Properties base = props(bootstrap, user, password);
        int records = 0;
        try (KafkaProducer<String, String> p = producer(base); KafkaConsumer<String, String> c = consumer(base, topic)) {
            for (int i = 0; i < 4; i++) {
                String value = "record " + i;
                p.send(new ProducerRecord<>(topic, 0, null, value)).get(20, TimeUnit.SECONDS);
                if (!consumed(c, value)) throw new IllegalStateException("record " + i + " did not come back");
                records++;
                Thread.sleep(1000);  // sessions last 1.5 s: both clients re-authenticate along the way
            }
        }
        emit("consumed", "\"records\": " + records);
    }

    static String errorType(Exception e) {
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (t instanceof SaslAuthenticationException) return t.getClass().getSimpleName();
        }
        return e.getClass().getSimpleName();
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], reauthBootstrap = args[1], topic = args[2], rootPassword = args[3];
        try {
            login(bootstrap, args[4], args[5], topic);
            try {
                login(bootstrap, args[4], "not-the-password", topic);
                emit("error", "\"type\": \"a wrong password was accepted\"");
                System.exit(0);
            } catch (Exception e) {
                emit("refused", "\"type\": \"" + errorType(e) + "\", \"message\": \""
                        + String.valueOf(e.getMessage()).replace("\"", "'") + "\"");
            }
            admin(bootstrap, "root", rootPassword, topic);
            reauth(reauthBootstrap, "root", rootPassword, topic);
        } catch (Exception e) {
            emit("error", "\"type\": \"" + errorType(e) + "\"");
            e.printStackTrace();
        }
        System.exit(0);
    }
}
