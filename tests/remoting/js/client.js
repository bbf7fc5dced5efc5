'use strict';
// The remoting tests' driver of ali-ons (the pure-JavaScript RocketMQ 4.x client).
//
//   node client.js '<json>'
//
// {"mode": "produce", ...}  sends messages, one JSON line per send result
// {"mode": "consume", ...}  a push consumer; one JSON line per message handed to it
// {"mode": "invoke", ...}   raw requests through ali-ons' own channel and codec
//
// Every line printed is JSON; errors the client reports are printed as {"error": ...}.

const { Producer, Consumer, Message } = require('ali-ons');
const Channel = require('ali-ons/lib/channel');
const RemotingCommand = require('ali-ons/lib/protocol/command/remoting_command');
const MessageDecoder = require('ali-ons/lib/message/message_decoder');
const ByteBuffer = require('byte');

const opts = JSON.parse(process.argv[2]);
const out = obj => process.stdout.write(JSON.stringify(obj) + '\n');
// exit once what was printed is written: writes to a pipe are asynchronous, and an exit
// with some still buffered would cut the output
const finish = code => process.stdout.write('', () => process.exit(code));
const sleep = ms => new Promise(r => setTimeout(r, ms));
const quietLogger = { info() {}, warn() {}, debug() {}, error() {} };
const common = {
  nameSrv: opts.nameSrv,
  httpclient: {},
  logger: quietLogger,
  rebalanceInterval: opts.rebalanceInterval || 1000,
  persistConsumerOffsetInterval: opts.persistInterval || 500,
  heartbeatBrokerInterval: opts.heartbeatInterval || 5000,
};
if (opts.accessKey) {
  common.accessKey = opts.accessKey;
  common.secretKey = opts.secretKey;
}

async function produce() {
  const producer = new Producer(Object.assign({ producerGroup: opts.group || 'PG' }, common));
  producer.on('error', e => out({ error: e.message }));
  await producer.ready();
  const start = opts.start || 0;
  const sends = new Set();
  for (let i = start; i < start + opts.count; i++) {
    const body = opts.bodySize ? Buffer.alloc(opts.bodySize, 'x' + (i % 10)) : Buffer.from('body-' + i);
    const tags = opts.tags ? opts.tags[i % opts.tags.length] : null;
    const createdAt = Date.now();
    const msg = new Message(opts.topic, tags, body);
    if (opts.keys !== false) msg.keys = [ (opts.keyPrefix || 'key-') + i ];
    if (opts.delayLevel) msg.delayTimeLevel = opts.delayLevel;
    if (opts.deliverAfterMs) msg.setStartDeliverTime(Date.now() + opts.deliverAfterMs);
    const send = producer.send(msg).then(r => out({ i, msgId: r.msgId, queueId: Number(r.messageQueue.queueId),
      queueOffset: r.queueOffset, status: r.sendStatus, createdAt, sentAt: Date.now() }),
    e => out({ i, error: e.message, code: e.code }));
    if (!opts.concurrent) {
      await send;
      continue;
    }
    // up to `concurrent` sends in flight
    const tracked = send.then(() => sends.delete(tracked));
    sends.add(tracked);
    if (sends.size >= opts.concurrent) await Promise.race(sends);
  }
  await Promise.all(sends);
  await producer.close();
}

async function consume() {
  const options = Object.assign({ consumerGroup: opts.group, consumeFromWhere: opts.consumeFromWhere || 'CONSUME_FROM_FIRST_OFFSET',
    maxReconsumeTimes: opts.maxReconsumeTimes === undefined ? 16 : opts.maxReconsumeTimes }, common);
  const consumer = new Consumer(options);
  consumer.on('error', e => out({ error: e.message }));
  const failures = opts.fail || {};          // key -> how many times to fail it (-1: always)
  consumer.subscribe(opts.topic, opts.expression || '*', async msg => {
    const key = msg.keys;
    const line = { msgId: msg.msgId, keys: key, tags: msg.tags, body: msg.body.toString(), topic: msg.topic,
      queueId: msg.queueId, queueOffset: Number(msg.queueOffset), reconsumeTimes: msg.reconsumeTimes,
      originMsgId: msg.originMessageId || null, at: Date.now(), bodyLength: msg.body.length };
    if (key in failures && failures[key] !== 0) {
      if (failures[key] > 0) failures[key]--;
      out(Object.assign({ failed: true }, line));
      throw new Error('handler fails for ' + key);
    }
    out(line);
  });
  await consumer.ready();
  out({ ready: true });
  const stop = async () => {
    await consumer.close();
    out({ closed: true });
    finish(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  if (opts.runMs) {
    await sleep(opts.runMs);
    await stop();
  }
  await new Promise(() => {});            // until SIGTERM
}

async function invoke() {
  const channel = new Channel(opts.addr, opts.accessKey ? { accessKey: opts.accessKey, secretKey: opts.secretKey } : {});
  channel.on('error', e => out({ error: e.message }));
  for (const r of opts.requests) {
    const cmd = RemotingCommand.createRequestCommand(r.code, r.header || null);
    if (r.body !== undefined) cmd.body = Buffer.from(r.body, 'base64');
    try {
      const res = await channel.invoke(cmd, r.timeout || 5000);
      const line = { code: res.code, remark: res.remark, ext: res.extFields || {},
        body: res.body ? res.body.toString('base64') : null };
      if (r.decode && res.body && res.code === 0) {
        line.messages = MessageDecoder.decodes(ByteBuffer.wrap(res.body)).map(m => ({
          msgId: m.msgId, topic: m.topic, keys: m.keys, tags: m.tags, body: m.body.toString(),
          queueId: m.queueId, queueOffset: Number(m.queueOffset), commitLogOffset: Number(m.commitLogOffset),
          reconsumeTimes: m.reconsumeTimes, properties: m.properties }));
      }
      out(line);
    } catch (e) {
      out({ error: e.message, name: e.name });
    }
  }
  channel.close();
}

// {"mode": "swarm", "addr", "connections", "messages", "topic", "queues"}: that many
// connections at once, each sending its messages with SEND_MESSAGE_V2 while a pull of an
// empty queue is parked on it; one line per connection.
async function swarm() {
  const channels = [];
  for (let c = 0; c < opts.connections; c++) channels.push(new Channel(opts.addr, {}));
  await Promise.all(channels.map(async (ch, c) => {
    ch.on('error', e => out({ error: e.message }));
    const parked = ch.invoke(RemotingCommand.createRequestCommand(11, { consumerGroup: 'SWARM_CG', topic: opts.idleTopic,
      queueId: 0, queueOffset: 0, maxMsgNums: 32, sysFlag: 2, commitOffset: 0, suspendTimeoutMillis: 3000,
      subscription: '*', subVersion: 0 }), 10000);
    let ok = 0;
    const t0 = Date.now();
    await Promise.all(Array.from({ length: opts.messages }, async (_, i) => {
      const req = RemotingCommand.createRequestCommand(310, { a: 'SWARM_PG', b: opts.topic, c: 'TBW102', d: 4,
        e: (c + i) % opts.queues, f: 0, g: Date.now(), h: 0, i: 'KEYS\u0001swarm-' + c + '-' + i + '\u0002', j: 0, k: false });
      req.body = Buffer.from('swarm ' + c + ' ' + i);
      const res = await ch.invoke(req, 10000);
      if (res.code === 0) ok++;
    }));
    const sentMs = Date.now() - t0;
    const pull = await parked;
    out({ connection: c, ok, sentMs, parkedCode: pull.code, parkedMs: Date.now() - t0 });
    ch.close();
  }));
}

// {"mode": "checker", "addr", "group", "answer": 8|12, "runMs"}: a producer connection that
// answers the broker's CHECK_TRANSACTION_STATE with END_TRANSACTION.
async function checker() {
  const ch = new Channel(opts.addr, {});
  ch.on('error', e => out({ error: e.message }));
  ch.on('request', entity => {
    const cmd = entity.data;
    out({ request: cmd.code, ext: cmd.extFields, body: cmd.body ? cmd.body.toString('base64') : null,
      messages: cmd.body ? MessageDecoder.decodes(ByteBuffer.wrap(cmd.body)).map(m => ({ topic: m.topic,
        body: m.body.toString(), properties: m.properties })) : [] });
    if (cmd.code === 39) {
      const h = cmd.extFields;
      const end = RemotingCommand.createRequestCommand(37, { producerGroup: opts.group,
        tranStateTableOffset: h.tranStateTableOffset, commitLogOffset: h.commitLogOffset, commitOrRollback: opts.answer,
        fromTransactionCheck: true, msgId: h.msgId, transactionId: h.transactionId });
      ch.invoke(end, 5000).then(r => out({ ended: r.code }), e => out({ error: e.message }));
    }
  });
  const hb = RemotingCommand.createRequestCommand(34, null);
  hb.body = Buffer.from(JSON.stringify({ clientID: 'checker@' + process.pid, producerDataSet: [{ groupName: opts.group }],
    consumerDataSet: [] }));
  const res = await ch.invoke(hb, 5000);
  out({ heartbeat: res.code });
  await sleep(opts.runMs || 10000);
  ch.close();
}

// ali-ons leaves timers behind after close(): exit when the mode is done
({ produce, consume, invoke, swarm, checker })[opts.mode]().then(() => finish(0), e => {
  out({ fatal: e.message, stack: e.stack });
  finish(1);
});
