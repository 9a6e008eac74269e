// Shared bits of the @confluentinc/kafka-javascript programs (ckjs_*.js): output and arguments.
// Every program prints one JSON object per line, as clients/common.py describes: `library` first (package and
// librdkafka version, compiled-in features), then `record` ({partition, offset, timestamp, key, value,
// headers: [[k, v], ...]}, key / value / header values decoded as UTF-8), `metadata`, `watermarks`, `summary`, ...;
// a failure is an `error` event ({name, code, message}) and exit code 2.
'use strict';
const Kafka = require('@confluentinc/kafka-javascript');
const { version } = require('@confluentinc/kafka-javascript/package.json');
const { emit, emitRecord, parseArgs, text } = require('./output');

const LIBRARY = '@confluentinc/kafka-javascript';

// Run main(); print the library first and any failure as an `error` event (exit code 2).
function start(main) {
  emit('library', { name: LIBRARY, version, librdkafka: Kafka.librdkafkaVersion, features: Kafka.features });
  main().catch((err) => {
    emit('error', { name: err && err.name, code: err && err.code, message: String(err && err.message) });
    console.error(err);
    process.exit(2);
  });
}

module.exports = { Kafka, KafkaJS: Kafka.KafkaJS, emit, emitRecord, parseArgs, start, text };
