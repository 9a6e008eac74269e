// @confluentinc/kafka-javascript group member (its KafkaJS-compatible API): subscribe() with a groupId, consume with
// consumer.run({eachMessage}), commit by hand (autoCommit: false), as clients/ck_group.py does with confluent-kafka.
// Usage: node ckjs_group.js BOOTSTRAP TOPIC GROUP [--max-records N] [--until-end] [--timeout 60]
// Before joining, an admin client reads the high watermarks (fetchTopicOffsets) and the group's committed offsets
// (fetchOffsets); the member stops after N records (--max-records), or with --until-end once every partition has been
// read from where the group stood up to the high watermark seen at start (whichever comes first), or on SIGTERM.
// It then commits the position after the last
// record it printed of each partition it read from (commitOffsets), reads the group's offsets back from the broker
// (consumer.committed) and disconnects (LeaveGroup).
// Prints: watermarks_high ({high: {p: offset}}), committed_at_start ({offsets: {p: offset or -1001}}), assignment
// (the member's whole assignment after each rebalance callback), record, committed ({why: 'close', offsets: {p: offset}, errors}), fetched
// ({offsets: {p: offset or null}}), summary, closed.
'use strict';
const { KafkaJS, emit, emitRecord, parseArgs, start } = require('./ckjs_common');

start(async () => {
  const args = parseArgs(['bootstrap', 'topic', 'group'], { 'max-records': 0, 'until-end': false, timeout: 60 });
  const untilEnd = args['until-end'];
  const maxRecords = args['max-records'];
  const kafka = new KafkaJS.Kafka({
    kafkaJS: { clientId: 'walgate-compat-ckjs', brokers: [args.bootstrap], logLevel: KafkaJS.logLevel.WARN,
      connectionTimeout: 5000, requestTimeout: 15000 },
  });

  const admin = kafka.admin();
  await admin.connect();
  const parts = [];
  const high = {};
  const next = {}; // partition -> offset of the next record to print
  try {
    for (const o of await admin.fetchTopicOffsets(args.topic, { timeout: 10000 })) {
      parts.push(o.partition);
      high[o.partition] = Number(o.high);
      next[o.partition] = 0; // unless the group committed an offset
    }
    emit('watermarks_high', { high });
    const [committed] = await admin.fetchOffsets({ groupId: args.group,
      topics: [{ topic: args.topic, partitions: parts }], timeout: 10000 });
    for (const p of committed.partitions) next[p.partition] = Number(p.offset) >= 0 ? Number(p.offset) : 0;
    const atStart = committed.partitions.map((p) => [p.partition, Number(p.offset)]);
    emit('committed_at_start', { offsets: Object.fromEntries(atStart) });
  } finally {
    await admin.disconnect();
  }
  const read = new Set(); // partitions this member printed records of
  const mine = new Set(); // its assignment
  let count = 0;
  let finish;
  const finished = new Promise((resolve) => { finish = resolve; });
  const check = () => {
    const atEnd = parts.every((p) => next[p] >= high[p]);
    if ((maxRecords > 0 && count >= maxRecords) || (untilEnd && atEnd)) finish();
  };
  process.on('SIGTERM', () => finish());

  const consumer = kafka.consumer({
    kafkaJS: { groupId: args.group, fromBeginning: true, autoCommit: false, sessionTimeout: 10000 },
    rebalance_cb: (err, assignment) => { // `assignment`: the partitions added or taken away
      const assign = err.code === KafkaJS.ErrorCodes.ERR__ASSIGN_PARTITIONS;
      for (const tp of assignment) if (assign) mine.add(tp.partition); else mine.delete(tp.partition);
      emit('assignment', { after: assign ? 'assign' : 'revoke', partitions: [...mine].sort((a, b) => a - b) });
    },
  });
  await consumer.connect();
  let done = false;
  try {
    await consumer.subscribe({ topics: [args.topic] });
    await consumer.run({
      eachMessage: async ({ partition, message }) => {
        if (done) return; // stopping: not printed, so not committed
        emitRecord(partition, message);
        next[partition] = Number(message.offset) + 1;
        read.add(partition);
        count++;
        check();
      },
    });
    check();
    const timer = new Promise((_, reject) => setTimeout(
      () => reject(new Error(`timed out after ${args.timeout} s with ${count} records`)), args.timeout * 1000).unref());
    await Promise.race([finished, timer]);
    done = true;
    const positions = [...read].sort((a, b) => a - b).map((p) => [p, next[p]]);
    const errors = [];
    if (positions.length) {
      await consumer.commitOffsets(positions.map(([p, o]) => ({ topic: args.topic, partition: p, offset: String(o) })))
        .catch((err) => errors.push(`${err.name}: ${err.message}`));
    }
    emit('committed', { why: 'close', offsets: Object.fromEntries(positions), errors });
    const fetched = await consumer.committed(parts.map((p) => ({ topic: args.topic, partition: p })), 10000);
    // offset null: nothing committed (the binding leaves out OFFSET_INVALID) — or a commit of offset 0, which the
    // KafkaJS layer also turns into null (`tpo.offset ? tpo.offset.toString() : null`)
    const fetchedOffsets = fetched.map((o) => [o.partition, o.offset === null ? null : Number(o.offset)]);
    emit('fetched', { offsets: Object.fromEntries(fetchedOffsets) });
    emit('summary', { records: count });
  } finally {
    done = true;
    await consumer.disconnect();
    emit('closed');
  }
});
