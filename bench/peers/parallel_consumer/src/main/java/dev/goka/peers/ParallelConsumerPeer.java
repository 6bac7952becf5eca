package dev.goka.peers;

import io.confluent.parallelconsumer.ParallelConsumerOptions;
import io.confluent.parallelconsumer.ParallelConsumerOptions.CommitMode;
import io.confluent.parallelconsumer.ParallelConsumerOptions.ProcessingOrder;
import io.confluent.parallelconsumer.ParallelStreamProcessor;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * bench.concurrency's peer: for every record of {@code input}, GET {@code url}?key=K (a
 * blocking call from one of parallel-consumer's worker threads), count the key in memory and
 * produce the count to {@code output}; KEY ordering, {@code concurrency} records in flight,
 * offsets committed by the consumer (at least once) or in the producer's transactions
 * ({@code guarantee=exactly_once}).
 *
 * <p>Arguments are {@code name=value}: bootstrap, input, output, group, url, concurrency,
 * expect, guarantee, timeout_s. It prints one line, {@code first=<ms> last=<ms> read=<n>
 * produced=<n> closed=<ms>} (epoch milliseconds: the first record read, the produce of the
 * {@code expect}-th output acknowledged, the processor closed), and exits 0; 2 if fewer than
 * {@code expect} outputs came within the timeout.
 */
public final class ParallelConsumerPeer {
  private ParallelConsumerPeer() {}

  public static void main(String[] args) throws Exception {
    Map<String, String> a = new HashMap<>();
    for (String arg : args) {
      String[] pair = arg.split("=", 2);
      a.put(pair[0], pair[1]);
    }
    String input = a.get("input");
    String output = a.get("output");
    long expect = Long.parseLong(a.get("expect"));
    boolean transactional = "exactly_once".equals(a.getOrDefault("guarantee", "at_least_once"));

    Properties consumed = new Properties();
    consumed.put("bootstrap.servers", a.get("bootstrap"));
    consumed.put("group.id", a.get("group"));
    consumed.put("enable.auto.commit", "false");
    consumed.put("auto.offset.reset", "earliest");
    consumed.put("isolation.level", "read_committed");
    Properties produced = new Properties();
    produced.put("bootstrap.servers", a.get("bootstrap"));
    produced.put("linger.ms", "0"); // each worker waits for its output's acknowledgement
    if (transactional) {
      produced.put("transactional.id", a.get("group") + "-pc");
    }
    KafkaConsumer<byte[], byte[]> consumer =
        new KafkaConsumer<>(consumed, new ByteArrayDeserializer(), new ByteArrayDeserializer());
    KafkaProducer<byte[], byte[]> producer =
        new KafkaProducer<>(produced, new ByteArraySerializer(), new ByteArraySerializer());
    ParallelConsumerOptions<byte[], byte[]> options =
        ParallelConsumerOptions.<byte[], byte[]>builder()
            .ordering(ProcessingOrder.KEY)
            .maxConcurrency(Integer.parseInt(a.get("concurrency")))
            .commitMode(
                transactional
                    ? CommitMode.PERIODIC_TRANSACTIONAL_PRODUCER
                    : CommitMode.PERIODIC_CONSUMER_ASYNCHRONOUS)
            .consumer(consumer)
            .producer(producer)
            .build();
    ParallelStreamProcessor<byte[], byte[]> processor =
        ParallelStreamProcessor.createEosStreamProcessor(options);
    processor.subscribe(List.of(input));

    HttpClient http =
        HttpClient.newBuilder()
            .version(HttpClient.Version.HTTP_1_1)
            .connectTimeout(Duration.ofSeconds(10))
            .build();
    String url = a.get("url");
    ConcurrentHashMap<String, Long> counts = new ConcurrentHashMap<>();
    AtomicLong first = new AtomicLong();
    AtomicLong read = new AtomicLong();
    AtomicLong outputs = new AtomicLong();
    AtomicLong last = new AtomicLong();
    CountDownLatch done = new CountDownLatch(1);
    processor.pollAndProduce(
        context -> {
          ConsumerRecord<byte[], byte[]> record = context.getSingleConsumerRecord();
          first.compareAndSet(0, System.currentTimeMillis());
          read.incrementAndGet();
          String key = new String(record.key(), StandardCharsets.UTF_8);
          HttpRequest request =
              HttpRequest.newBuilder(
                      URI.create(url + "?key=" + URLEncoder.encode(key, StandardCharsets.UTF_8)))
                  .build();
          try {
            HttpResponse<String> answer = http.send(request, HttpResponse.BodyHandlers.ofString());
            if (answer.statusCode() != 200) {
              throw new IllegalStateException("the service answered " + answer.statusCode());
            }
          } catch (java.io.IOException | InterruptedException failed) {
            throw new IllegalStateException(failed);
          }
          long count = counts.merge(key, 1L, Long::sum);
          return new ProducerRecord<>(
              output, record.key(), Long.toString(count).getBytes(StandardCharsets.UTF_8));
        },
        result -> {
          if (outputs.incrementAndGet() == expect) {
            last.set(System.currentTimeMillis());
            done.countDown();
          }
        });
    boolean all = done.await(Long.parseLong(a.getOrDefault("timeout_s", "600")), TimeUnit.SECONDS);
    processor.closeDrainFirst();
    long closed = System.currentTimeMillis();
    System.out.println(
        "first=" + first.get() + " last=" + last.get() + " read=" + read.get()
            + " produced=" + outputs.get() + " closed=" + closed);
    System.out.flush();
    System.exit(all ? 0 : 2);
  }
}
