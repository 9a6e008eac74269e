// @confluentinc/kafka-javascript consumer (its node-rdkafka-style API: KafkaConsumer, assign(), consume(n)) reading
// every partition of a topic from the beginning up to the high watermarks it saw at start, as clients/ck_assign.py.
// Usage: node ckjs_assign.js BOOTSTRAP TOPIC [--timeout 30]
// No group coordination: the group.id librdkafka insists on only names the consumer (auto commit off, nothing
// committed). Prints `metadata` (brokers, partitions, leaders), `watermarks` per partition (queryWatermarkOffsets),
// `record` per message, `summary` (records, the partition.eof offsets).
'use strict';
const { promisify } = require('util');
const { Kafka, emit, emitRecord, parseArgs, start } = require('./ckjs_common');

const OFFSET_BEGINNING = -2;

start(async () => {
  const args = parseArgs(['bootstrap', 'topic'], { timeout: 30 });
  const deadline = Date.now() + args.timeout * 1000;
  const consumer = new Kafka.KafkaConsumer({
    'bootstrap.servers': args.bootstrap,
    'client.id': 'walgate-compat-ckjs',
    'group.id': `walgate-compat-${process.pid}-${Date.now()}`,
    'enable.auto.commit': false,
    'enable.partition.eof': true,
    'socket.timeout.ms': 10000,
  }, { 'auto.offset.reset': 'earliest' });
  const call = (name, ...rest) => promisify(consumer[name]).call(consumer, ...rest);
  await call('connect', { timeout: 10000 });
  try {
    const md = await call('getMetadata', { topic: args.topic, timeout: 10000 });
    const topic = md.topics.find((t) => t.name === args.topic);
    if (!topic) throw new Error(`topic ${args.topic} not in the metadata answer: ${JSON.stringify(md.topics)}`);
    const parts = topic.partitions.map((p) => p.id).sort((a, b) => a - b);
    emit('metadata', { brokers: md.brokers.map((b) => `${b.host}:${b.port}`).sort(), partitions: parts,
      leaders: Object.fromEntries(topic.partitions.map((p) => [p.id, p.leader])) });
    const high = {};
    for (const p of parts) {
      const w = await call('queryWatermarkOffsets', args.topic, p, 10000);
      high[p] = w.highOffset;
      emit('watermarks', { partition: p, low: w.lowOffset, high: w.highOffset });
    }
    const eof = {}; // partition -> offset of its last partition.eof at or past the start-time high watermark
    consumer.on('partition.eof', (e) => { if (e.offset >= high[e.partition]) eof[e.partition] = e.offset; });
    consumer.assign(parts.map((p) => ({ topic: args.topic, partition: p, offset: OFFSET_BEGINNING })));
    let count = 0;
    while (parts.some((p) => !(p in eof))) {
      if (Date.now() > deadline) {
        const unfinished = parts.filter((p) => !(p in eof));
        throw new Error(`timed out after ${args.timeout} s with partitions ${unfinished} unfinished`);
      }
      for (const m of await call('consume', 100)) {
        emitRecord(m.partition, m);
        count++;
      }
    }
    emit('summary', { records: count, eof });
  } finally {
    await call('disconnect');
  }
});
