// Shared bits of the kafkajs 2.2.4 consumer programs (kjs_*.js): output, arguments, the client.
// Every program prints one JSON object per line, as clients/common.py describes: `library` first, then `record`
// ({partition, offset, timestamp, key, value, headers: [[k, v], ...]}, key / value / header values decoded as
// UTF-8), `metadata`, `watermarks`, `summary`, ...; a failure is an `error` event ({name, message}) and exit code 2.
// kafkajs logs (JSON, level WARN and up) go to stderr, each seen by the program's `onLog` first.
'use strict';
const { Kafka, logLevel } = require('kafkajs');
const { version } = require('kafkajs/package.json');
const { emit, emitRecord, parseArgs, text } = require('./output');

// A kafkajs client of `bootstrap` (one or more host:port, comma-separated) whose log entries (WARN and up) go to
// onLog({namespace, level, log}), then to stderr.
function client(bootstrap, onLog = () => {}) {
  const logCreator = () => ({ namespace, level, log }) => {
    onLog({ namespace, level, log });
    console.error(JSON.stringify({ namespace, level, ...log }));
  };
  return new Kafka({ clientId: 'walgate-compat-kjs', brokers: bootstrap.split(','), logLevel: logLevel.WARN, logCreator,
    connectionTimeout: 5000, requestTimeout: 15000, retry: { retries: 3 } });
}

// Run main(); print the library first and any failure as an `error` event (exit code 2).
function start(main) {
  emit('library', { name: 'kafkajs', version });
  main().catch((err) => {
    emit('error', { name: err && err.name, message: String(err && err.message) });
    console.error(err);
    process.exit(2);
  });
}

module.exports = { client, emit, emitRecord, parseArgs, start, text };
