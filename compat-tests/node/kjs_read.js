// kafkajs 2.2.4 reader: every partition of a topic from a start position, as clients/ck_assign.py does with assign().
// Usage: node kjs_read.js BOOTSTRAP TOPIC [--start beginning|end|<offset>|ts:<ms>] [--reset earliest|latest|none]
//                         [--follow N] [--timeout 30]
// kafkajs has no assign(): the consumer joins a fresh group (walgate-compat-<pid>-<time>, nothing committed,
// autoCommit off) and seeks every assigned partition in the GROUP_JOIN handler, before the first fetch. Start
// offsets come from the admin client: beginning = the low watermark, end = the high watermark seen at start (a
// seek to kafkajs's special offset -2 with autoCommit off fetches from offset 0, not from the log start), ts:<ms> =
// fetchTopicOffsetsByTimestamp (the high watermark where no record has a timestamp >= ms), else <offset> for every
// partition. --reset is subscribe()'s fromBeginning (earliest = true, latest = false): what kafkajs falls back to
// when a fetch answers OFFSET_OUT_OF_RANGE. kafkajs has no 'none': it resets and only logs
// "Offset out of range, resetting to default offset" (ERROR); that log entry is the one signal a kafkajs user gets,
// so with --reset none it becomes an `error` event (name KafkaJSOffsetOutOfRange, the error kafkajs caught) and
// the run ends with code 0 before any record from the reset position is printed; with earliest / latest it is an
// `offset_reset` event and reading goes on.
// Without --follow: reads up to the high watermarks seen at start, then exits. With --follow N: prints `ready`
// once the partitions are assigned and sought, then reads until N records arrived.
// Prints: library, metadata ({brokers, partitions}), watermarks (per partition), start (per partition), ready,
// record, offset_reset, summary ({records}).
'use strict';
const { client, emit, emitRecord, parseArgs, start } = require('./kjs_common');

start(async () => {
  const args = parseArgs(['bootstrap', 'topic'], { start: 'beginning', reset: 'earliest', follow: 0, timeout: 30 });
  if (!['earliest', 'latest', 'none'].includes(args.reset)) throw new Error(`--reset ${args.reset}: earliest, latest or none`);
  let count = 0;
  let done = false; // nothing is printed once set
  let outOfRange = false; // --reset none and kafkajs logged an out-of-range fetch
  let finish;
  let fail;
  const finished = new Promise((resolve, reject) => { finish = resolve; fail = reject; });
  finished.catch(() => {}); // a crash before it is awaited is still thrown there
  setTimeout(() => {
    emit('error', { name: 'Timeout', message: `timed out after ${args.timeout} s with ${count} records` });
    process.exit(2);
  }, args.timeout * 1000).unref();
  const low = {};
  const high = {};
  const next = {}; // partition -> offset of the next record to print

  let fetchError = null; // the error text of the last failed Fetch answer kafkajs logged
  const kafka = client(args.bootstrap, ({ log }) => {
    if (String(log.message).startsWith('Response Fetch') && log.error) fetchError = log.error;
    if (done || log.topic !== args.topic || !String(log.message).startsWith('Offset out of range')) return;
    if (args.reset === 'none') {
      done = true;
      outOfRange = true;
      emit('error', { name: 'KafkaJSOffsetOutOfRange', partition: log.partition, offset: next[log.partition],
        message: `${fetchError}: kafkajs logged "${log.message}" (it has no auto.offset.reset=none)` });
      finish();
      return;
    }
    emit('offset_reset', { partition: log.partition, from: next[log.partition], to: args.reset, message: log.message });
    next[log.partition] = args.reset === 'earliest' ? low[log.partition] : high[log.partition];
    check();
  });
  const check = () => {
    const atEnd = Object.keys(high).every((p) => next[p] >= high[p]);
    if (!done && (args.follow > 0 ? count >= args.follow : atEnd)) {
      done = true;
      finish();
    }
  };

  const admin = kafka.admin();
  await admin.connect();
  let parts;
  try {
    const cluster = await admin.describeCluster();
    const md = await admin.fetchTopicMetadata({ topics: [args.topic] });
    parts = md.topics[0].partitions.map((p) => p.partitionId).sort((a, b) => a - b);
    emit('metadata', { brokers: cluster.brokers.map((b) => `${b.host}:${b.port}`).sort(), partitions: parts });
    for (const o of (await admin.fetchTopicOffsets(args.topic)).sort((a, b) => a.partition - b.partition)) {
      low[o.partition] = Number(o.low);
      high[o.partition] = Number(o.high);
      emit('watermarks', { partition: o.partition, low: low[o.partition], high: high[o.partition] });
    }
    if (args.start.startsWith('ts:')) {
      const found = await admin.fetchTopicOffsetsByTimestamp(args.topic, Number(args.start.slice(3)));
      for (const o of found) next[o.partition] = Number(o.offset);
    } else {
      const fixed = Number(args.start);
      if (!['beginning', 'end'].includes(args.start) && !Number.isInteger(fixed)) throw new Error(`--start ${args.start}?`);
      for (const p of parts) next[p] = { beginning: low[p], end: high[p] }[args.start] ?? fixed;
    }
    for (const p of parts) emit('start', { partition: p, offset: next[p] });
  } finally {
    await admin.disconnect();
  }

  const consumer = kafka.consumer({ groupId: `walgate-compat-${process.pid}-${Date.now()}`, sessionTimeout: 10000 });
  let ready = false;
  consumer.on(consumer.events.GROUP_JOIN, ({ payload }) => {
    for (const p of payload.memberAssignment[args.topic] || []) {
      consumer.seek({ topic: args.topic, partition: p, offset: String(next[p]) });
    }
    if (args.follow > 0 && !ready) {
      ready = true;
      emit('ready', { partitions: [...(payload.memberAssignment[args.topic] || [])].sort((a, b) => a - b) });
    }
  });
  consumer.on(consumer.events.CRASH, ({ payload }) => fail(payload.error));
  await consumer.connect();
  try {
    await consumer.subscribe({ topics: [args.topic], fromBeginning: args.reset === 'earliest' });
    await consumer.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => {
        if (done) return;
        emitRecord(partition, message);
        next[partition] = Number(message.offset) + 1;
        count++;
        check();
      },
    });
    check();
    await finished;
    done = true;
    await consumer.stop();
  } finally {
    await consumer.disconnect();
  }
  if (!outOfRange) emit('summary', { records: count });
});
