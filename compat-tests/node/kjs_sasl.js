// kafkajs 2.2.4 over SASL_PLAINTEXT (or SASL_SSL, trusting the CA certificate of the PEM file <ca>): log in with a
// SASL mechanism, produce one record to partition 0, read it back.
// Usage: node kjs_sasl.js <bootstrap> <mechanism> <user> <password> <topic> [<ca>]
// Prints `library`, then {"event": "ok", "value"} or, when authentication is refused, {"event": "error", name,
// message} (exit code 2, as every kjs_* program).
'use strict';
const fs = require('fs');
const { Kafka, logLevel } = require('kafkajs');
const { version } = require('kafkajs/package.json');
const { emit } = require('./output');

async function main() {
  const [bootstrap, mechanism, username, password, topic, ca] = process.argv.slice(2);
  const kafka = new Kafka({ clientId: 'walgate-compat-kjs-sasl', brokers: [bootstrap], logLevel: logLevel.NOTHING,
    sasl: { mechanism, username, password }, ssl: ca ? { ca: [fs.readFileSync(ca, 'utf8')] } : false,
    connectionTimeout: 5000, requestTimeout: 15000, retry: { retries: 1 } });
  const value = 'hello from kafkajs';
  const producer = kafka.producer();
  await producer.connect();
  await producer.send({ topic, messages: [{ partition: 0, value }] });
  await producer.disconnect();
  const consumer = kafka.consumer({ groupId: `sasl-${Date.now()}` });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('no record within 30 s')), 30000);
    consumer.run({ eachMessage: async ({ message }) => {
      if (message.value.toString() === value) { clearTimeout(timer); resolve(); }
    } });
  });
  await consumer.disconnect();
  emit('ok', { value });
}

emit('library', { name: 'kafkajs', version });
main().catch((err) => {
  emit('error', { name: err && err.name, message: String(err && err.message) });
  process.exit(2);
});
