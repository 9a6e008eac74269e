// @confluentinc/kafka-javascript producer (its KafkaJS-compatible API) writing the records of clients/ck_produce.py.
// Usage: node ckjs_produce.js BOOTSTRAP TOPIC CODEC COUNT [--first 0] [--partitions 3] [--timeout 60]
// Idempotent (kafkaJS `idempotent: true`: enable.idempotence, so acks=all) with compression CODEC (none, gzip,
// snappy, lz4, zstd: librdkafka's, set per producer — this API refuses `compression` / `acks` on send()).
// Record i (first <= i < first + count) goes to partition i % partitions with timestamp BASE_TS + i, key
// "k" + (i % 5) (null when i % 7 == 0), the JSON value naming the codec and i, and headers i=<i>, nil=''
// (the binding's produce() throws "Header value must be a string or buffer" for a null header value).
// Every record is its own send(), all of them started at once (librdkafka batches them per partition) and then
// awaited: each answer names the record's partition and offset. Prints "delivery" per record (index, partition,
// offset, error) and "summary" (produced, delivered, errors).
'use strict';
const { KafkaJS, emit, parseArgs, start } = require('./ckjs_common');

const BASE_TS = 1700000000000;

start(async () => {
  const args = parseArgs(['bootstrap', 'topic', 'codec', 'count'], { first: 0, partitions: 3, timeout: 60 });
  const { first, partitions } = args;
  const count = Number(args.count);
  const started = Date.now();
  const kafka = new KafkaJS.Kafka({
    kafkaJS: { clientId: 'walgate-compat-ckjs', brokers: [args.bootstrap], logLevel: KafkaJS.logLevel.WARN,
      connectionTimeout: 5000, requestTimeout: 15000 },
  });
  const producer = kafka.producer({
    kafkaJS: { idempotent: true, compression: args.codec },
    'message.timeout.ms': Math.round(args.timeout * 800), // a record not delivered by then fails its send()
  });
  await producer.connect();
  const sends = [];
  try {
    for (let i = first; i < first + count; i++) {
      const message = {
        partition: i % partitions,
        timestamp: String(BASE_TS + i),
        key: i % 7 === 0 ? null : `k${i % 5}`,
        value: `{"codec":"${args.codec}","i":${i},"text":"record ${i} of the walgate produce scenario"}`,
        headers: { i: String(i), nil: '' },
      };
      sends.push(producer.send({ topic: args.topic, messages: [message] }).then(
        ([answer]) => ({ index: i, partition: answer.partition, offset: Number(answer.baseOffset), error: null }),
        (err) => ({ index: i, partition: i % partitions, offset: -1, error: `${err.name}: ${err.message}` }),
      ));
    }
    await producer.flush({ timeout: args.timeout * 1000 });
  } finally {
    const deliveries = await Promise.all(sends);
    await producer.disconnect();
    for (const d of deliveries) emit('delivery', d);
    const errors = deliveries.filter((d) => d.error !== null);
    emit('summary', { produced: sends.length, delivered: deliveries.length - errors.length,
      errors: errors.slice(0, 10), seconds: (Date.now() - started) / 1000 });
  }
});
