// kafkajs admin client: cluster, topic metadata, offsets and offsets by timestamp of one topic.
// Usage: node admin_offsets.js BOOTSTRAP TOPIC [TIMESTAMP_MS]
// Prints one JSON object per line: cluster, metadata, offsets (per partition), ts_offsets (per partition).
'use strict';
const { Kafka, logLevel } = require('kafkajs');

async function main() {
  const [bootstrap, topic, ts] = process.argv.slice(2);
  const kafka = new Kafka({
    clientId: 'walgate-compat-node',
    brokers: [bootstrap],
    logLevel: logLevel.WARN,
    connectionTimeout: 5000,
    requestTimeout: 15000,
    retry: { retries: 3 },
  });
  const admin = kafka.admin();
  await admin.connect();
  try {
    const emit = (event, fields) => console.log(JSON.stringify({ event, ...fields }));
    const cluster = await admin.describeCluster();
    emit('cluster', { brokers: cluster.brokers.map((b) => `${b.host}:${b.port}`), controller: cluster.controller });
    const md = await admin.fetchTopicMetadata({ topics: [topic] });
    const t = md.topics[0];
    emit('metadata', {
      topic: t.name,
      partitions: t.partitions.map((p) => p.partitionId).sort((a, b) => a - b),
      leaders: t.partitions.map((p) => p.leader),
      errors: t.partitions.map((p) => p.partitionErrorCode),
    });
    for (const o of await admin.fetchTopicOffsets(topic)) {
      emit('offsets', { partition: o.partition, low: Number(o.low), high: Number(o.high) });
    }
    if (ts !== undefined) {
      for (const o of await admin.fetchTopicOffsetsByTimestamp(topic, Number(ts))) {
        emit('ts_offsets', { partition: o.partition, offset: Number(o.offset) });
      }
    }
  } finally {
    await admin.disconnect();
  }
}

main().catch((err) => {
  console.log(JSON.stringify({ event: 'error', name: err.name, message: err.message }));
  console.error(err);
  process.exit(1);
});
