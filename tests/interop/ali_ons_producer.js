'use strict';

// Sends messages to a rocketq name server + broker with ali-ons' Producer.
//
// Usage: node ali_ons_producer.js '<json config>'
//   config: {nameSrv, group, topic, messages: [{body, tags?, keys?: [..]}]}
// The module is loaded from $ALI_ONS_MODULE (the installed node_modules/ali-ons directory).
//
// Output: one JSON object per line on stdout:
//   {"event":"sent","index":i,"body":..,"msgId":..,"queueId":..,"queueOffset":..,"sendStatus":..}
//   {"event":"error","index":i,"name":..,"message":..,"code":..}   (then exit code 1)
//   {"event":"done","count":n}
// ali-ons' own warnings go to stderr.

const ons = require(process.env.ALI_ONS_MODULE || 'ali-ons');

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

const stderrLogger = {
  info() {},
  debug() {},
  warn(...args) { console.error('[ali-ons warn]', ...args); },
  error(...args) { console.error('[ali-ons error]', ...args); },
};

async function main() {
  const config = JSON.parse(process.argv[2]);
  const producer = new ons.Producer({
    nameSrv: config.nameSrv,
    // only used to look up name servers over HTTP, which nameSrv makes unnecessary
    httpclient: {},
    producerGroup: config.group,
    logger: stderrLogger,
    // ACL account (a broker with aclEnable=true), when given
    accessKeyId: config.accessKeyId,
    accessKeySecret: config.accessKeySecret,
  });
  producer.on('error', err => {
    emit({ event: 'error', index: null, name: err.name, message: err.message, code: err.code });
  });
  await producer.ready();

  let index = 0;
  for (const spec of config.messages) {
    const msg = spec.tags === undefined || spec.tags === null ?
      new ons.Message(config.topic, spec.body) :
      new ons.Message(config.topic, spec.tags, spec.body);
    if (spec.keys && spec.keys.length) {
      msg.keys = spec.keys;
    }
    let result;
    try {
      result = await producer.send(msg);
    } catch (err) {
      emit({ event: 'error', index, name: err.name, message: err.message, code: err.code });
      process.exit(1);
    }
    emit({
      event: 'sent',
      index,
      body: spec.body,
      msgId: result.msgId,
      queueId: Number(result.messageQueue.queueId),
      queueOffset: result.queueOffset,
      sendStatus: result.sendStatus,
    });
    index++;
  }
  await producer.close();
  emit({ event: 'done', count: index });
  process.exit(0);
}

main().catch(err => {
  emit({ event: 'error', index: null, name: err.name, message: err.message, code: err.code });
  process.exit(1);
});
