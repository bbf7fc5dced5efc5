import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.JSONArray;
import com.alibaba.fastjson.JSONObject;
import com.alibaba.fastjson.serializer.SerializerFeature;
import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.rocketmq.client.QueryResult;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.consumer.store.RemoteBrokerOffsetStore;
import org.apache.rocketmq.client.impl.MQClientManager;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;
import org.apache.rocketmq.tools.command.MQAdminStartup;

/**
 * pymq's test helper: runs the steps of a JSON plan against a RocketMQ name server with the
 * official 4.9.7 client and mqadmin, in one JVM, and writes what each step saw as JSON.
 *
 *   java RmqProbe NAMESRV BROKER_ADDR PLAN.json OUT.json
 *
 * Steps ({"op": ...}): createTopic, send, dump, pullTag, query, uniq, viewOffsetId,
 * mqadmin, offsets, committed, consume, heartbeat, searchOffset, route, pushStart, pushWait. A step that throws records {"error": "..."}
 * and the plan goes on.
 */
public class RmqProbe {
    static String ns;
    static String brokerAddr;
    static DefaultMQAdminExt admin;
    static DefaultMQProducer producer;
    static final Map<String, DefaultMQPullConsumer> consumers = new HashMap<>();
    static final Map<String, DefaultMQPushConsumer> pushConsumers = new HashMap<>();
    static final Map<String, AtomicInteger> pushed = new HashMap<>();

    public static void main(String[] args) throws Exception {
        ns = args[0];
        brokerAddr = args[1];
        JSONArray plan = JSON.parseArray(new String(Files.readAllBytes(Paths.get(args[2])), StandardCharsets.UTF_8));
        admin = new DefaultMQAdminExt();
        admin.setNamesrvAddr(ns);
        admin.setInstanceName("probe-admin");
        admin.start();
        producer = new DefaultMQProducer("probe_producer");
        producer.setNamesrvAddr(ns);
        producer.setInstanceName("probe-producer");
        producer.start();
        JSONArray results = new JSONArray();
        for (int i = 0; i < plan.size(); i++) {
            JSONObject step = plan.getJSONObject(i);
            JSONObject r = new JSONObject();
            r.put("op", step.getString("op"));
            try {
                r.put("result", run(step));
            } catch (Throwable e) {
                r.put("error", e.toString());
            }
            results.add(r);
        }
        for (DefaultMQPullConsumer c : consumers.values()) c.shutdown();
        for (DefaultMQPushConsumer c : pushConsumers.values()) c.shutdown();
        producer.shutdown();
        admin.shutdown();
        String json = JSON.toJSONString(results, SerializerFeature.WriteMapNullValue);   // keep null tags/keys
        Files.write(Paths.get(args[3]), json.getBytes(StandardCharsets.UTF_8));
        System.exit(0);
    }

    static Object run(JSONObject s) throws Exception {
        switch (s.getString("op")) {
            case "createTopic": {
                int n = s.getIntValue("queues");
                admin.createAndUpdateTopicConfig(brokerAddr, new TopicConfig(s.getString("topic"), n, n, 6));
                return queues(s.getString("topic")).size();
            }
            case "send":             // with "batch": true one batch, to the first message's queue
                return s.getBooleanValue("batch") ? sendBatch(s.getString("topic"), s.getJSONArray("messages"))
                    : send(s.getString("topic"), s.getJSONArray("messages"));
            case "dump": return dump(s);
            case "pullTag": return pullTag(s.getString("topic"), s.getString("tag"));
            case "query": {
                QueryResult qr = admin.queryMessage(s.getString("topic"), s.getString("key"), 64, 0, Long.MAX_VALUE);
                return summaries(qr.getMessageList());
            }
            case "uniq": {
                String topic = s.getString("topic");
                QueryResult qr = admin.queryMessageByUniqKey(topic, s.getString("key"), 32, 0, Long.MAX_VALUE);
                return summaries(qr.getMessageList());
            }
            case "viewOffsetId": return message(admin.viewMessage(s.getString("id")));
            case "mqadmin": {        // its standard output; with "stderr": true {"out", "err"}
                String[] outErr = mqadmin(s.getJSONArray("args"));
                if (!s.getBooleanValue("stderr")) return outErr[0];
                JSONObject o = new JSONObject();
                o.put("out", outErr[0]);
                o.put("err", outErr[1]);
                return o;
            }
            case "offsets": {
                DefaultMQPullConsumer c = consumer(s.getString("group"));
                JSONObject out = new JSONObject();
                for (MessageQueue mq : queues(s.getString("topic")))
                    out.put(String.valueOf(mq.getQueueId()), c.fetchConsumeOffset(mq, true));
                return out;
            }
            case "committed": {           // the group's committed offsets as the broker reports them (consumeStats,
                                          // no client joins the group); with "waitFor" {qid: offset}, polled until
                                          // they are those (up to "waitMs")
                long deadline = System.currentTimeMillis() + s.getLongValue("waitMs");
                while (true) {
                    JSONObject out = new JSONObject();
                    admin.examineConsumeStats(s.getString("group"), s.getString("topic")).getOffsetTable()
                        .forEach((mq, w) -> out.put(String.valueOf(mq.getQueueId()), w.getConsumerOffset()));
                    if (!s.containsKey("waitFor") || out.equals(s.getJSONObject("waitFor"))
                        || System.currentTimeMillis() > deadline) return out;
                    Thread.sleep(200);
                }
            }
            case "consume": return consume(s.getString("group"), s.getString("topic"), s.getJSONObject("counts"));
            case "heartbeat": {      // the consumers' heartbeat now (a started consumer's first one waits a second,
                                     // then goes only to brokers whose routes it knows): the broker registers
                                     // the groups (and their %RETRY% topics) as it does for a push consumer
                MQClientManager.getInstance().getOrCreateMQClientInstance(consumer(s.getString("group")))
                    .sendHeartbeatToAllBrokerWithLock();
                return true;
            }
            case "searchOffset": {        // {queueId: offset} for a time: "timestamp", or now + "deltaMs"
                long ts = s.containsKey("timestamp") ? s.getLongValue("timestamp")
                    : System.currentTimeMillis() + s.getLongValue("deltaMs");
                JSONObject out = new JSONObject();
                for (MessageQueue mq : queues(s.getString("topic")))
                    out.put(String.valueOf(mq.getQueueId()), admin.searchOffset(mq, ts));
                return out;
            }
            case "pushStart": {           // a push consumer (clustering, "*") that counts what it is handed
                DefaultMQPushConsumer c = new DefaultMQPushConsumer(s.getString("group"));
                c.setNamesrvAddr(ns);
                c.setInstanceName("probe-push-" + s.getString("group"));
                c.setPersistConsumerOffsetInterval(500);
                c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
                c.subscribe(s.getString("topic"), "*");
                AtomicInteger n = new AtomicInteger();
                c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                    n.addAndGet(msgs.size());
                    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
                });
                c.start();
                pushed.put(s.getString("group"), n);
                pushConsumers.put(s.getString("group"), c);
                return true;
            }
            case "pushWait": {            // messages the push consumer was handed, once >= "count" (or "waitMs")
                AtomicInteger n = pushed.get(s.getString("group"));
                long deadline = System.currentTimeMillis() + s.getLongValue("waitMs");
                while (n.get() < s.getIntValue("count") && System.currentTimeMillis() < deadline) Thread.sleep(50);
                Thread.sleep(s.getLongValue("settleMs"));
                return n.get();
            }
            case "route":                 // the name server's TopicRouteData, as JSON
                return JSON.parse(admin.examineTopicRouteInfo(s.getString("topic")).toJson());
            default: throw new IllegalArgumentException("unknown op " + s.getString("op"));
        }
    }

    static DefaultMQPullConsumer consumer(String group) throws Exception {
        DefaultMQPullConsumer c = consumers.get(group);
        if (c == null) {
            c = new DefaultMQPullConsumer(group);
            c.setNamesrvAddr(ns);
            c.setInstanceName("probe-consumer");
            c.start();
            consumers.put(group, c);
        }
        return c;
    }

    static List<MessageQueue> queues(String topic) throws Exception {
        List<MessageQueue> l = new ArrayList<>(consumer("probe_dump").fetchSubscribeMessageQueues(topic));
        l.sort(Comparator.comparingInt(MessageQueue::getQueueId));
        return l;
    }

    /** Group `group` consumes up to counts[queueId] more messages of each queue from its
     *  committed offset, and commits where it got to; returns the broker's offsets then. */
    static JSONObject consume(String group, String topic, JSONObject counts) throws Exception {
        DefaultMQPullConsumer c = consumer(group);
        RemoteBrokerOffsetStore store =
            (RemoteBrokerOffsetStore) c.getDefaultMQPullConsumerImpl().getOffsetStore();
        JSONObject out = new JSONObject();
        for (MessageQueue mq : queues(topic)) {
            Integer n = counts.getInteger(String.valueOf(mq.getQueueId()));
            if (n == null) continue;
            long off = Math.max(0, c.fetchConsumeOffset(mq, true));
            for (int got = 0; got < n; ) {
                PullResult pr = c.pull(mq, "*", off, Math.min(32, n - got));
                if (pr.getPullStatus() != PullStatus.FOUND) break;
                got += pr.getMsgFoundList().size();
                off = pr.getNextBeginOffset();
            }
            c.updateConsumeOffset(mq, off);
            store.updateConsumeOffsetToBroker(mq, off, false);   // synchronous, not the oneway persist
            out.put(String.valueOf(mq.getQueueId()), c.fetchConsumeOffset(mq, true));
        }
        return out;
    }

    static Message message(String topic, JSONObject m) {
        Message msg = new Message(topic, Base64.getDecoder().decode(m.getString("body")));
        if (m.getString("tags") != null) msg.setTags(m.getString("tags"));
        if (m.getString("keys") != null) msg.setKeys(m.getString("keys"));
        JSONObject props = m.getJSONObject("props");
        if (props != null) for (String k : props.keySet()) msg.putUserProperty(k, props.getString(k));
        if (m.containsKey("delayLevel")) msg.setDelayTimeLevel(m.getIntValue("delayLevel"));
        return msg;
    }

    /** One result per message of a batch sent with one request: the result's comma-joined
     *  ids split, the queue offsets counted on from the first. */
    static JSONArray sendBatch(String topic, JSONArray msgs) throws Exception {
        List<Message> batch = new ArrayList<>();
        for (int i = 0; i < msgs.size(); i++) batch.add(message(topic, msgs.getJSONObject(i)));
        int qid = msgs.getJSONObject(0).getIntValue("queue");
        MessageQueue mq = null;
        for (MessageQueue q : queues(topic)) if (q.getQueueId() == qid) mq = q;
        SendResult r = producer.send(batch, mq);
        String[] ids = r.getMsgId().split(","), offsetIds = r.getOffsetMsgId().split(",");
        JSONArray out = new JSONArray();
        for (int i = 0; i < ids.length; i++) {
            JSONObject o = new JSONObject();
            o.put("status", r.getSendStatus().toString());
            o.put("msgId", ids[i]);
            o.put("offsetMsgId", offsetIds[i]);
            o.put("queueId", r.getMessageQueue().getQueueId());
            o.put("queueOffset", r.getQueueOffset() + i);
            out.add(o);
        }
        return out;
    }

    static JSONArray send(String topic, JSONArray msgs) throws Exception {
        JSONArray out = new JSONArray();
        for (int i = 0; i < msgs.size(); i++) {
            JSONObject m = msgs.getJSONObject(i);
            Message msg = message(topic, m);
            final int qid = m.getIntValue("queue");
            SendResult r = producer.send(msg, (mqs, mm, arg) -> {
                for (MessageQueue mq : mqs) if (mq.getQueueId() == qid) return mq;
                throw new IllegalStateException("no queue " + qid);
            }, null);
            JSONObject o = new JSONObject();
            o.put("status", r.getSendStatus().toString());
            o.put("msgId", r.getMsgId());
            o.put("offsetMsgId", r.getOffsetMsgId());
            o.put("queueId", r.getMessageQueue().getQueueId());
            o.put("queueOffset", r.getQueueOffset());
            out.add(o);
        }
        return out;
    }

    /** Every message of the topics, each queue pulled from offset 0 ("*"); with "waitFor"
     *  {topic: n} pulls again (up to "waitMs") until a topic holds at least n messages. */
    static JSONObject dump(JSONObject s) throws Exception {
        JSONObject waitFor = s.getJSONObject("waitFor");
        long deadline = System.currentTimeMillis() + s.getLongValue("waitMs");
        while (true) {
            JSONObject out = new JSONObject();
            boolean enough = true;
            for (Object t : s.getJSONArray("topics")) {
                String topic = (String) t;
                JSONArray msgs = new JSONArray();
                for (MessageQueue mq : queues(topic)) {
                    long off = 0;
                    while (true) {
                        PullResult pr = consumer("probe_dump").pull(mq, "*", off, 32);
                        if (pr.getPullStatus() != PullStatus.FOUND) break;
                        for (MessageExt m : pr.getMsgFoundList()) msgs.add(message(m));
                        off = pr.getNextBeginOffset();
                    }
                }
                out.put(topic, msgs);
                if (waitFor != null && waitFor.containsKey(topic) && msgs.size() < waitFor.getIntValue(topic)) enough = false;
            }
            if (enough || System.currentTimeMillis() > deadline) return out;
            Thread.sleep(300);
        }
    }

    /** {queueId: [queue offsets]} of the messages a pull with subscription `tag` returns:
     *  the broker filters by the tags hash code in the consume-queue entries. */
    static JSONObject pullTag(String topic, String tag) throws Exception {
        JSONObject out = new JSONObject();
        for (MessageQueue mq : queues(topic)) {
            JSONArray offs = new JSONArray();
            long off = 0;
            while (true) {
                PullResult pr = consumer("probe_dump").pull(mq, tag, off, 32);
                if (pr.getPullStatus() == PullStatus.FOUND)
                    for (MessageExt m : pr.getMsgFoundList()) offs.add(m.getQueueOffset());
                else if (pr.getPullStatus() != PullStatus.NO_MATCHED_MSG) break;
                if (pr.getNextBeginOffset() <= off) break;
                off = pr.getNextBeginOffset();
            }
            out.put(String.valueOf(mq.getQueueId()), offs);
        }
        return out;
    }

    /** {standard output, standard error} of one mqadmin command (a failed command prints
     *  its stack trace to standard error). */
    static String[] mqadmin(JSONArray a) {
        List<String> args = new ArrayList<>();
        for (Object o : a) args.add((String) o);
        args.add("-n");
        args.add(ns);
        PrintStream oldOut = System.out, oldErr = System.err;
        ByteArrayOutputStream out = new ByteArrayOutputStream(), err = new ByteArrayOutputStream();
        System.setOut(new PrintStream(out, true));
        System.setErr(new PrintStream(err, true));
        try {
            MQAdminStartup.main0(args.toArray(new String[0]), null);
        } finally {
            System.setOut(oldOut);
            System.setErr(oldErr);
        }
        return new String[] {new String(out.toByteArray(), StandardCharsets.UTF_8),
                             new String(err.toByteArray(), StandardCharsets.UTF_8)};
    }

    static JSONArray summaries(List<MessageExt> l) {
        JSONArray out = new JSONArray();
        for (MessageExt m : l) {
            JSONObject o = new JSONObject();
            o.put("topic", m.getTopic());
            o.put("queueId", m.getQueueId());
            o.put("queueOffset", m.getQueueOffset());
            o.put("commitLogOffset", m.getCommitLogOffset());
            o.put("keys", m.getKeys());
            out.add(o);
        }
        return out;
    }

    static String host(SocketAddress a) {
        InetSocketAddress i = (InetSocketAddress) a;
        return i.getAddress().getHostAddress() + ":" + i.getPort();
    }

    static JSONObject message(MessageExt m) {
        JSONObject o = new JSONObject();
        o.put("topic", m.getTopic());
        o.put("queueId", m.getQueueId());
        o.put("queueOffset", m.getQueueOffset());
        o.put("commitLogOffset", m.getCommitLogOffset());
        o.put("storeSize", m.getStoreSize());
        o.put("body", Base64.getEncoder().encodeToString(m.getBody() == null ? new byte[0] : m.getBody()));
        o.put("bodyCRC", m.getBodyCRC());
        o.put("flag", m.getFlag());
        o.put("sysFlag", m.getSysFlag());
        o.put("bornTimestamp", m.getBornTimestamp());
        o.put("storeTimestamp", m.getStoreTimestamp());
        o.put("bornHost", host(m.getBornHost()));
        o.put("storeHost", host(m.getStoreHost()));
        o.put("reconsumeTimes", m.getReconsumeTimes());
        o.put("preparedTransactionOffset", m.getPreparedTransactionOffset());
        o.put("msgId", m.getMsgId());
        o.put("tags", m.getTags());
        o.put("keys", m.getKeys());
        o.put("properties", new HashMap<>(m.getProperties()));
        return o;
    }
}
