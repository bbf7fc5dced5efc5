import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.JSONArray;
import com.alibaba.fastjson.JSONObject;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * pymq's parity test: the official Java 4.9.7 client's features, run one after another against
 * a name server, each printing one line "FEATURE {json}" of what it saw: counts, bodies, order,
 * properties and statuses, never ids or timings, so the same line is expected from Apache
 * RocketMQ and from pymq serve. A feature that throws prints {"feature": name, "error": ...}.
 *
 *   java FeatureMatrix NAMESRV BROKER_ADDR [FEATURE ...]      (default: all of them)
 *
 * The broker is expected to run with short delay levels (1 s each) and a transaction check
 * of about a second (tests/parity/test_client_matrix.py starts both servers so). This class
 * runs the features and holds the sending side; ConsumerFeatures.java the consuming side.
 */
public class FeatureMatrix {
    static final List<String> FEATURES = Arrays.asList("sync_send", "async_send", "oneway_send", "batch_send",
        "delay_level", "push_clustering", "retry_dlq", "orderly", "transaction", "lite_pull", "pull_offsets");
    static String ns, brokerAddr;
    static DefaultMQAdminExt admin;
    static DefaultMQProducer producer;
    static DefaultMQPullConsumer reader;

    public static void main(String[] args) throws Exception {
        System.setProperty("rocketmq.client.rebalance.waitInterval", "1000");   // before any client class loads
        ns = args[0];
        brokerAddr = args[1];
        List<String> run = args.length > 2 ? Arrays.asList(args).subList(2, args.length) : FEATURES;
        admin = new DefaultMQAdminExt();
        admin.setNamesrvAddr(ns);
        admin.setInstanceName("matrix-admin");
        admin.start();
        producer = client(new DefaultMQProducer("matrix_producer"), "matrix-producer");
        producer.start();
        reader = client(new DefaultMQPullConsumer("matrix_reader"), "matrix-reader");
        reader.start();
        for (String f : run) {
            JSONObject r;
            try {
                r = (JSONObject) feature(f).invoke(null);
            } catch (java.lang.reflect.InvocationTargetException e) {
                r = new JSONObject();
                r.put("error", e.getCause().toString());
            }
            r.put("feature", f);
            System.out.println("FEATURE " + JSON.toJSONString(r));
            System.out.flush();
        }
        reader.shutdown();
        producer.shutdown();
        admin.shutdown();
        System.exit(0);
    }

    /** The feature's method: ConsumerFeatures' or this class's. */
    static java.lang.reflect.Method feature(String name) throws NoSuchMethodException {
        try {
            return ConsumerFeatures.class.getDeclaredMethod(name);
        } catch (NoSuchMethodException e) {
            return FeatureMatrix.class.getDeclaredMethod(name);
        }
    }

    static <T extends org.apache.rocketmq.client.ClientConfig> T client(T c, String instance) {
        c.setNamesrvAddr(ns);
        c.setInstanceName(instance);
        c.setPollNameServerInterval(1000);
        c.setHeartbeatBrokerInterval(1000);
        if (c instanceof DefaultMQProducer) ((DefaultMQProducer) c).setSendMsgTimeout(10000);  // a cold broker JVM
        return c;
    }

    // -- helpers ------------------------------------------------------------------------------

    static void createTopic(String topic, int queues) throws Exception {
        admin.createAndUpdateTopicConfig(brokerAddr, new TopicConfig(topic, queues, queues, 6));
        waitUntil(() -> { try { return queues(topic).size() == queues; } catch (Exception e) { return false; } }, 10000);
    }

    static List<MessageQueue> queues(String topic) throws Exception {
        List<MessageQueue> l = new ArrayList<>(reader.fetchSubscribeMessageQueues(topic));
        l.sort(Comparator.comparingInt(MessageQueue::getQueueId));
        return l;
    }

    static boolean waitUntil(BooleanSupplier ok, long ms) throws InterruptedException {
        long deadline = System.currentTimeMillis() + ms;
        while (!ok.getAsBoolean()) {
            if (System.currentTimeMillis() > deadline) return false;
            Thread.sleep(50);
        }
        return true;
    }

    static Message message(String topic, String body) {
        return new Message(topic, body.getBytes(StandardCharsets.UTF_8));
    }

    static String body(MessageExt m) {
        return new String(m.getBody(), StandardCharsets.UTF_8);
    }

    /** Every message of the topic in (queue, offset) order, pulled from offset 0; pulls again
     *  (up to ms) until there are at least `expect`. */
    static List<MessageExt> pullAll(String topic, int expect, long ms) throws Exception {
        long deadline = System.currentTimeMillis() + ms;
        while (true) {
            List<MessageExt> all = new ArrayList<>();
            for (MessageQueue mq : queues(topic)) {
                long off = 0;
                while (true) {
                    PullResult pr = reader.pull(mq, "*", off, 32);
                    if (pr.getPullStatus() != PullStatus.FOUND) break;
                    all.addAll(pr.getMsgFoundList());
                    off = pr.getNextBeginOffset();
                }
            }
            if (all.size() >= expect || System.currentTimeMillis() > deadline) return all;
            Thread.sleep(100);
        }
    }

    static List<String> bodies(List<MessageExt> l, boolean sorted) {
        List<String> out = new ArrayList<>();
        for (MessageExt m : l) out.add(body(m));
        if (sorted) Collections.sort(out);
        return out;
    }

    /** Properties whose values are ids, offsets of the moment or counts of timed retries. */
    static final List<String> VARYING = Arrays.asList("UNIQ_KEY", "MIN_OFFSET", "MAX_OFFSET", "ORIGIN_MESSAGE_ID",
        "TRANSACTION_CHECK_TIMES", "CONSUME_START_TIME", "__CRC32#");

    /** The message's properties, sorted, the VARYING ones' values written "*". */
    static Map<String, String> properties(MessageExt m) {
        Map<String, String> out = new TreeMap<>();
        for (Map.Entry<String, String> e : m.getProperties().entrySet())
            out.put(e.getKey(), VARYING.contains(e.getKey()) ? "*" : e.getValue());
        return out;
    }

    /** True when each queue's messages have consecutive offsets from 0. */
    static boolean consecutive(List<MessageExt> l) {
        Map<Integer, Long> next = new TreeMap<>();
        for (MessageExt m : l) {
            long want = next.getOrDefault(m.getQueueId(), 0L);
            if (m.getQueueOffset() != want) return false;
            next.put(m.getQueueId(), want + 1);
        }
        return true;
    }

    // -- sends --------------------------------------------------------------------------------

    /** Sync sends to a topic the first send creates (autoCreateTopicEnable), read back. */
    static JSONObject sync_send() throws Exception {
        List<String> statuses = new ArrayList<>();
        for (int i = 0; i < 8; i++) {
            Message m = message("MatrixSync", "sync-" + i);
            m.setTags("TagS");
            m.setKeys("key-" + i);
            m.putUserProperty("color", i % 2 == 0 ? "red" : "blue");
            statuses.add(producer.send(m).getSendStatus().toString());
        }
        List<MessageExt> got = pullAll("MatrixSync", 8, 5000);
        JSONArray back = new JSONArray();
        for (MessageExt m : got) {
            JSONObject o = new JSONObject();
            o.put("body", body(m));
            o.put("properties", properties(m));
            back.add(o);
        }
        back.sort(Comparator.comparing(o -> ((JSONObject) o).getString("body")));
        JSONObject r = new JSONObject();
        r.put("statuses", statuses);
        r.put("publish_queues", producer.fetchPublishMessageQueues("MatrixSync").size());
        r.put("queues_used", got.stream().map(MessageExt::getQueueId).distinct().count());
        r.put("offsets_consecutive", consecutive(got));
        r.put("read_back", back);
        return r;
    }

    static JSONObject async_send() throws Exception {
        createTopic("MatrixAsync", 4);
        List<String> statuses = new CopyOnWriteArrayList<>();
        List<String> failures = new CopyOnWriteArrayList<>();
        CountDownLatch done = new CountDownLatch(8);
        for (int i = 0; i < 8; i++) {
            producer.send(message("MatrixAsync", "async-" + i), new SendCallback() {
                public void onSuccess(SendResult r) { statuses.add(r.getSendStatus().toString()); done.countDown(); }
                public void onException(Throwable e) { failures.add(e.toString()); done.countDown(); }
            });
        }
        JSONObject r = new JSONObject();
        r.put("all_called_back", done.await(10, TimeUnit.SECONDS));
        List<String> s = new ArrayList<>(statuses);
        Collections.sort(s);
        r.put("statuses", s);
        r.put("failures", failures);
        List<MessageExt> got = pullAll("MatrixAsync", 8, 5000);
        r.put("bodies", bodies(got, true));
        r.put("offsets_consecutive", consecutive(got));
        return r;
    }

    static JSONObject oneway_send() throws Exception {
        createTopic("MatrixOneway", 4);
        for (int i = 0; i < 8; i++) producer.sendOneway(message("MatrixOneway", "oneway-" + i));
        List<MessageExt> got = pullAll("MatrixOneway", 8, 5000);
        JSONObject r = new JSONObject();
        r.put("bodies", bodies(got, true));
        r.put("offsets_consecutive", consecutive(got));
        return r;
    }

    static JSONObject batch_send() throws Exception {
        createTopic("MatrixBatch", 4);
        List<Message> batch = new ArrayList<>();
        for (int i = 0; i < 5; i++) {
            Message m = message("MatrixBatch", "batch-" + i);
            m.setKeys("bk-" + i);
            batch.add(m);
        }
        SendResult sr = producer.send(batch);
        List<MessageExt> got = pullAll("MatrixBatch", 5, 5000);
        List<String> uniq = new ArrayList<>();
        List<Map<String, String>> props = new ArrayList<>();
        boolean oneQueue = true;
        for (MessageExt m : got) {
            uniq.add(m.getProperty("UNIQ_KEY"));
            props.add(properties(m));
            oneQueue &= m.getQueueId() == sr.getMessageQueue().getQueueId();
        }
        JSONObject r = new JSONObject();
        r.put("status", sr.getSendStatus().toString());
        r.put("first_offset", sr.getQueueOffset());
        r.put("ids_returned", sr.getMsgId().split(",").length);
        r.put("ids_are_the_uniq_keys", String.join(",", uniq).equals(sr.getMsgId()));
        r.put("one_queue", oneQueue);
        r.put("bodies_in_queue_order", bodies(got, false));
        r.put("properties", props);
        r.put("offsets_consecutive", consecutive(got));
        return r;
    }

    /** Delay level 3 (1 s on the test brokers): not there at once, then there with DELAY=3. */
    static JSONObject delay_level() throws Exception {
        createTopic("MatrixDelay", 1);
        Message m = message("MatrixDelay", "delayed");
        m.setDelayTimeLevel(3);
        long sent = System.currentTimeMillis();
        SendResult sr = producer.send(m);
        boolean atOnce = !pullAll("MatrixDelay", 1, 0).isEmpty();
        List<MessageExt> got = pullAll("MatrixDelay", 1, 10000);
        long waited = System.currentTimeMillis() - sent;
        JSONObject r = new JSONObject();
        r.put("status", sr.getSendStatus().toString());
        r.put("visible_at_once", atOnce);
        r.put("delivered", got.size());
        r.put("after_its_delay", waited >= 900);
        if (!got.isEmpty()) {
            MessageExt d = got.get(0);
            r.put("body", body(d));
            r.put("topic", d.getTopic());
            r.put("properties", properties(d));
        }
        return r;
    }

    // -- transactions ------------------------------------------------------------------------

    /** One COMMIT, one ROLLBACK, one UNKNOW that the broker's check turns into a commit. */
    static JSONObject transaction() throws Exception {
        createTopic("MatrixTx", 1);                // one queue: REAL_QID is the same on both
        List<String> checked = new CopyOnWriteArrayList<>();
        TransactionMQProducer p = client(new TransactionMQProducer("matrix_tx"), "matrix-tx");
        p.setTransactionListener(new TransactionListener() {
            public LocalTransactionState executeLocalTransaction(Message m, Object arg) {
                switch (new String(m.getBody(), StandardCharsets.UTF_8)) {
                    case "tx-commit": return LocalTransactionState.COMMIT_MESSAGE;
                    case "tx-rollback": return LocalTransactionState.ROLLBACK_MESSAGE;
                    default: return LocalTransactionState.UNKNOW;
                }
            }
            public LocalTransactionState checkLocalTransaction(MessageExt m) {
                checked.add(body(m));
                return LocalTransactionState.COMMIT_MESSAGE;
            }
        });
        p.start();
        JSONObject sent = new JSONObject();
        for (String b : new String[] {"tx-commit", "tx-rollback", "tx-unknown"}) {
            TransactionSendResult sr = p.sendMessageInTransaction(message("MatrixTx", b), null);
            sent.put(b, sr.getSendStatus() + "/" + sr.getLocalTransactionState());
        }
        List<MessageExt> got = new ArrayList<>();
        waitUntil(() -> { try { got.clear(); got.addAll(pullAll("MatrixTx", 2, 0)); return got.size() >= 2; }
                          catch (Exception e) { return false; } }, 20000);
        Thread.sleep(2500);                     // another check round: the rolled-back one stays out
        got.clear();
        got.addAll(pullAll("MatrixTx", 0, 0));
        p.shutdown();
        JSONObject consumed = new JSONObject();
        for (MessageExt m : got) {
            JSONObject o = new JSONObject();
            o.put("properties", properties(m));
            consumed.put(body(m), o);
        }
        JSONObject r = new JSONObject();
        r.put("sent", sent);
        r.put("checked", new ArrayList<>(new TreeSet<>(checked)));
        r.put("consumed", consumed);
        return r;
    }

}
