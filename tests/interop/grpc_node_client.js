'use strict';
/*
 * Drive the official RocketMQ 5 Node.js SDK (npm `rocketmq-client-nodejs`) from a test, as its own
 * process. The package is resolved from $ROCKETQ_NODE_CLIENT_DIR (the installed package directory,
 * see grpc_harness.py). Output: one JSON object per line on stdout (`event` names what happened);
 * the SDK logs to $HOME/logs/rocketmq.
 *
 *   produce ENDPOINT SPEC.json [CHECK_WAIT_S]
 *       send the messages of SPEC (list of {topic, body, tag, keys, group, delay_ms,
 *       tx: commit|rollback|orphan, props}); with an orphan, stay until the server's check was
 *       answered (the checker commits bodies starting with "commit", rolls back the others)
 *   simple ENDPOINT GROUP TOPIC COUNT MODE [SECONDS]
 *       SimpleConsumer; MODE ack | redeliver (a first delivery is not acked but made visible
 *       again after 1 s with changeInvisibleDuration)
 *
 * Every wait is bounded: the whole run ends after SECONDS (or CHECK_WAIT_S) at the latest.
 * Credentials: $ROCKETQ_INTEROP_AK/$ROCKETQ_INTEROP_SK (none when unset); a client that does not
 * start within $ROCKETQ_INTEROP_STARTUP_MS (default 30000) emits `error` with `stage: startup`.
 */

const sdk = require(process.env.ROCKETQ_NODE_CLIENT_DIR);

const COMMIT = 1;
const ROLLBACK = 2;

function emit(event, fields) {
  process.stdout.write(JSON.stringify(Object.assign({ event }, fields || {})) + '\n');
}

function errorText(err) {
  return `${err && err.name}: ${err && err.message}`;
}

function view(msg) {
  return {
    id: msg.messageId,
    body: msg.body.toString('utf8'),
    tag: msg.tag === undefined ? null : msg.tag,
    keys: msg.keys || [],
    group: msg.messageGroup === undefined ? null : msg.messageGroup,
    attempt: msg.deliveryAttempt === undefined ? null : msg.deliveryAttempt,
    topic: msg.topic,
    props: Object.fromEntries(msg.properties || new Map()),
    corrupted: Boolean(msg.corrupted),
  };
}

function credentials() {
  const accessKey = process.env.ROCKETQ_INTEROP_AK;
  const accessSecret = process.env.ROCKETQ_INTEROP_SK;
  return accessKey ? { sessionCredentials: { accessKey, accessSecret } } : {};
}

const STARTUP_MS = Number(process.env.ROCKETQ_INTEROP_STARTUP_MS || 30000);

async function started(client, what) {
  try {
    await withTimeout(client.startup(), STARTUP_MS, what);
    return true;
  } catch (err) {
    emit('error', { stage: 'startup', error: errorText(err) });
    return false;
  }
}

function withTimeout(promise, ms, what) {
  let timer;
  const limit = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} took longer than ${ms} ms`)), ms);
  });
  return Promise.race([promise, limit]).finally(() => clearTimeout(timer));
}

async function produce(endpoint, specPath, checkWaitS) {
  const spec = JSON.parse(require('fs').readFileSync(specPath, 'utf8'));
  const topics = [...new Set(spec.map(s => s.topic))].sort();
  const expected = spec.filter(s => s.tx === 'orphan').length;
  const seen = new Set();
  let resolveChecked;
  const checked = new Promise(resolve => { resolveChecked = resolve; });
  const checker = {
    async check(message) {
      const body = message.body.toString('utf8');
      const resolution = body.startsWith('commit') ? COMMIT : ROLLBACK;
      emit('checked', { id: message.messageId, body, resolution: resolution === COMMIT ? 'commit' : 'rollback' });
      seen.add(message.messageId);
      // the SDK sends EndTransaction(SOURCE_SERVER_CHECK) once this returns
      if (seen.size >= expected) setTimeout(resolveChecked, 500);
      return resolution;
    },
  };
  // Only the first topic goes to the constructor: SDK 1.0.8 starts waiting for the first settings
  // reply after it has fetched every listed topic's route, and a reply that arrives in between
  // (the telemetry stream opens with the first route) is missed, so startup would hang. The
  // other topics' routes are fetched on their first send.
  const producer = new sdk.Producer({
    endpoints: endpoint, namespace: '', requestTimeout: 5000, topics: topics.slice(0, 1), checker,
    ...credentials(),
  });
  // startup waits, without a timeout of its own, for the first settings reply
  if (!(await started(producer, 'producer startup'))) return;
  emit('ready');
  for (let i = 0; i < spec.length; i++) {
    const item = spec[i];
    const options = { topic: item.topic, body: Buffer.from(item.body, 'utf8') };
    if (item.tag) options.tag = item.tag;
    if (item.keys) options.keys = item.keys;
    if (item.group) options.messageGroup = item.group;
    if (item.delay_ms) options.delay = item.delay_ms;
    if (item.props) options.properties = new Map(Object.entries(item.props));
    try {
      let receipt;
      if (item.tx) {
        const tx = producer.beginTransaction();
        receipt = await producer.send(options, tx);
        if (item.tx === 'commit') await tx.commit();
        else if (item.tx === 'rollback') await tx.rollback();
      } else {
        receipt = await producer.send(options);
      }
      emit('sent', { i, id: receipt.messageId, offset: Number(receipt.offset) });
    } catch (err) {
      emit('error', { i, error: errorText(err) });
    }
  }
  if (expected > 0) {
    await withTimeout(checked, checkWaitS * 1000, 'transaction check').catch(err => {
      emit('error', { error: errorText(err) });
    });
  }
  await withTimeout(producer.shutdown(), 15000, 'producer shutdown').catch(() => undefined);
  emit('done');
}

async function simple(endpoint, group, topic, count, mode, seconds) {
  const consumer = new sdk.SimpleConsumer({
    endpoints: endpoint,
    namespace: '',
    requestTimeout: 5000,
    consumerGroup: group,
    awaitDuration: 2000,
    subscriptions: new Map([[topic, '*']]),
    ...credentials(),
  });
  if (!(await started(consumer, 'consumer startup'))) return;
  emit('ready');
  let acked = 0;
  const deadline = Date.now() + seconds * 1000;
  while (acked < count && Date.now() < deadline) {
    let messages;
    try {
      messages = await consumer.receive(32, 10000);
    } catch (err) {
      emit('error', { error: errorText(err) });
      await new Promise(resolve => setTimeout(resolve, 200));
      continue;
    }
    for (const m of messages) {
      emit('message', view(m));
      if (mode === 'redeliver' && m.deliveryAttempt === 1) {
        await consumer.changeInvisibleDuration(m, 1000);
        continue;
      }
      await consumer.ack(m);
      acked += 1;
    }
  }
  emit('done', { acked });
  await withTimeout(consumer.shutdown(), 15000, 'consumer shutdown').catch(() => undefined);
}

async function main() {
  const [cmd, ...args] = process.argv.slice(2);
  if (cmd === 'produce') {
    await produce(args[0], args[1], Number(args[2] || 60));
  } else if (cmd === 'simple') {
    await simple(args[0], args[1], args[2], Number(args[3]), args[4], Number(args[5] || 60));
  } else {
    emit('error', { error: `unknown command ${cmd}` });
    process.exitCode = 2;
  }
}

main().then(
  // the SDK keeps timers (route refresh, heartbeats) alive after shutdown: leave explicitly
  () => process.exit(process.exitCode || 0),
  err => {
    emit('fatal', { error: errorText(err), stack: err && err.stack });
    process.exit(1);
  },
);
