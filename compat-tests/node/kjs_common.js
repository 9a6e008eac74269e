// Shared bits of the kafkajs 2.2.4 consumer programs (kjs_*.js): output, arguments, the client.
// Every program prints one JSON object per line, as clients/common.py describes: `library` first, then `record`
// ({partition, offset, timestamp, key, value, headers: [[k, v], ...]}, key / value / header values decoded as
// UTF-8), `metadata`, `watermarks`, `summary`, ...; a failure is an `error` event ({name, message}) and exit code 2.
// kafkajs logs (JSON, level WARN and up) go to stderr, each seen by the program's `onLog` first.
'use strict';
const { Kafka, logLevel } = require('kafkajs');
const { version } = require('kafkajs/package.json');

function emit(event, fields = {}) {
  console.log(JSON.stringify({ event, ...fields }));
}

const text = (buf) => (buf === null || buf === undefined ? null : Buffer.from(buf).toString('utf8'));

// A kafkajs message: headers {name: Buffer or [Buffer, ...] for a repeated name}; offset and timestamp are strings.
function emitRecord(partition, message) {
  const headers = Object.entries(message.headers || {})
    .flatMap(([k, v]) => (Array.isArray(v) ? v : [v]).map((x) => [k, text(x)]));
  emit('record', { partition, offset: Number(message.offset), timestamp: Number(message.timestamp),
    key: text(message.key), value: text(message.value), headers });
}

// Positional arguments, then --name value options (numbers where `defaults` has a number); a boolean default
// makes a flag without a value.
function parseArgs(names, defaults) {
  const argv = process.argv.slice(2);
  const out = { ...defaults };
  let k = 0;
  for (const name of names) {
    if (k >= argv.length || argv[k].startsWith('--')) throw new Error(`usage: ${names.join(' ')} [--option value ...]`);
    out[name] = argv[k++];
  }
  while (k < argv.length) {
    const name = argv[k].replace(/^--/, '');
    if (!(name in defaults)) throw new Error(`unknown option ${argv[k]}`);
    if (typeof defaults[name] === 'boolean') {
      out[name] = true;
      k += 1;
      continue;
    }
    if (k + 1 >= argv.length) throw new Error(`option ${argv[k]} needs a value`);
    out[name] = typeof defaults[name] === 'number' ? Number(argv[k + 1]) : argv[k + 1];
    k += 2;
  }
  return out;
}

// A kafkajs client whose log entries (WARN and up) go to onLog({namespace, level, log}), then to stderr.
function client(bootstrap, onLog = () => {}) {
  const logCreator = () => ({ namespace, level, log }) => {
    onLog({ namespace, level, log });
    console.error(JSON.stringify({ namespace, level, ...log }));
  };
  return new Kafka({ clientId: 'walgate-compat-kjs', brokers: [bootstrap], logLevel: logLevel.WARN, logCreator,
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
