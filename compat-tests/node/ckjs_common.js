// Shared bits of the @confluentinc/kafka-javascript programs (ckjs_*.js): output and arguments.
// Every program prints one JSON object per line, as clients/common.py describes: `library` first (package and
// librdkafka version, compiled-in features), then `record` ({partition, offset, timestamp, key, value,
// headers: [[k, v], ...]}, key / value / header values decoded as UTF-8), `metadata`, `watermarks`, `summary`, ...;
// a failure is an `error` event ({name, code, message}) and exit code 2.
'use strict';
const Kafka = require('@confluentinc/kafka-javascript');
const { version } = require('@confluentinc/kafka-javascript/package.json');

const LIBRARY = '@confluentinc/kafka-javascript';

function emit(event, fields = {}) {
  console.log(JSON.stringify({ event, ...fields }));
}

const text = (buf) => (buf === null || buf === undefined ? null : Buffer.from(buf).toString('utf8'));

// A consumed message of either API: rdkafka-style headers are [{name: Buffer}, ...], KafkaJS-style
// {name: Buffer or [Buffer, ...] for a repeated name}; offset and timestamp are numbers or strings.
function emitRecord(partition, message) {
  const raw = message.headers || [];
  const pairs = Array.isArray(raw) ? raw.flatMap((h) => Object.entries(h)) : Object.entries(raw);
  const headers = pairs.flatMap(([k, v]) => (Array.isArray(v) ? v : [v]).map((x) => [k, text(x)]));
  emit('record', { partition, offset: Number(message.offset), timestamp: Number(message.timestamp),
    key: text(message.key), value: text(message.value), headers });
}

// Positional arguments, then --name value options (numbers where `defaults` has a number).
function parseArgs(names, defaults) {
  const argv = process.argv.slice(2);
  const out = { ...defaults };
  let k = 0;
  for (const name of names) {
    if (k >= argv.length || argv[k].startsWith('--')) throw new Error(`usage: ${names.join(' ')} [--option value ...]`);
    out[name] = argv[k++];
  }
  for (; k < argv.length; k += 2) {
    const name = argv[k].replace(/^--/, '');
    if (!(name in defaults) || k + 1 >= argv.length) throw new Error(`unknown or incomplete option ${argv[k]}`);
    out[name] = typeof defaults[name] === 'number' ? Number(argv[k + 1]) : argv[k + 1];
  }
  return out;
}

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
