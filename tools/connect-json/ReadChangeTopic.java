/*
 * A change topic read the way a Kafka Connect sink reads it: a KafkaConsumer with isolation.level=read_committed,
 * the key and the value each through Kafka Connect's own JsonConverter with schemas.enable=true.
 *
 *     java -cp "$(python tools/connect_json.py)" tools/connect-json/ReadChangeTopic.java BOOTSTRAP TOPIC [END]
 *     java -cp ... tools/connect-json/ReadChangeTopic.java --records FILE TOPIC
 *
 * Prints one JSON line per Kafka record, from offset 0 to END (default: the last stable offset): its offset,
 * the key and the value as Connect data (a Struct as {"schema": name, "fields": {...}}, every other value as
 * its schema type, logical name and Java value; a tombstone's value is null). A record JsonConverter refuses
 * ends the program with its error: status 1. With --records the records come from FILE instead, one JSON
 * object per line ({"offset": n, "key": base64 or null, "value": base64 or null}) as another client read
 * them: Kafka's Java client (4.4) read nothing from Tansu here (its offset look-up timed out, its
 * read_committed fetches returned no record), so on Tansu the test reads the topic with confluent-kafka and
 * hands the bytes to JsonConverter.
 * Used by tests/e2e/test_change_topic_connect.py (docs/change-topic.md).
 */

import java.math.BigDecimal;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.connect.data.Date;
import org.apache.kafka.connect.data.Field;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.data.SchemaAndValue;
import org.apache.kafka.connect.data.Struct;
import org.apache.kafka.connect.json.JsonConverter;

public class ReadChangeTopic {
    public static void main(String[] args) {
        try {
            if (args[0].equals("--records")) {
                convert(readRecords(args[1]), args[2]);
            } else {
                convert(consume(args[0], args[1], args.length > 2 ? Long.parseLong(args[2]) : -1), args[1]);
            }
        } catch (Exception e) { // printed here: the source launcher's own report of it can fail on its stack
            e.printStackTrace();
            System.exit(1);
        }
    }

    /** One Kafka record's offset, key and value bytes. */
    private record Raw(long offset, byte[] key, byte[] value) {}

    /** The topic from offset 0 to {@code until} (-1: the last stable offset), read_committed, as a sink reads it. */
    private static List<Raw> consume(String bootstrap, String topic, long until) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("isolation.level", "read_committed");
        props.put("enable.auto.commit", "false");
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        List<Raw> records = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            TopicPartition partition = new TopicPartition(topic, 0);
            consumer.assign(List.of(partition));
            consumer.seek(partition, 0);
            long end = until >= 0 ? until : consumer.endOffsets(List.of(partition)).get(partition);
            while (consumer.position(partition) < end) {
                for (ConsumerRecord<byte[], byte[]> record : consumer.poll(Duration.ofSeconds(1))) {
                    if (record.offset() < end) { // a poll may bring what was written after the end was taken
                        records.add(new Raw(record.offset(), record.key(), record.value()));
                    }
                }
            }
        }
        return records;
    }

    /** The records of a file of JSON lines {"offset", "key", "value"} (bytes in base64, null for none). */
    private static List<Raw> readRecords(String file) throws Exception {
        ObjectMapper json = new ObjectMapper();
        List<Raw> records = new ArrayList<>();
        for (String line : Files.readAllLines(Path.of(file))) {
            if (line.isBlank()) {
                continue;
            }
            JsonNode node = json.readTree(line);
            records.add(new Raw(node.get("offset").asLong(), bytes(node.get("key")), bytes(node.get("value"))));
        }
        return records;
    }

    private static byte[] bytes(JsonNode node) {
        return node == null || node.isNull() ? null : Base64.getDecoder().decode(node.asText());
    }

    /** Every record's key and value through JsonConverter (schemas.enable=true), printed as JSON lines. */
    private static void convert(List<Raw> records, String topic) throws Exception {
        JsonConverter keys = new JsonConverter();
        keys.configure(Map.of("schemas.enable", "true"), true);
        JsonConverter values = new JsonConverter();
        values.configure(Map.of("schemas.enable", "true"), false);
        ObjectMapper json = new ObjectMapper();
        for (Raw record : records) {
            SchemaAndValue key = keys.toConnectData(topic, record.key());
            SchemaAndValue value = values.toConnectData(topic, record.value());
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("offset", record.offset());
            out.put("key", describe(key.schema(), key.value()));
            out.put("value", value.value() == null ? null : describe(value.schema(), value.value()));
            System.out.println(json.writeValueAsString(out));
        }
    }

    /** A Connect value as JSON: a Struct field by field, anything else with its schema's type and logical name. */
    private static Object describe(Schema schema, Object value) {
        if (value instanceof Struct struct) {
            Map<String, Object> fields = new LinkedHashMap<>();
            for (Field field : struct.schema().fields()) {
                fields.put(field.name(), describe(field.schema(), struct.get(field)));
            }
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("schema", struct.schema().name());
            out.put("fields", fields);
            return out;
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("type", schema == null ? null : schema.type().getName());
        out.put("name", schema == null ? null : schema.name());
        out.put("optional", schema == null ? null : schema.isOptional());
        out.put("java", value == null ? null : value.getClass().getSimpleName());
        out.put("value", plain(schema, value));
        return out;
    }

    /** A primitive Connect value as JSON text or number (dates as days since the epoch, decimals exact). */
    private static Object plain(Schema schema, Object value) {
        if (value == null) {
            return null;
        }
        if (value instanceof java.util.Date date && schema != null && Date.LOGICAL_NAME.equals(schema.name())) {
            return Date.fromLogical(schema, date);
        }
        if (value instanceof BigDecimal decimal) {
            return decimal.toPlainString();
        }
        if (value instanceof byte[] bytes) {
            return Base64.getEncoder().encodeToString(bytes);
        }
        if (value instanceof Double number && (number.isNaN() || number.isInfinite())) {
            return number.toString();
        }
        if (value instanceof List<?> list) {
            return new ArrayList<>(list);
        }
        return value;
    }
}
