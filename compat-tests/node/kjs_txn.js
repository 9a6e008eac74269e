// kafkajs 2.2.4 transactions: a producer with a transactionalId (idempotent, one request in flight, as kafkajs
// requires) commits one transaction and aborts another, then commits consumer-group offsets in a third
// (transaction.sendOffsets: AddOffsetsToTxn + TxnOffsetCommit).
// Usage: node kjs_txn.js BOOTSTRAP TOPIC TRANSACTIONAL_ID GROUP
// Transaction 1 sends "commit-0".."commit-2" (partition i % 2) and commits; transaction 2 sends "abort-0",
// "abort-1" and aborts; transaction 3 sends "offsets-0" and commits offset 3 of TOPIC partition 0 for GROUP.
// Prints `library`, then one `step` per transaction (name, ok), then `summary`; a failure is an `error` event.
'use strict';
const { client, emit, parseArgs, start } = require('./kjs_common');

async function main() {
  const { bootstrap, topic, tid, group } = parseArgs(['bootstrap', 'topic', 'tid', 'group'], {});
  const producer = client(bootstrap).producer({ transactionalId: tid, idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  try {
    const committed = await producer.transaction();
    await committed.send({ topic, messages: [0, 1, 2].map((i) => ({ partition: i % 2, key: `k${i}`,
      value: `commit-${i}` })) });
    await committed.commit();
    emit('step', { name: 'commit', ok: true });
    const aborted = await producer.transaction();
    await aborted.send({ topic, messages: [0, 1].map((i) => ({ partition: i % 2, key: `k${i}`,
      value: `abort-${i}` })) });
    await aborted.abort();
    emit('step', { name: 'abort', ok: true });
    const offsets = await producer.transaction();
    await offsets.send({ topic, messages: [{ partition: 0, key: 'o', value: 'offsets-0' }] });
    await offsets.sendOffsets({ consumerGroupId: group, topics: [{ topic, partitions: [{ partition: 0, offset: '3' }] }] });
    await offsets.commit();
    emit('step', { name: 'offsets', ok: true });
  } finally {
    await producer.disconnect();
  }
  emit('summary', {});
}

start(main);
