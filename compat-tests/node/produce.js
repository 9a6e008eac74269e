// kafkajs producer (its defaults: acks=-1, not idempotent) writing the records of clients/ck_produce.py.
// Usage: node produce.js BOOTSTRAP TOPIC CODEC COUNT [--first 0] [--partitions 3] [--chunk 50] [--pace-ms 0]
//        [--idempotent 0|1] [--retries 3]
// --pace-ms: a pause before each send() call; --idempotent 1: kafkajs's idempotent producer (acks=-1, one request in
// flight, as kafkajs requires); --retries: kafkajs's retry.retries (its backoff doubles from 300 ms, at most 30 s in
// all): a failover needs more than the default 3 here when a node's lease must expire first.
// CODEC: none or gzip — the only codecs kafkajs 2.2.4 has built in (snappy, lz4 and zstd need extra
// packages registered in CompressionCodecs, e.g. kafkajs-snappy / kafkajs-lz4 / @kafkajs/zstd).
// Record i (first <= i < first + count) goes to partition i % partitions with timestamp BASE_TS + i, key
// "k" + (i % 5) (null when i % 7 == 0), the JSON value naming the codec and i, and headers i=<i>, nil=''
// (kafkajs 2.2.4 cannot send a null header value: its record encoder sizes it with Buffer.byteLength(null)
// and throws). Records are sent in send() calls of `chunk` records (one batch per partition each); the
// offset of each record is its partition's baseOffset in the answer plus its position in that batch.
// Prints one JSON object per line: "delivery" per record (index, partition, offset, error), "summary".
'use strict';
const { Kafka, CompressionTypes, Partitioners, logLevel } = require('kafkajs');

const BASE_TS = 1700000000000;
const CODECS = { none: CompressionTypes.None, gzip: CompressionTypes.GZIP };

async function main() {
  const [bootstrap, topic, codec, countArg, ...rest] = process.argv.slice(2);
  const opts = { first: 0, partitions: 3, chunk: 50, 'pace-ms': 0, idempotent: 0, retries: 3 };
  for (let k = 0; k + 1 < rest.length; k += 2) opts[rest[k].replace(/^--/, '')] = Number(rest[k + 1]);
  const { first, partitions, chunk } = opts;
  const count = Number(countArg);
  if (!(codec in CODECS)) throw new Error(`kafkajs has no built-in codec ${codec} (only ${Object.keys(CODECS)})`);
  const emit = (event, fields) => console.log(JSON.stringify({ event, ...fields }));
  const started = Date.now();
  const kafka = new Kafka({
    clientId: 'walgate-compat-node',
    brokers: bootstrap.split(','), // BOOTSTRAP: one or more host:port, comma-separated
    logLevel: logLevel.WARN,
    connectionTimeout: 5000,
    requestTimeout: 15000,
    retry: { retries: opts.retries },
  });
  const producer = kafka.producer({ // every record names its partition
    createPartitioner: Partitioners.DefaultPartitioner,
    ...(opts.idempotent ? { idempotent: true, maxInFlightRequests: 1 } : {}),
  });
  await producer.connect();
  const deliveries = [];
  let produced = 0;
  try {
    for (let start = first; start < first + count; start += chunk) {
      const indices = [];
      for (let i = start; i < Math.min(first + count, start + chunk); i++) indices.push(i);
      const messages = indices.map((i) => ({
        partition: i % partitions,
        timestamp: String(BASE_TS + i),
        key: i % 7 === 0 ? null : `k${i % 5}`,
        value: `{"codec":"${codec}","i":${i},"text":"record ${i} of the walgate produce scenario"}`,
        headers: { i: String(i), nil: '' }, // null throws: sizeOfHeaders calls Buffer.byteLength(null) first
      }));
      produced += messages.length;
      await new Promise((resolve) => setTimeout(resolve, opts['pace-ms']));
      let answer;
      try {
        answer = await producer.send({ topic, compression: CODECS[codec], messages });
      } catch (err) {
        for (const i of indices) deliveries.push({ index: i, partition: i % partitions, offset: -1, error: `${err.name}: ${err.message}` });
        continue;
      }
      const base = Object.fromEntries(answer.map((r) => [r.partition, Number(r.baseOffset)]));
      const seen = {};
      for (const i of indices) {
        const p = i % partitions;
        seen[p] = (seen[p] || 0) + 1;
        deliveries.push({ index: i, partition: p, offset: base[p] + seen[p] - 1, error: null });
      }
    }
  } finally {
    await producer.disconnect();
  }
  for (const d of deliveries) emit('delivery', d);
  const errors = deliveries.filter((d) => d.error !== null);
  emit('summary', { produced, delivered: deliveries.length - errors.length, errors: errors.slice(0, 10),
    seconds: (Date.now() - started) / 1000 });
}

main().catch((err) => {
  console.log(JSON.stringify({ event: 'error', name: err.name, message: err.message }));
  console.error(err);
  process.exit(2);
});
