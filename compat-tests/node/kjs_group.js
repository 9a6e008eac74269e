// kafkajs 2.2.4 group member: subscribe() with a groupId, consumer.run({eachMessage}), commits by hand
// (autoCommit: false), as clients/ck_group.py does with confluent-kafka.
// Usage: node kjs_group.js BOOTSTRAP TOPIC GROUP [--max-records N] [--until-end] [--commit-every N] [--timeout 60]
// fromBeginning: true (auto.offset.reset earliest). kafkajs has no revoke callback: its REBALANCING event (the
// heartbeat answered REBALANCE_IN_PROGRESS, just before it rejoins, eager protocol: everything is given up) is where
// the member commits the position after the last record it printed of each partition it holds and stops printing
// until the GROUP_JOIN event brings the new assignment (kafkajs then fetches from the committed offsets, so what
// arrives in between is read again). At the end it commits the same for everything still assigned (out of the group
// then, rebalancing or restarting after a crash, once it joined again, within 20 s: kafkajs's commitOffsets returns
// without sending anything while its runner is stopped), then stop()
// (LeaveGroup) and disconnect(); with --commit-every N also after every N records printed (what is assigned then).
// A crash kafkajs restarts the consumer after (a retriable error, e.g. its retries to a killed broker exhausted: it
// rejoins the group and fetches from the committed offsets) is a `restart` event ({name, message}); any other crash
// ends the run as a failure.
// Stops when N records were printed (--max-records); with --until-end once every partition of the topic is assigned
// to it and read up to the high watermark seen at start (a partition nothing was printed of stands at the group's
// committed offset, read with the admin client after each GROUP_JOIN, asked again after a retriable error, else at
// its low watermark); on SIGTERM; or
// at --timeout (error event, then the same commit and close, exit code 2).
// Prints: library, watermarks_high ({high: {p: offset}}), assignment ({after: 'assign' | 'revoke', partitions: the
// whole current assignment}), record, committed ({why: 'revoke' | 'every' | 'close', offsets: {p: offset}, errors}),
// restart, summary ({records}), closed.
'use strict';
const { client, emit, emitRecord, parseArgs, start } = require('./kjs_common');

start(async () => {
  const args = parseArgs(['bootstrap', 'topic', 'group'], { 'max-records': 0, 'until-end': false, 'commit-every': 0,
    timeout: 60 });
  const maxRecords = args['max-records'];
  const kafka = client(args.bootstrap);
  let mine = []; // the current assignment
  let joined = false; // false from REBALANCING (or a crash kafkajs restarts after) to GROUP_JOIN: nothing is printed
  let rejoined = () => {}; // resolves `rejoin` at the next GROUP_JOIN
  let rejoin = Promise.resolve();
  const leaving = () => { // out of the group until the next GROUP_JOIN
    joined = false;
    rejoin = new Promise((resolve) => { rejoined = resolve; });
  };
  let done = false; // stopping: nothing is printed
  let count = 0;
  const next = {}; // partition of the assignment -> offset after the last record printed
  const committed = {}; // partition -> the group's committed offset at the last GROUP_JOIN
  let finish;
  let fail;
  const finished = new Promise((resolve, reject) => { finish = resolve; fail = reject; });
  finished.catch(() => {}); // a failure before it is awaited is still thrown there
  const timer = setTimeout(() => fail(Object.assign(
    new Error(`timed out after ${args.timeout} s with ${count} records`), { name: 'Timeout' })), args.timeout * 1000);
  setTimeout(() => { // kafkajs hangs in connect / commit / stop: give up
    emit('error', { name: 'Timeout', message: `not closed 30 s after the ${args.timeout} s timeout` });
    process.exit(2);
  }, (args.timeout + 30) * 1000).unref();

  const admin = kafka.admin();
  await admin.connect();
  const low = {};
  const high = {};
  for (const o of await admin.fetchTopicOffsets(args.topic)) {
    low[o.partition] = Number(o.low);
    high[o.partition] = Number(o.high);
  }
  const parts = Object.keys(high).map(Number).sort((a, b) => a - b);
  emit('watermarks_high', { high });

  const check = () => {
    const position = (p) => next[p] ?? Math.max(committed[p] ?? -1, low[p]);
    const atEnd = mine.length === parts.length && parts.every((p) => position(p) >= high[p]);
    if ((maxRecords > 0 && count >= maxRecords) || (args['until-end'] && atEnd)) finish();
  };

  const consumer = kafka.consumer({ groupId: args.group, sessionTimeout: 10000, heartbeatInterval: 3000 });
  // commit the positions of the printed records of `partitions`; the `committed` event when the answer came
  const commit = async (why, partitions) => {
    const positions = partitions.filter((p) => p in next).map((p) => [p, next[p]]);
    const errors = [];
    if (positions.length) {
      await consumer.commitOffsets(positions.map(([p, o]) => ({ topic: args.topic, partition: p, offset: String(o) })))
        .catch((err) => errors.push(`${err.name}: ${err.message}`));
    }
    emit('committed', { why, offsets: Object.fromEntries(positions), errors });
  };
  // the group's committed offsets into `committed` (--until-end's positions of partitions nothing was printed of);
  // a retriable error (COORDINATOR_LOAD_IN_PROGRESS while a new coordinator loads the group, NOT_COORDINATOR), which
  // kafkajs's admin does not retry, is asked again after 500 ms
  const fetchCommitted = () => admin.fetchOffsets({ groupId: args.group, topics: [args.topic] }).then(([t]) => {
    for (const o of t.partitions) committed[o.partition] = Number(o.offset);
    check();
  }).catch((err) => (err.retriable && !done ? setTimeout(fetchCommitted, 500) : fail(err)));
  consumer.on(consumer.events.REBALANCING, () => {
    if (done || !joined) return;
    leaving();
    const revoked = mine;
    mine = [];
    commit('revoke', revoked).catch(fail);
    emit('assignment', { after: 'revoke', partitions: mine });
  });
  consumer.on(consumer.events.GROUP_JOIN, ({ payload }) => {
    mine = [...(payload.memberAssignment[args.topic] || [])].sort((a, b) => a - b);
    for (const p of Object.keys(next).map(Number)) if (!mine.includes(p)) delete next[p];
    joined = true;
    rejoined();
    emit('assignment', { after: 'assign', partitions: mine });
    if (args['until-end']) fetchCommitted();
  });
  consumer.on(consumer.events.CRASH, ({ payload }) => {
    if (!payload.restart) fail(payload.error);
    else {
      if (joined) leaving(); // kafkajs left the group (its stop) and joins it again: until then a commit is not sent
      emit('restart', { name: payload.error.name, message: String(payload.error.message) });
    }
  });
  process.on('SIGTERM', () => finish());

  let code = 0;
  await consumer.connect();
  try {
    await consumer.subscribe({ topics: [args.topic], fromBeginning: true });
    await consumer.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => {
        if (done || !joined || !mine.includes(partition)) return;
        emitRecord(partition, message);
        next[partition] = Number(message.offset) + 1;
        count++;
        if (args['commit-every'] > 0 && count % args['commit-every'] === 0) await commit('every', mine);
        check();
      },
    });
    await finished.catch((err) => {
      emit('error', { name: err.name, message: String(err.message) });
      code = 2;
    });
    clearTimeout(timer);
    done = true;
    if (!joined) { // restarting or rebalancing: kafkajs drops a commit while its runner is stopped, without an error
      await Promise.race([rejoin, new Promise((resolve) => { setTimeout(resolve, 20000).unref(); })]);
    }
    await commit('close', mine);
    emit('summary', { records: count });
    await consumer.stop();
  } finally {
    done = true;
    await consumer.disconnect();
    await admin.disconnect();
    emit('closed');
  }
  process.exit(code);
});
