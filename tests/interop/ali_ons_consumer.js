'use strict';

// A clustering-mode ali-ons push consumer against a rocketq name server + broker.
//
// Usage: node ali_ons_consumer.js '<json config>'
//   config: {nameSrv, group, topic, expression, failOnceMarker?, rebalanceInterval?,
//            persistConsumerOffsetInterval?, heartbeatBrokerInterval?, pollNameServerInteval?}
//   (the intervals are ali-ons options in ms; pollNameServerInteval is spelled as ali-ons does)
//   A message whose body contains failOnceMarker makes the handler throw on its first delivery,
//   so ali-ons sends it back (CONSUMER_SEND_MSG_BACK) and it comes again through %RETRY%<group>.
//   The environment variable ALI_ONS_FAIL_ONCE_MARKER sets the marker too.
// The module is loaded from $ALI_ONS_MODULE (the installed node_modules/ali-ons directory).
//
// Output: one JSON object per line on stdout:
//   {"event":"started","clientId":..}
//   {"event":"queues","topic":..,"queueIds":[..]}  whenever the topic's queue allocation changes
//   {"event":"ready"}
//   {"event":"message","body":..,"tags":..,"keys":..,"msgId":..,"topic":..,"queueId":..,
//    "queueOffset":..,"reconsumeTimes":..,"properties":{..},"failed":bool}
//   {"event":"error","name":..,"message":..,"code":..,"intentional":bool}
//   {"event":"closed"}
// A line "close" on stdin (or stdin's end, or SIGTERM) closes the consumer gracefully: it
// commits its offsets and unregisters from the broker, then the process exits.

const ons = require(process.env.ALI_ONS_MODULE || 'ali-ons');

const INTENTIONAL = 'InteropIntentionalFailure';

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

const stderrLogger = {
  info() {},
  debug() {},
  warn(...args) { console.error('[ali-ons warn]', ...args); },
  error(...args) { console.error('[ali-ons error]', ...args); },
};

const config = JSON.parse(process.argv[2]);
const failOnceMarker = config.failOnceMarker || process.env.ALI_ONS_FAIL_ONCE_MARKER || null;
const failedOnce = new Set();

const options = {
  nameSrv: config.nameSrv,
  // only used to look up name servers over HTTP, which nameSrv makes unnecessary
  httpclient: {},
  consumerGroup: config.group,
  logger: stderrLogger,
};
// ali-ons client timers (ClientConfig options), when given
const timers = [
  'rebalanceInterval',
  'persistConsumerOffsetInterval',
  'heartbeatBrokerInterval',
  'pollNameServerInteval',
  // ACL account (a broker with aclEnable=true), when given
  'accessKeyId',
  'accessKeySecret',
];
for (const name of timers) {
  if (config[name]) {
    options[name] = config[name];
  }
}
const consumer = new ons.Consumer(options);

consumer.on('error', err => {
  emit({
    event: 'error',
    name: err.name,
    message: err.message,
    code: err.code === undefined ? null : err.code,
    intentional: err.name === INTENTIONAL,
  });
});

consumer.on(`topic_${config.topic}_queue_changed`, () => {
  const queueIds = [];
  for (const item of consumer.processQueueTable.values()) {
    if (item && item.messageQueue.topic === config.topic) {
      queueIds.push(Number(item.messageQueue.queueId));
    }
  }
  queueIds.sort((a, b) => a - b);
  emit({ event: 'queues', topic: config.topic, queueIds });
});

consumer.subscribe(config.topic, config.expression, async msg => {
  const body = msg.body.toString('utf8');
  const fail = Boolean(failOnceMarker) && body.includes(failOnceMarker) && !failedOnce.has(body);
  emit({
    event: 'message',
    body,
    tags: msg.tags === undefined ? null : msg.tags,
    keys: msg.keys === undefined ? null : msg.keys,
    msgId: msg.msgId,
    topic: msg.topic,
    queueId: Number(msg.queueId),
    queueOffset: Number(msg.queueOffset),
    reconsumeTimes: msg.reconsumeTimes,
    properties: msg.properties,
    failed: fail,
  });
  if (fail) {
    failedOnce.add(body);
    const err = new Error(`failing the first delivery of ${body.slice(0, 40)}`);
    err.name = INTENTIONAL;
    throw err;
  }
});

emit({ event: 'started', clientId: consumer._mqClient ? consumer._mqClient.clientId : null });

let closing = false;
async function shutdown() {
  if (closing) {
    return;
  }
  closing = true;
  try {
    await consumer.close();
  } catch (err) {
    emit({ event: 'error', name: err.name, message: `close: ${err.message}`, code: null, intentional: false });
  }
  emit({ event: 'closed' });
  process.exit(0);
}

consumer.ready().then(() => emit({ event: 'ready' }), err => {
  emit({ event: 'error', name: err.name, message: `ready: ${err.message}`, code: null, intentional: false });
  process.exit(1);
});

process.on('SIGTERM', shutdown);
process.stdin.setEncoding('utf8');
let pending = '';
process.stdin.on('data', chunk => {
  pending += chunk;
  let nl;
  while ((nl = pending.indexOf('\n')) >= 0) {
    const line = pending.slice(0, nl).trim();
    pending = pending.slice(nl + 1);
    if (line === 'close') {
      shutdown();
    }
  }
});
process.stdin.on('end', shutdown);
