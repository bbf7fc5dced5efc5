import com.alibaba.fastjson.JSONObject;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.UUID;
import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.protocol.ResponseCode;
import org.apache.rocketmq.remoting.RPCHook;

/**
 * pymq's test helper: a long-lived probe made of the official RocketMQ 4.9.7 Java client. It
 * times rounds of "send one message, read it back" against a name server, for the tests that
 * show a broker keeps serving while it is under attack.
 *
 *   java LatencyProbe NAMESRV TOPIC GROUP [ACCESS_KEY SECRET_KEY]
 *
 * With keys, the producer and the consumer sign every request (AclClientRPCHook). At start it
 * asks the name server for the topic's route (the client's own call; "topic not exist" is
 * fine, the first send creates it), runs one warm-up round and prints
 * {"ready": true, "warmup_ms": ..} or {"ready": false, "error": .., "code": ..} (then exits).
 * Then every stdin line "SEQ BODY" is one round: the producer sends BODY, the pull consumer
 * pulls the queue the send named from the offset it returned (skipping other messages) until
 * BODY comes back, and one line is printed:
 * {"seq", "send_ms", "receive_ms", "total_ms", "status", "body", "queueId", "queueOffset", "msgId",
 * "sentMsgId"} (msgId: the id of the message read back, sentMsgId: the one the send returned) or
 * {"seq", "error", "code"} (code: the broker's response code when the client had one). A
 * round gives up after ROUND_MS. End of stdin shuts both clients down and exits.
 * Only these JSON lines go to stdout; the client logs to rocketmq.client.logRoot.
 */
public class LatencyProbe {
    static final long ROUND_MS = 10_000;
    static DefaultMQProducer producer;
    static DefaultMQPullConsumer consumer;
    static String topic;

    public static void main(String[] args) throws Exception {
        String namesrv = args[0];
        topic = args[1];
        String group = args[2];
        RPCHook hook = args.length >= 5 ? new AclClientRPCHook(new SessionCredentials(args[3], args[4])) : null;
        String instance = "latency-probe-" + ProcessHandle.current().pid();
        producer = new DefaultMQProducer(group, hook);
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName(instance);
        producer.setVipChannelEnabled(false);          // pymq's broker has no VIP port (port - 2)
        producer.setSendMsgTimeout(5000);               // bounds the send, retries included
        consumer = new DefaultMQPullConsumer(group, hook);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName(instance);
        consumer.setVipChannelEnabled(false);
        consumer.setBrokerSuspendMaxTimeMillis(2000);   // a pull of an offset not there yet waits
        consumer.setConsumerTimeoutMillisWhenSuspend(4000);
        JSONObject ready = new JSONObject();
        try {
            producer.start();
            consumer.start();
            checkRoute();
            long t0 = System.nanoTime();
            round("warmup-" + UUID.randomUUID());
            ready.put("ready", true);
            ready.put("warmup_ms", (System.nanoTime() - t0) / 1e6);
        } catch (Throwable e) {
            ready.put("ready", false);
            describe(e, ready);
        }
        emit(ready);
        if (ready.getBooleanValue("ready")) serve();
        consumer.shutdown();
        producer.shutdown();
        System.exit(0);
    }

    /** One round per stdin line "SEQ BODY" until end of input. */
    static void serve() throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            line = line.trim();
            if (line.isEmpty()) continue;
            int space = line.indexOf(' ');
            JSONObject out = new JSONObject();
            out.put("seq", Long.parseLong(space < 0 ? line : line.substring(0, space)));
            String body = space < 0 ? "probe-" + UUID.randomUUID() : line.substring(space + 1);
            try {
                out.putAll(round(body));
            } catch (Throwable e) {
                describe(e, out);
            }
            emit(out);
        }
    }

    /** The name server's route for the topic, as the client asks it before a first send:
     *  surfaces a refusal (a wrong key) that the send path would only log. */
    static void checkRoute() throws Exception {
        try {
            producer.getDefaultMQProducerImpl().getmQClientFactory().getMQClientAPIImpl()
                .getTopicRouteInfoFromNameServer(topic, 3000);
        } catch (MQClientException e) {
            if (e.getResponseCode() != ResponseCode.TOPIC_NOT_EXIST) throw e;
        }
    }

    /** Send `body`, pull it back; the round's timings. */
    static JSONObject round(String body) throws Exception {
        byte[] bytes = body.getBytes(StandardCharsets.UTF_8);
        long deadline = System.nanoTime() + ROUND_MS * 1_000_000;
        long t0 = System.nanoTime();
        SendResult sent = producer.send(new Message(topic, bytes), 5000);
        long t1 = System.nanoTime();
        MessageQueue mq = sent.getMessageQueue();
        long offset = sent.getQueueOffset();
        MessageExt found = null;
        while (found == null) {
            if (System.nanoTime() > deadline)
                throw new IllegalStateException("no message " + body + " at " + mq + " from offset "
                                                + sent.getQueueOffset() + " within " + ROUND_MS + " ms");
            PullResult pr = consumer.pullBlockIfNotFound(mq, "*", offset, 8);
            switch (pr.getPullStatus()) {
                case FOUND:
                    for (MessageExt m : pr.getMsgFoundList())
                        if (Arrays.equals(m.getBody(), bytes)) found = m;    // others are skipped
                    offset = Math.max(offset, pr.getNextBeginOffset());
                    break;
                case NO_NEW_MSG:
                    break;
                default:                                 // NO_MATCHED_MSG, OFFSET_ILLEGAL
                    if (pr.getNextBeginOffset() > offset) offset = pr.getNextBeginOffset();
                    else Thread.sleep(10);
            }
        }
        long t2 = System.nanoTime();
        JSONObject r = new JSONObject();
        r.put("send_ms", (t1 - t0) / 1e6);
        r.put("receive_ms", (t2 - t1) / 1e6);
        r.put("total_ms", (t2 - t0) / 1e6);
        r.put("status", sent.getSendStatus().toString());
        r.put("body", new String(found.getBody(), StandardCharsets.UTF_8));
        r.put("queueId", found.getQueueId());
        r.put("queueOffset", found.getQueueOffset());
        r.put("msgId", found.getMsgId());
        r.put("sentMsgId", sent.getMsgId());
        return r;
    }

    /** "error": the exception and its causes; "code": the first response code among them. */
    static void describe(Throwable e, JSONObject out) {
        StringBuilder text = new StringBuilder();
        Integer code = null;
        for (Throwable t = e; t != null; t = t.getCause() == t ? null : t.getCause()) {
            if (text.length() > 0) text.append(" <- caused by: ");
            text.append(t.toString().split("\nFor more information")[0].trim());
            if (code == null && t instanceof MQClientException && ((MQClientException) t).getResponseCode() > 0)
                code = ((MQClientException) t).getResponseCode();
            if (code == null && t instanceof MQBrokerException)
                code = ((MQBrokerException) t).getResponseCode();
        }
        out.put("error", text.toString());
        out.put("code", code);
    }

    static synchronized void emit(JSONObject o) {
        System.out.println(o.toJSONString());
        System.out.flush();
    }
}
