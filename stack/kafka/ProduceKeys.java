// Produces keyed records with the Java client's default partitioner: each
// line of stdin (UTF-8, without its line end) is one record's key, the
// value empty. Waits for every acknowledgement; exits 1 when a record
// failed. The integration tests run it with the source launcher:
//   java -cp '.stack/kafka/libs/*' stack/kafka/ProduceKeys.java BROKERS TOPIC
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.Future;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.StringSerializer;

public class ProduceKeys {
    public static void main(String[] args) throws Exception {
        if (args.length != 2) {
            System.err.println("usage: ProduceKeys BROKERS TOPIC < keys");
            System.exit(2);
        }
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        // No partitioner.class: the default partitioner, murmur2 for a keyed record.
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p);
             BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
            String key;
            while ((key = in.readLine()) != null) {
                sent.add(producer.send(new ProducerRecord<>(args[1], key, "")));
            }
            producer.flush();
            for (Future<RecordMetadata> f : sent) {
                f.get();
            }
        }
        System.err.println("java producer: " + sent.size() + " records");
    }
}
