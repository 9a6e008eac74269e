// @confluentinc/kafka-javascript (its KafkaJS-compatible API, librdkafka inside) over SASL_PLAINTEXT (or SASL_SSL,
// trusting the CA certificate of the PEM file <ca>: librdkafka's ssl.ca.location): log in with a SASL mechanism,
// produce one record to partition 0, read it back.
// Usage: node ckjs_sasl.js <bootstrap> <mechanism> <user> <password> <topic> [<ca>]
// Prints `library`, then {"event": "ok", "value"}; a failure (a refused authentication) is an `error` event
// ({name, code, message}) and exit code 2, as every ckjs_* program.
'use strict';
const { KafkaJS, emit, start } = require('./ckjs_common');

start(async () => {
  const [bootstrap, mechanism, username, password, topic, ca] = process.argv.slice(2);
  const kafka = new KafkaJS.Kafka({ kafkaJS: { brokers: [bootstrap], sasl: { mechanism, username, password },
    ssl: Boolean(ca), connectionTimeout: 5000, requestTimeout: 15000, logLevel: KafkaJS.logLevel.NOTHING },
    ...(ca ? { 'ssl.ca.location': ca } : {}) });
  const value = 'hello from kafka-javascript';
  const producer = kafka.producer();
  await producer.connect();
  await producer.send({ topic, messages: [{ partition: 0, value }] });
  await producer.disconnect();
  const consumer = kafka.consumer({ kafkaJS: { groupId: `sasl-${Date.now()}`, fromBeginning: true } });
  await consumer.connect();
  await consumer.subscribe({ topics: [topic] });
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('no record within 30 s')), 30000);
    consumer.run({ eachMessage: async ({ message }) => {
      if (message.value.toString() === value) { clearTimeout(timer); resolve(); }
    } });
  });
  await consumer.disconnect();
  emit('ok', { value });
  process.exit(0);
});
