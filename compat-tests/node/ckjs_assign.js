// @confluentinc/kafka-javascript consumer (its node-rdkafka-style API: KafkaConsumer, assign(), consume(n)) reading
// every partition of a topic from a start position up to the high watermarks it saw at start, as clients/ck_assign.py.
// Usage: node ckjs_assign.js BOOTSTRAP TOPIC [--start beginning|end|<offset>|ts:<ms>] [--reset earliest|latest|none]
//                            [--follow N] [--timeout 30]
// No group coordination: the group.id librdkafka insists on only names the consumer (auto commit off, nothing
// committed). --start: beginning = OFFSET_BEGINNING, end = the high watermark seen at start (a number, so that a
// record written after `ready` is read even before librdkafka resolves OFFSET_END), <offset> for every partition,
// ts:<ms> = offsetsForTimes (the high watermark where no record has a timestamp >= ms). --reset is
// auto.offset.reset (none = librdkafka's 'error'): an out-of-range start then comes back from consume() as
// ERR__AUTO_OFFSET_RESET, printed as an `error` event ({name, code, message}) that ends the run with code 0.
// Without --follow: stops once every partition's partition.eof came at or past the high watermark seen at start.
// With --follow N: prints `ready` after assign(), then reads until N records arrived.
// Prints `metadata` (brokers, partitions, leaders), `watermarks` per partition (queryWatermarkOffsets), `start` per
// partition, `ready`, `record` per message, `summary` (records, the partition.eof offsets).
'use strict';
const { promisify } = require('util');
const { Kafka, emit, emitRecord, parseArgs, start } = require('./ckjs_common');

const OFFSET_BEGINNING = -2;
const RESET = { earliest: 'earliest', latest: 'latest', none: 'error' };
const ERROR_NAMES = Object.fromEntries(Object.entries(Kafka.CODES.ERRORS).map(([name, code]) => [code, name]));

start(async () => {
  const args = parseArgs(['bootstrap', 'topic'], { start: 'beginning', reset: 'earliest', follow: 0, timeout: 30 });
  if (!(args.reset in RESET)) throw new Error(`--reset ${args.reset}: one of ${Object.keys(RESET)}`);
  const deadline = Date.now() + args.timeout * 1000;
  const consumer = new Kafka.KafkaConsumer({
    'bootstrap.servers': args.bootstrap,
    'client.id': 'walgate-compat-ckjs',
    'group.id': `walgate-compat-${process.pid}-${Date.now()}`,
    'enable.auto.commit': false,
    'enable.partition.eof': true,
    'socket.timeout.ms': 10000,
  }, { 'auto.offset.reset': RESET[args.reset] });
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
    const first = {}; // partition -> start offset
    if (args.start.startsWith('ts:')) {
      const ts = Number(args.start.slice(3));
      const found = await call('offsetsForTimes', parts.map((p) => ({ topic: args.topic, partition: p, offset: ts })), 10000);
      for (const tp of found) first[tp.partition] = tp.offset >= 0 ? tp.offset : high[tp.partition];
    } else {
      const fixed = Number(args.start);
      if (!['beginning', 'end'].includes(args.start) && !Number.isInteger(fixed)) throw new Error(`--start ${args.start}?`);
      for (const p of parts) first[p] = { beginning: OFFSET_BEGINNING, end: high[p] }[args.start] ?? fixed;
    }
    for (const p of parts) emit('start', { partition: p, offset: first[p] });
    const eof = {}; // partition -> offset of its last partition.eof at or past the start-time high watermark
    consumer.on('partition.eof', (e) => { if (e.offset >= high[e.partition]) eof[e.partition] = e.offset; });
    consumer.assign(parts.map((p) => ({ topic: args.topic, partition: p, offset: first[p] })));
    if (args.follow > 0) emit('ready', { partitions: parts });
    let count = 0;
    const more = () => (args.follow > 0 ? count < args.follow : parts.some((p) => !(p in eof)));
    while (more()) {
      if (Date.now() > deadline) {
        const unfinished = parts.filter((p) => !(p in eof));
        throw new Error(`timed out after ${args.timeout} s with ${count} records, partitions ${unfinished} without EOF`);
      }
      let messages;
      try {
        messages = await call('consume', 100);
      } catch (err) {
        if (err.code !== Kafka.CODES.ERRORS.ERR__AUTO_OFFSET_RESET) throw err;
        emit('error', { name: ERROR_NAMES[err.code], code: err.code, message: err.message });
        return;
      }
      for (const m of messages.slice(0, args.follow > 0 ? args.follow - count : undefined)) {
        emitRecord(m.partition, m);
        count++;
      }
    }
    emit('summary', { records: count, eof });
  } finally {
    await call('disconnect');
  }
});
