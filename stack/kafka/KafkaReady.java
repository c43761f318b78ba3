// Readiness probe for the local stack broker (used by scripts/stack.sh).
//
//   java -cp "<libs>/*:<classes>" KafkaReady <bootstrap> <timeout-seconds> [<node-id>]
//
// Polls DescribeCluster until the broker answers with at least one node
// (a KRaft broker only lists unfenced brokers, so this means it has caught up
// with the metadata log and serves requests), then lists topics once more.
// With a node id (a node of a multi-node cluster), that node must be among
// them: another node may answer for the cluster before it is ready.
// Exit 0 when ready, 1 on timeout (last error on stderr).
import java.time.Duration;
import java.util.Collection;
import java.util.Properties;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.common.Node;

public class KafkaReady {
    public static void main(String[] args) throws Exception {
        if (args.length != 2 && args.length != 3) {
            System.err.println("usage: KafkaReady <bootstrap> <timeout-seconds> [<node-id>]");
            System.exit(2);
        }
        int want = args.length == 3 ? Integer.parseInt(args[2]) : -1;
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(Long.parseLong(args[1]));
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "3000");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "4000");
        p.put(AdminClientConfig.RECONNECT_BACKOFF_MS_CONFIG, "100");
        p.put(AdminClientConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, "500");
        p.put(AdminClientConfig.CLIENT_ID_CONFIG, "walpost-stack-ready");
        Throwable last = null;
        boolean ready = false;
        Admin admin = Admin.create(p);
        try {
            while (System.nanoTime() < deadline) {
                try {
                    DescribeClusterResult r = admin.describeCluster();
                    Collection<Node> nodes = r.nodes().get(5, TimeUnit.SECONDS);
                    String clusterId = r.clusterId().get(5, TimeUnit.SECONDS);
                    if (!nodes.isEmpty() && (want < 0 || nodes.stream().anyMatch(n -> n.id() == want))) {
                        admin.listTopics().names().get(5, TimeUnit.SECONDS);
                        System.out.println("kafka ready: cluster " + clusterId + ", nodes " + nodes);
                        ready = true;
                        break;
                    }
                    last = new IllegalStateException("no unfenced broker yet");
                } catch (Exception e) {
                    last = e.getCause() != null ? e.getCause() : e;
                }
                Thread.sleep(250);
            }
        } finally {
            admin.close(Duration.ofSeconds(2));
        }
        if (!ready) {
            System.err.println("kafka not ready: " + last);
        }
        System.exit(ready ? 0 : 1);
    }
}
