import static org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
import static org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus.RECONSUME_LATER;

import com.alibaba.fastjson.JSONArray;
import com.alibaba.fastjson.JSONObject;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.consumer.store.RemoteBrokerOffsetStore;
import org.apache.rocketmq.common.admin.ConsumeStats;
import org.apache.rocketmq.common.admin.OffsetWrapper;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * The consuming side of {@link FeatureMatrix}: push consumers (clustering, retry to the
 * dead-letter queue, orderly), the lite pull consumer and the pull consumer with offsets.
 * Each feature returns what it saw, as FeatureMatrix prints it.
 */
class ConsumerFeatures extends FeatureMatrix {
    static DefaultMQPushConsumer pushConsumer(String group, String instance, String topic) throws Exception {
        DefaultMQPushConsumer c = client(new DefaultMQPushConsumer(group), instance);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, "*");
        return c;
    }

    static int assigned(DefaultMQPushConsumer c, String topic) {
        int n = 0;
        for (MessageQueue mq : c.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable().keySet())
            if (mq.getTopic().equals(topic)) n++;
        return n;
    }

    /** The broker's view of a group: consumed offsets summed over the topic's queues, and the lag. */
    static JSONObject progress(String group, String topic) throws Exception {
        ConsumeStats cs = admin.examineConsumeStats(group);
        long consumed = 0, diff = 0;
        for (Map.Entry<MessageQueue, OffsetWrapper> e : cs.getOffsetTable().entrySet()) {
            if (!e.getKey().getTopic().equals(topic)) continue;
            consumed += e.getValue().getConsumerOffset();
            diff += e.getValue().getBrokerOffset() - e.getValue().getConsumerOffset();
        }
        JSONObject o = new JSONObject();
        o.put("consumed_offsets", consumed);
        o.put("diff", diff);
        return o;
    }

    /** Two push consumers of one group share the topic's queues; every message once. */
    static JSONObject push_clustering() throws Exception {
        createTopic("MatrixPush", 4);
        Map<String, List<String>> seen = new ConcurrentHashMap<>();
        List<DefaultMQPushConsumer> cs = new ArrayList<>();
        for (String name : new String[] {"push-1", "push-2"}) {
            DefaultMQPushConsumer c = pushConsumer("matrix_push", name, "MatrixPush");
            List<String> mine = new CopyOnWriteArrayList<>();
            seen.put(name, mine);
            c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                for (MessageExt m : msgs) mine.add(body(m));
                return CONSUME_SUCCESS;
            });
            c.start();
            cs.add(c);
        }
        boolean balanced = waitUntil(() -> assigned(cs.get(0), "MatrixPush") == 2 && assigned(cs.get(1), "MatrixPush") == 2, 15000);
        for (int i = 0; i < 20; i++) producer.send(message("MatrixPush", "push-" + i));
        waitUntil(() -> seen.get("push-1").size() + seen.get("push-2").size() >= 20, 10000);
        Thread.sleep(500);                                          // duplicates would show by now
        List<String> all = new ArrayList<>(seen.get("push-1"));
        all.addAll(seen.get("push-2"));
        for (DefaultMQPushConsumer c : cs) c.shutdown();            // commits the offsets
        List<Integer> per = Arrays.asList(seen.get("push-1").size(), seen.get("push-2").size());
        Collections.sort(per);
        JSONObject r = new JSONObject();
        r.put("balanced_two_queues_each", balanced);
        r.put("consumed", all.size());
        r.put("distinct", new TreeSet<>(all).size());
        r.put("per_consumer", per);
        r.put("progress", progress("matrix_push", "MatrixPush"));
        return r;
    }

    /** A listener that always asks for later: redelivered maxReconsumeTimes times, then the
     *  message goes to %DLQ%group. */
    static JSONObject retry_dlq() throws Exception {
        createTopic("MatrixRetry", 1);
        List<JSONObject> deliveries = new CopyOnWriteArrayList<>();
        DefaultMQPushConsumer c = pushConsumer("matrix_retry", "retry-1", "MatrixRetry");
        c.setMaxReconsumeTimes(2);
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                JSONObject o = new JSONObject();
                o.put("topic", m.getTopic());
                o.put("body", body(m));
                o.put("reconsumeTimes", m.getReconsumeTimes());
                o.put("properties", properties(m));
                deliveries.add(o);
            }
            return RECONSUME_LATER;
        });
        c.start();
        waitUntil(() -> assigned(c, "MatrixRetry") == 1, 15000);
        producer.send(message("MatrixRetry", "retry-me"));
        waitUntil(() -> deliveries.size() >= 3, 20000);
        List<MessageExt> dlq = new ArrayList<>();
        waitUntil(() -> { try { dlq.addAll(pullAll("%DLQ%matrix_retry", 1, 0)); return !dlq.isEmpty(); }
                          catch (Exception e) { return false; } }, 10000);
        Thread.sleep(1500);                                         // a fourth delivery would show by now
        c.shutdown();
        JSONObject r = new JSONObject();
        r.put("deliveries", new ArrayList<>(deliveries));
        JSONArray d = new JSONArray();
        for (MessageExt m : dlq) {
            JSONObject o = new JSONObject();
            o.put("topic", m.getTopic());
            o.put("body", body(m));
            o.put("reconsumeTimes", m.getReconsumeTimes());
            o.put("properties", properties(m));
            d.add(o);
        }
        r.put("dlq", d);
        return r;
    }

    /** Three orders of six steps, each order on its own queue: MessageListenerOrderly sees
     *  each order's steps in order. */
    static JSONObject orderly() throws Exception {
        createTopic("MatrixOrder", 4);
        for (int step = 0; step < 6; step++)
            for (int order = 0; order < 3; order++) {
                Message m = message("MatrixOrder", order + ":" + step);
                producer.send(m, (mqs, msg, arg) -> mqs.get((Integer) arg % mqs.size()), order);
            }
        Map<String, List<Integer>> steps = new ConcurrentHashMap<>();
        Map<String, TreeSet<Integer>> qids = new ConcurrentHashMap<>();
        AtomicInteger n = new AtomicInteger();
        DefaultMQPushConsumer c = pushConsumer("matrix_orderly", "orderly-1", "MatrixOrder");
        c.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                String[] p = body(m).split(":");
                steps.computeIfAbsent(p[0], k -> new CopyOnWriteArrayList<>()).add(Integer.parseInt(p[1]));
                qids.computeIfAbsent(p[0], k -> new TreeSet<>()).add(m.getQueueId());
                n.incrementAndGet();
            }
            return ConsumeOrderlyStatus.SUCCESS;
        });
        c.start();
        waitUntil(() -> n.get() >= 18, 15000);
        Thread.sleep(300);
        c.shutdown();
        JSONObject r = new JSONObject();
        r.put("steps", new TreeMap<>(steps));
        r.put("queues", new TreeMap<>(qids));
        r.put("progress", progress("matrix_orderly", "MatrixOrder"));
        return r;
    }

    static JSONObject lite_pull() throws Exception {
        createTopic("MatrixLite", 4);
        for (int i = 0; i < 12; i++) producer.send(message("MatrixLite", "lite-" + i));
        DefaultLitePullConsumer c = client(new DefaultLitePullConsumer("matrix_lite"), "lite-1");
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setAutoCommit(false);
        c.subscribe("MatrixLite", "*");
        c.start();
        List<MessageExt> got = new ArrayList<>();
        long deadline = System.currentTimeMillis() + 15000;
        while (got.size() < 12 && System.currentTimeMillis() < deadline) got.addAll(c.poll(500));
        c.commitSync();
        JSONObject r = new JSONObject();
        r.put("assigned", c.assignment().size());
        got.sort(Comparator.comparingInt(MessageExt::getQueueId).thenComparingLong(MessageExt::getQueueOffset));
        r.put("bodies", bodies(got, true));
        r.put("offsets_consecutive", consecutive(got));
        c.shutdown();                           // persists the committed offsets
        r.put("progress", progress("matrix_lite", "MatrixLite"));
        return r;
    }

    /** DefaultMQPullConsumer: pulls from given offsets, the offset statuses, a long-polling
     *  pull woken by a send, and the consumer offset stored on the broker. */
    static JSONObject pull_offsets() throws Exception {
        createTopic("MatrixPull", 2);
        for (int i = 0; i < 10; i++)
            producer.send(message("MatrixPull", "pull-" + i), (mqs, msg, arg) -> mqs.get(0), null);
        DefaultMQPullConsumer c = client(new DefaultMQPullConsumer("matrix_pull"), "pull-1");
        c.start();
        MessageQueue mq = queues("MatrixPull").get(0);
        JSONObject r = new JSONObject();
        r.put("queues", c.fetchSubscribeMessageQueues("MatrixPull").size());
        r.put("fresh_group_offset", c.fetchConsumeOffset(mq, true));
        r.put("min", c.minOffset(mq));
        r.put("max", c.maxOffset(mq));
        JSONArray pulls = new JSONArray();
        for (long[] a : new long[][] {{0, 4}, {4, 32}, {10, 32}, {15, 32}}) {
            PullResult pr = c.pull(mq, "*", a[0], (int) a[1]);
            JSONObject o = new JSONObject();
            o.put("from", a[0]);
            o.put("status", pr.getPullStatus().toString());
            o.put("next", pr.getNextBeginOffset());
            o.put("bodies", pr.getMsgFoundList() == null ? new ArrayList<>() : bodies(pr.getMsgFoundList(), false));
            pulls.add(o);
        }
        r.put("pulls", pulls);
        Thread later = new Thread(() -> {
            try { Thread.sleep(700); producer.send(message("MatrixPull", "woken"), (mqs, msg, arg) -> mqs.get(0), null); }
            catch (Exception e) { throw new RuntimeException(e); }
        });
        later.start();
        PullResult held = c.pullBlockIfNotFound(mq, "*", 10, 32);
        later.join();
        r.put("long_poll", held.getPullStatus() + ":" + (held.getMsgFoundList() == null ? "" : bodies(held.getMsgFoundList(), false)));
        c.updateConsumeOffset(mq, 7);
        ((RemoteBrokerOffsetStore) c.getDefaultMQPullConsumerImpl().getOffsetStore()).updateConsumeOffsetToBroker(mq, 7, false);
        r.put("stored_offset", c.fetchConsumeOffset(mq, true));
        c.shutdown();
        DefaultMQPullConsumer again = client(new DefaultMQPullConsumer("matrix_pull"), "pull-2");
        again.start();
        r.put("offset_seen_by_another_instance", again.fetchConsumeOffset(mq, true));
        again.shutdown();
        return r;
    }
}
