// Output and arguments shared by the Node client programs (kjs_*.js on kafkajs, ckjs_*.js on
// @confluentinc/kafka-javascript): one JSON object per line, as clients/common.py describes.
'use strict';

function emit(event, fields = {}) {
  console.log(JSON.stringify({ event, ...fields }));
}

const text = (buf) => (buf === null || buf === undefined ? null : Buffer.from(buf).toString('utf8'));

// A consumed message of either library: rdkafka-style headers are [{name: Buffer}, ...], KafkaJS-style
// {name: Buffer or [Buffer, ...] for a repeated name}; offset and timestamp are numbers or strings.
function emitRecord(partition, message) {
  const raw = message.headers || [];
  const pairs = Array.isArray(raw) ? raw.flatMap((h) => Object.entries(h)) : Object.entries(raw);
  const headers = pairs.flatMap(([k, v]) => (Array.isArray(v) ? v : [v]).map((x) => [k, text(x)]));
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

module.exports = { emit, emitRecord, parseArgs, text };
