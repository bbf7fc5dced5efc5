'use strict';
// The gRPC tests' driver of rocketmq-client-nodejs, RocketMQ 5's official Node.js client.
//
//   node client5.js '<json>'
//
// {"mode": "produce", "endpoints": ..., "topic": ..., "messages": [{"body", "tag", "keys",
//   "delayMs", "messageGroup", "recall"}]}
//                                        one JSON line per send: {"i", "messageId", "recallHandle"}
//                                        or {"i", "error"}; "recall": recalled right after its send,
//                                        {"i", "recalled": the id RecallMessage answered}
// {"mode": "consume", "endpoints": ..., "group": ..., "topic": ..., "count": n, "ack": true}
//                                        one JSON line per message received (``batch``: which
//                                        receive call brought it), then {"done": n}
//
// Every line printed is JSON. The client's own log goes nowhere (it would write under ~/logs).

const { Producer, SimpleConsumer } = require('rocketmq-client-nodejs');

const opts = JSON.parse(process.argv[2]);
const out = obj => process.stdout.write(JSON.stringify(obj) + '\n');
const quiet = { info() {}, warn() {}, error() {}, debug() {} };
const common = { endpoints: opts.endpoints, sslEnabled: false, logger: quiet, requestTimeout: 10000 };

async function produce() {
  const producer = new Producer(Object.assign({ topics: [opts.topic] }, common));
  await producer.startup();
  for (const [i, m] of opts.messages.entries()) {
    const msg = { topic: opts.topic, body: Buffer.from(m.body), tag: m.tag, keys: m.keys || [] };
    if (m.delayMs) msg.delay = m.delayMs;
    if (m.messageGroup) msg.messageGroup = m.messageGroup;
    try {
      const receipt = await producer.send(msg);
      out({ i, messageId: receipt.messageId, recallHandle: receipt.recallHandle || null });
      if (m.recall) out({ i, recalled: (await producer.recallMessage(opts.topic, receipt.recallHandle)).messageId });
    } catch (e) {
      out({ i, error: String(e && e.message || e) });
    }
  }
  await producer.shutdown();
}

async function consume() {
  const consumer = new SimpleConsumer(Object.assign({
    consumerGroup: opts.group, subscriptions: new Map().set(opts.topic, opts.expression || '*'),
    awaitDuration: 2000 }, common));
  await consumer.startup();
  let n = 0;
  let batch = 0;
  const deadline = Date.now() + (opts.timeoutMs || 30000);
  while (n < opts.count && Date.now() < deadline) {
    const messages = await consumer.receive(16, 30000);
    batch++;
    for (const m of messages) {
      out({ batch, messageId: m.messageId, body: m.body.toString(), tag: m.tag || null, keys: m.keys || [],
        messageGroup: m.messageGroup || null, deliveryAttempt: m.deliveryAttempt, topic: m.topic,
        bornTimestamp: m.bornTimestamp ? Number(m.bornTimestamp) : null });
      if (opts.ack !== false) await consumer.ack(m);
      n++;
    }
  }
  await consumer.shutdown();
  out({ done: n });
}

({ produce, consume })[opts.mode]().then(
  () => process.stdout.write('', () => process.exit(0)),
  e => { out({ fatal: String(e && e.stack || e) }); process.stdout.write('', () => process.exit(1)); });
