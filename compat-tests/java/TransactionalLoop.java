// A transactional KafkaProducer sending the records of clients/ck_produce.py's spec in transactions, as
// clients/ck_txn_produce.py does with confluent-kafka (the same arguments and JSON lines).
//
// Usage: java -cp <kafka-clients jars> TransactionalLoop.java BOOTSTRAP TOPIC TRANSACTIONAL_ID COUNT [--first N]
//            [--per-transaction 10] [--abort-every 4] [--partitions 3] [--pace-ms MS] [--timeout S]
// Records first .. first + COUNT - 1 (record i to partition i % partitions), PER_TRANSACTION a transaction; the one
// whose first index / PER_TRANSACTION is ABORT_EVERY - 1 modulo ABORT_EVERY is aborted on purpose after flush() (its
// records delivered), the others committed. Errors are handled as KafkaProducer's javadoc says (KIP-1050's
// categories): a TimeoutException of commitTransaction / abortTransaction: the call again (until the deadline);
// ProducerFencedException, OutOfOrderSequenceException, AuthorizationException, UnsupportedVersionException and
// any other the producer cannot go on from (abortTransaction failing): the producer closed, a new one made with the
// same transactional.id (its initTransactions aborts what the old one left open); any other KafkaException (abortable:
// a failed send, InvalidProducerEpochException, TransactionAbortableException, ...): abortTransaction and on.
// Output: one JSON object per line: "delivery" per send callback (index, partition, offset, error), "transaction"
// per transaction (records, outcome committed / aborted / unknown (it may have committed), planned, errors),
// "recovered" per producer made again, "summary" (committed, aborted, unknown) at the end; exit code 0, 2 with an
// "error" event when initTransactions does not succeed before the deadline.

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.common.errors.OutOfOrderSequenceException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.errors.UnsupportedVersionException;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class TransactionalLoop {
    static final long BASE_TS = 1_700_000_000_000L;
    static String bootstrap, topic, tid;
    static int partitions;
    static long deadline;

    /** The producer cannot go on: it is replaced. */
    static class Fatal extends Exception {
        Fatal(String message) {
            super(message);
        }
    }

    interface Call {
        void run();
    }

    static String describe(Exception e) {
        return e.getClass().getSimpleName() + ": " + e.getMessage();
    }

    /** call.run() again after each TimeoutException until the deadline; a fatal exception (or the deadline) is Fatal,
     *  any other KafkaException thrown as it is. */
    static void retrying(String what, Call call, List<String> errors) throws Fatal {
        while (true) {
            try {
                call.run();
                return;
            } catch (ProducerFencedException | OutOfOrderSequenceException | AuthorizationException
                     | UnsupportedVersionException e) {
                errors.add(what + ": " + describe(e));
                throw new Fatal(errors.get(errors.size() - 1));
            } catch (TimeoutException e) {
                errors.add(what + ": " + describe(e));
                if (System.nanoTime() > deadline) throw new Fatal(errors.get(errors.size() - 1));
            }
        }
    }

    static KafkaProducer<byte[], byte[]> producer() {
        while (System.nanoTime() < deadline) {
            Properties config = new Properties();
            config.put("bootstrap.servers", bootstrap);
            config.put("key.serializer", ByteArraySerializer.class.getName());
            config.put("value.serializer", ByteArraySerializer.class.getName());
            config.put("transactional.id", tid);
            config.put("transaction.timeout.ms", "20000");
            config.put("max.block.ms", "10000");
            config.put("delivery.timeout.ms", "30000");
            config.put("request.timeout.ms", "10000");
            KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(config);
            List<String> errors = new ArrayList<>();
            try {
                retrying("initTransactions", p::initTransactions, errors);
                return p;
            } catch (Fatal | KafkaException e) {
                p.close(Duration.ZERO);
                println("{\"event\":\"recovered\",\"after\":\"initTransactions\",\"errors\":" + jsonList(errors) + "}");
            }
        }
        return null;
    }

    static void send(KafkaProducer<byte[], byte[]> p, int i) {
        byte[] key = i % 7 == 0 ? null : ("k" + (i % 5)).getBytes(StandardCharsets.UTF_8);
        byte[] value = ("{\"codec\":\"none\",\"i\":" + i + ",\"text\":\"record " + i
                + " of the walgate produce scenario\"}").getBytes(StandardCharsets.UTF_8);
        ProducerRecord<byte[], byte[]> record = new ProducerRecord<>(topic, i % partitions, BASE_TS + i, key, value,
                List.of(new RecordHeader("i", String.valueOf(i).getBytes(StandardCharsets.UTF_8)),
                        new RecordHeader("nil", (byte[]) null)));
        p.send(record, (md, exc) -> println("{\"event\":\"delivery\",\"index\":" + i + ",\"partition\":"
                + (md == null ? i % partitions : md.partition()) + ",\"offset\":" + (md == null ? -1 : md.offset())
                + ",\"error\":" + json(exc == null ? null : describe(exc)) + "}"));
    }

    /** "aborted", or "unknown" when the producer cannot abort (it is then replaced). */
    static String abort(KafkaProducer<byte[], byte[]> p, List<String> errors) {
        try {
            retrying("abortTransaction", p::abortTransaction, errors);
            return "aborted";
        } catch (Fatal | KafkaException e) {
            if (e instanceof KafkaException) errors.add("abortTransaction: " + describe(e));
            return "unknown";
        }
    }

    public static void main(String[] argv) throws Exception {
        bootstrap = argv[0];
        topic = argv[1];
        tid = argv[2];
        int count = Integer.parseInt(argv[3]);
        Map<String, String> opts = new HashMap<>();
        for (int i = 4; i + 1 < argv.length; i += 2) opts.put(argv[i].replaceFirst("^--", ""), argv[i + 1]);
        int first = Integer.parseInt(opts.getOrDefault("first", "0"));
        int perTransaction = Integer.parseInt(opts.getOrDefault("per-transaction", "10"));
        int abortEvery = Integer.parseInt(opts.getOrDefault("abort-every", "4"));
        partitions = Integer.parseInt(opts.getOrDefault("partitions", "3"));
        long paceMs = (long) Double.parseDouble(opts.getOrDefault("pace-ms", "0"));
        long started = System.nanoTime();
        deadline = started + (long) (Double.parseDouble(opts.getOrDefault("timeout", "60")) * 1e9);

        KafkaProducer<byte[], byte[]> current = producer();
        if (current == null) {
            println("{\"event\":\"error\",\"message\":\"initTransactions did not succeed before the deadline\"}");
            System.exit(2);
        }
        Map<String, Integer> counts = new HashMap<>(Map.of("committed", 0, "aborted", 0, "unknown", 0));
        int next = first;
        while (next < first + count && System.nanoTime() < deadline) {
            List<Integer> indexes = new ArrayList<>();
            for (int i = next; i < Math.min(next + perTransaction, first + count); i++) indexes.add(i);
            boolean planned = abortEvery > 0 && (next / perTransaction) % abortEvery == abortEvery - 1;
            List<String> errors = new ArrayList<>();
            String outcome = "unknown";
            KafkaProducer<byte[], byte[]> p = current;
            try {
                p.beginTransaction();
                for (int i : indexes) {
                    send(p, i);
                    if (paceMs > 0) Thread.sleep(paceMs);
                }
                if (planned) {
                    p.flush();  // delivered (a read_uncommitted read may hold them), then aborted
                    outcome = abort(p, errors);
                } else {
                    retrying("commitTransaction", p::commitTransaction, errors);
                    outcome = "committed";
                }
            } catch (Fatal e) {
                // outcome unknown: the producer is replaced
            } catch (ProducerFencedException | OutOfOrderSequenceException | AuthorizationException
                     | UnsupportedVersionException e) {
                errors.add("fatal: " + describe(e));
            } catch (KafkaException e) {  // abortable
                errors.add("abortable: " + describe(e));
                outcome = abort(p, errors);
            }
            println("{\"event\":\"transaction\",\"records\":" + indexes + ",\"outcome\":\"" + outcome
                    + "\",\"planned\":" + planned + ",\"errors\":" + jsonList(errors) + "}");
            counts.merge(outcome, 1, Integer::sum);
            next += indexes.size();
            if (outcome.equals("unknown")) {  // the producer is done: a new one with the same transactional.id
                p.close(Duration.ZERO);
                current = producer();
                println("{\"event\":\"recovered\",\"after\":\"fatal\",\"errors\":" + jsonList(errors) + "}");
                if (current == null) break;
            }
        }
        if (current != null) current.close(Duration.ofSeconds(10));
        println("{\"event\":\"summary\",\"seconds\":" + String.format(java.util.Locale.ROOT, "%.3f",
                (System.nanoTime() - started) / 1e9) + ",\"committed\":" + counts.get("committed") + ",\"aborted\":"
                + counts.get("aborted") + ",\"unknown\":" + counts.get("unknown") + "}");
    }

    static synchronized void println(String line) {
        System.out.println(line);
        System.out.flush();
    }

    static String jsonList(List<String> items) {
        List<String> quoted = new ArrayList<>();
        for (String s : items) quoted.add(json(s));
        return "[" + String.join(",", quoted) + "]";
    }

    static String json(String s) {
        if (s == null) return "null";
        StringBuilder out = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') out.append('\\').append(c);
            else if (c < 0x20) out.append(String.format("\\u%04x", (int) c));
            else out.append(c);
        }
        return out.append('"').toString();
    }
}
