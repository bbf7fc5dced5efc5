import com.alibaba.fastjson.JSONArray;
import com.alibaba.fastjson.JSONObject;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * pymq's test helper for replication (issue 28): the official RocketMQ 4.9.7 Java producer and
 * push consumer, run against a name server, each printing one JSON line on stdout.
 *
 *   java HaClient produce NAMESRV TOPIC FROM COUNT
 *     sends bodies "m<i>" (key "k<i>") for i in [FROM, FROM + COUNT), one at a time, and prints
 *     {"statuses": {status: n}, "errors": n, "firstError": text, "ms": elapsed}
 *   java HaClient consume NAMESRV TOPIC GROUP COUNT WAIT_MS
 *     a push consumer of GROUP (clustering, "*", from the first offset) collects what it is
 *     handed until COUNT distinct bodies came (or WAIT_MS passed), waits a second more for
 *     stragglers, and prints {"distinct": n, "delivered": n, "bodies": [sorted indices], "ms": elapsed}
 */
public class HaClient {
    public static void main(String[] args) throws Exception {
        String mode = args[0], ns = args[1], topic = args[2];
        JSONObject out = mode.equals("produce")
            ? produce(ns, topic, Integer.parseInt(args[3]), Integer.parseInt(args[4]))
            : consume(ns, topic, args[3], Integer.parseInt(args[4]), Long.parseLong(args[5]));
        System.out.println(out.toJSONString());
        System.out.flush();
        System.exit(0);
    }

    static JSONObject produce(String ns, String topic, int from, int count) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer("ha_producer");
        p.setNamesrvAddr(ns);
        p.setInstanceName("ha-producer-" + ProcessHandle.current().pid());
        p.setVipChannelEnabled(false);
        p.setSendMsgTimeout(5000);
        p.start();
        long t0 = System.currentTimeMillis();
        Map<String, Integer> statuses = new TreeMap<>();
        int errors = 0;
        String firstError = null;
        for (int i = from; i < from + count; i++) {
            Message m = new Message(topic, ("m" + i).getBytes(StandardCharsets.UTF_8));
            m.setKeys("k" + i);
            try {
                SendResult r = p.send(m);
                statuses.merge(r.getSendStatus().toString(), 1, Integer::sum);
            } catch (Exception e) {
                errors++;
                if (firstError == null) firstError = e.toString();
            }
        }
        JSONObject o = new JSONObject();
        o.put("statuses", statuses);
        o.put("errors", errors);
        o.put("firstError", firstError);
        o.put("ms", System.currentTimeMillis() - t0);
        p.shutdown();
        return o;
    }

    static JSONObject consume(String ns, String topic, String group, int count, long waitMs) throws Exception {
        Set<Integer> seen = ConcurrentHashMap.newKeySet();
        AtomicLong delivered = new AtomicLong();
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(ns);
        c.setInstanceName("ha-consumer-" + ProcessHandle.current().pid());
        c.setVipChannelEnabled(false);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setPullBatchSize(64);
        c.setConsumeMessageBatchMaxSize(32);
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                String b = new String(m.getBody(), StandardCharsets.UTF_8);
                if (b.startsWith("m")) seen.add(Integer.parseInt(b.substring(1)));
                delivered.incrementAndGet();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        long t0 = System.currentTimeMillis();
        c.start();
        while (seen.size() < count && System.currentTimeMillis() - t0 < waitMs) Thread.sleep(50);
        long ms = System.currentTimeMillis() - t0;
        Thread.sleep(1000);
        c.shutdown();
        JSONArray bodies = new JSONArray();
        seen.stream().sorted().forEach(bodies::add);
        JSONObject o = new JSONObject();
        o.put("distinct", seen.size());
        o.put("delivered", delivered.get());
        o.put("bodies", bodies);
        o.put("ms", ms);
        return o;
    }
}
