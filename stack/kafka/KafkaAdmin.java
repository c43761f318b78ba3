// Partition and transaction tools for the local stack's multi-node Kafka
// (used by scripts/stack.sh kafka-leader, kafka-reassign, kafka-coordinator).
//
//   java -cp "<libs>/*:<classes>" KafkaAdmin <bootstrap> leader TOPIC PARTITION
//       prints the partition's leader, its replicas and its ISR
//   java ... KafkaAdmin <bootstrap> move-leader TOPIC PARTITION NODE
//       makes NODE the partition's leader: NODE first in the replica list
//       (replacing the last replica when it holds none), then a preferred
//       leader election; waits until NODE leads
//   java ... KafkaAdmin <bootstrap> reassign TOPIC PARTITION N1,N2,...
//       moves the partition's replicas to the nodes listed (the first is
//       the preferred leader); waits until the reassignment is done
//   java ... KafkaAdmin <bootstrap> coordinator TRANSACTIONAL_ID
//       prints the node that coordinates the transactional id, and the
//       transaction's state
//
// Exit 0 on success, 1 on failure (the reason on stderr), 2 on bad usage.
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;

public class KafkaAdmin {
    static final long TIMEOUT_S = 60;

    public static void main(String[] args) throws Exception {
        if (args.length < 3) {
            usage();
        }
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        // Generous: the stack's brokers share a busy machine with the whole
        // test suite, where a 5 s request timeout failed kafka-leader.
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "30000");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "60000");
        p.put(AdminClientConfig.CLIENT_ID_CONFIG, "walpost-stack-admin");
        int rc;
        try (Admin admin = Admin.create(p)) {
            switch (args[1]) {
                case "leader":
                    need(args, 4);
                    rc = leader(admin, new TopicPartition(args[2], Integer.parseInt(args[3])));
                    break;
                case "move-leader":
                    need(args, 5);
                    rc = moveLeader(admin, new TopicPartition(args[2], Integer.parseInt(args[3])), Integer.parseInt(args[4]));
                    break;
                case "reassign":
                    need(args, 5);
                    List<Integer> nodes = new ArrayList<>();
                    for (String s : args[4].split(",")) {
                        nodes.add(Integer.parseInt(s.trim()));
                    }
                    rc = reassign(admin, new TopicPartition(args[2], Integer.parseInt(args[3])), nodes);
                    break;
                case "coordinator":
                    need(args, 3);
                    rc = coordinator(admin, args[2]);
                    break;
                default:
                    usage();
                    return;
            }
        } catch (Exception e) {
            Throwable c = e.getCause() != null ? e.getCause() : e;
            System.err.println("kafka-admin: " + c);
            rc = 1;
        }
        System.exit(rc);
    }

    static void usage() {
        System.err.println("usage: KafkaAdmin <bootstrap> leader TOPIC PARTITION | move-leader TOPIC PARTITION NODE | reassign TOPIC PARTITION N1,N2,... | coordinator TRANSACTIONAL_ID");
        System.exit(2);
    }

    static void need(String[] args, int n) {
        if (args.length != n) {
            usage();
        }
    }

    static TopicPartitionInfo describe(Admin admin, TopicPartition tp) throws Exception {
        Map<String, TopicDescription> d = admin.describeTopics(Set.of(tp.topic())).allTopicNames().get(TIMEOUT_S, TimeUnit.SECONDS);
        for (TopicPartitionInfo i : d.get(tp.topic()).partitions()) {
            if (i.partition() == tp.partition()) {
                return i;
            }
        }
        throw new IllegalArgumentException("no partition " + tp);
    }

    static String ids(List<Node> nodes) {
        return nodes.stream().map(n -> String.valueOf(n.id())).collect(Collectors.joining(","));
    }

    static int leader(Admin admin, TopicPartition tp) throws Exception {
        TopicPartitionInfo i = describe(admin, tp);
        System.out.println((i.leader() == null ? -1 : i.leader().id()) + " replicas=" + ids(i.replicas()) + " isr=" + ids(i.isr()));
        return 0;
    }

    static int reassign(Admin admin, TopicPartition tp, List<Integer> nodes) throws Exception {
        admin.alterPartitionReassignments(Map.of(tp, Optional.of(new NewPartitionReassignment(nodes)))).all().get(TIMEOUT_S, TimeUnit.SECONDS);
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(TIMEOUT_S);
        while (System.nanoTime() < deadline) {
            boolean ongoing = admin.listPartitionReassignments(Set.of(tp)).reassignments().get(TIMEOUT_S, TimeUnit.SECONDS).containsKey(tp);
            TopicPartitionInfo i = describe(admin, tp);
            List<Integer> now = i.replicas().stream().map(Node::id).collect(Collectors.toList());
            if (!ongoing && now.equals(nodes)) {
                System.err.println("kafka-admin: " + tp + " replicas " + ids(i.replicas()) + ", isr " + ids(i.isr()));
                return 0;
            }
            Thread.sleep(200);
        }
        System.err.println("kafka-admin: the reassignment of " + tp + " to " + nodes + " did not finish within " + TIMEOUT_S + " s");
        return 1;
    }

    static int moveLeader(Admin admin, TopicPartition tp, int node) throws Exception {
        TopicPartitionInfo i = describe(admin, tp);
        if (i.leader() != null && i.leader().id() == node) {
            System.err.println("kafka-admin: node " + node + " already leads " + tp);
            return 0;
        }
        List<Integer> replicas = i.replicas().stream().map(Node::id).collect(Collectors.toList());
        if (!replicas.remove(Integer.valueOf(node))) {
            replicas.remove(replicas.size() - 1);
        }
        replicas.add(0, node);
        if (reassign(admin, tp, replicas) != 0) {
            return 1;
        }
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(TIMEOUT_S);
        while (System.nanoTime() < deadline) {
            try {
                admin.electLeaders(ElectionType.PREFERRED, Set.of(tp)).all().get(TIMEOUT_S, TimeUnit.SECONDS);
            } catch (Exception e) {
                // ELECTION_NOT_NEEDED once it leads; anything else is retried.
            }
            i = describe(admin, tp);
            if (i.leader() != null && i.leader().id() == node) {
                System.err.println("kafka-admin: node " + node + " leads " + tp);
                return 0;
            }
            Thread.sleep(200);
        }
        System.err.println("kafka-admin: node " + node + " did not become the leader of " + tp + " within " + TIMEOUT_S + " s (is it in the ISR?)");
        return 1;
    }

    static int coordinator(Admin admin, String txnID) throws Exception {
        TransactionDescription d = admin.describeTransactions(Set.of(txnID)).description(txnID).get(TIMEOUT_S, TimeUnit.SECONDS);
        System.out.println(d.coordinatorId() + " state=" + d.state() + " producer_id=" + d.producerId() + " epoch=" + d.producerEpoch());
        return 0;
    }
}
