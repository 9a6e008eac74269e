// @confluentinc/kafka-javascript admin client (its KafkaJS-compatible API), as admin_offsets.js does with kafkajs:
// topic metadata (librdkafka DescribeTopics), offsets (ListOffsets earliest / latest) and offsets by timestamp.
// Usage: node ckjs_admin_offsets.js BOOTSTRAP TOPIC [--ts TIMESTAMP_MS]
// Prints one JSON object per line: topics (listTopics), metadata, offsets (per partition), ts_offsets (per partition).
'use strict';
const { KafkaJS, emit, parseArgs, start } = require('./ckjs_common');

start(async () => {
  const args = parseArgs(['bootstrap', 'topic'], { ts: '' });
  const kafka = new KafkaJS.Kafka({
    kafkaJS: { clientId: 'walgate-compat-ckjs', brokers: [args.bootstrap], logLevel: KafkaJS.logLevel.WARN,
      connectionTimeout: 5000, requestTimeout: 15000 },
  });
  const admin = kafka.admin();
  await admin.connect();
  try {
    emit('topics', { topics: (await admin.listTopics({ timeout: 10000 })).sort() });
    const [t] = await admin.fetchTopicMetadata({ topics: [args.topic], timeout: 10000 });
    const parts = [...t.partitions].sort((a, b) => a.partitionId - b.partitionId);
    emit('metadata', {
      topic: t.name,
      partitions: parts.map((p) => p.partitionId),
      leaders: parts.map((p) => p.leader),
      leader_hosts: [...new Set(parts.map((p) => p.leaderNode && `${p.leaderNode.host}:${p.leaderNode.port}`))],
      replicas: parts.map((p) => p.replicas),
      isr: parts.map((p) => p.isr),
    });
    for (const o of await admin.fetchTopicOffsets(args.topic, { timeout: 10000 })) {
      emit('offsets', { partition: o.partition, low: Number(o.low), high: Number(o.high) });
    }
    if (args.ts !== '') {
      for (const o of await admin.fetchTopicOffsetsByTimestamp(args.topic, Number(args.ts), { timeout: 10000 })) {
        emit('ts_offsets', { partition: o.partition, offset: Number(o.offset) });
      }
    }
  } finally {
    await admin.disconnect();
  }
});
