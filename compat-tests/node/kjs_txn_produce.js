// kafkajs 2.2.4 transactional producer: clients/ck_txn_produce.py's records, transactions and JSON lines.
// Usage: node kjs_txn_produce.js BOOTSTRAP TOPIC TRANSACTIONAL_ID COUNT [--first 0] [--per-transaction 10]
//        [--abort-every 4] [--partitions 3] [--pace-ms 0] [--timeout 60]
// Records first .. first + COUNT - 1 as produce.js makes them (codec none; the nil header empty: kafkajs cannot send
// a null one), PER_TRANSACTION of them a transaction, each sent alone (its offset: the answer's baseOffset), the
// transaction of every ABORT_EVERY-th block aborted on purpose once its records were delivered. Errors handled as
// kafkajs documents its transactions (docs/Transactions.md): an error while the transaction runs (a send that failed
// after kafkajs's retries) aborts it (`transaction.abort()`); a failed commit or abort ends it `unknown` (it may have
// committed). After either the producer is disconnected and made again with the same transactionalId (its connect
// initialises the producer id: a new epoch, which aborts what the old one left open). After a failed send this works
// around kafkajs's sequence rewind (compat-tests/FINDINGS.md): kafkajs takes back a failed send's sequence numbers
// even when the broker wrote it (the connection lost after the request went out), so the same producer's next
// transaction would send another record under them, which the broker answers as a duplicate of the aborted one, as
// Kafka does (acknowledged with its offset, never written). A producer that cannot connect is made again until the
// deadline.
// Prints `library`, one `delivery` per record sent (index, partition, offset, error), one `transaction` per
// transaction (records, outcome, planned, errors), `recovered` per producer made again, then `summary`.
'use strict';
const { client, emit, parseArgs, start } = require('./kjs_common');

const BASE_TS = 1700000000000;

function message(i, partitions) {
  return {
    partition: i % partitions,
    timestamp: String(BASE_TS + i),
    key: i % 7 === 0 ? null : `k${i % 5}`,
    value: `{"codec":"none","i":${i},"text":"record ${i} of the walgate produce scenario"}`,
    headers: { i: String(i), nil: '' },
  };
}

const described = (err) => `${err && err.name}: ${err && err.message}`;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function main() {
  const opts = parseArgs(['bootstrap', 'topic', 'tid', 'count'], { first: 0, 'per-transaction': 10, 'abort-every': 4,
    partitions: 3, 'pace-ms': 0, timeout: 60 });
  const started = Date.now();
  const deadline = started + opts.timeout * 1000;
  const end = opts.first + Number(opts.count);
  const per = opts['per-transaction'];
  const every = opts['abort-every'];

  async function producer() { // a connected producer (its producer id initialised); null after the deadline
    while (Date.now() < deadline) {
      const p = client(opts.bootstrap).producer({ transactionalId: opts.tid, idempotent: true, maxInFlightRequests: 1,
        transactionTimeout: 20000 });
      try {
        await p.connect();
        return p;
      } catch (err) {
        await p.disconnect().catch(() => {});
        emit('recovered', { after: 'connect', errors: [`connect: ${described(err)}`] });
      }
    }
    return null;
  }

  let current = await producer();
  if (current === null) {
    emit('error', { message: `the producer did not connect in ${opts.timeout} s` });
    process.exit(2);
  }
  const counts = { committed: 0, aborted: 0, unknown: 0 };
  for (let first = opts.first; first < end && Date.now() < deadline; first += per) {
    const indexes = [];
    for (let i = first; i < Math.min(first + per, end); i++) indexes.push(i);
    const planned = every > 0 && Math.floor(first / per) % every === every - 1;
    const errors = [];
    let outcome = 'unknown';
    let abort = planned;
    let txn = null;
    try {
      txn = await current.transaction();
      for (const i of indexes) {
        const m = message(i, opts.partitions);
        try {
          const [answer] = await txn.send({ topic: opts.topic, messages: [m] });
          emit('delivery', { index: i, partition: answer.partition, offset: Number(answer.baseOffset), error: null });
        } catch (err) {
          emit('delivery', { index: i, partition: m.partition, offset: -1, error: described(err) });
          throw err;
        }
        await sleep(opts['pace-ms']);
      }
    } catch (err) {
      errors.push(`abortable: ${described(err)}`);
      abort = true;
    }
    if (txn !== null) {
      try {
        await (abort ? txn.abort() : txn.commit());
        outcome = abort ? 'aborted' : 'committed';
      } catch (err) {
        errors.push(`${abort ? 'abort' : 'commit'}: ${described(err)}`);
      }
    }
    emit('transaction', { records: indexes, outcome, planned, errors });
    counts[outcome] += 1;
    if (errors.length > 0) { // a new producer with the same transactionalId (a new epoch, sequences from 0)
      await current.disconnect().catch(() => {});
      current = await producer();
      emit('recovered', { after: outcome === 'unknown' ? 'unknown' : 'failed send', errors });
      if (current === null) break;
    }
  }
  if (current !== null) await current.disconnect();
  emit('summary', { seconds: (Date.now() - started) / 1000, ...counts });
}

start(main);
