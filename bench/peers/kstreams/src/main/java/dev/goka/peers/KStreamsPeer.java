package dev.goka.peers;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KGroupedStream;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.WindowStore;

/**
 * The groups goka-py is measured and checked against, in Kafka Streams' DSL.
 *
 * <p>Input: a topic of String keys (the value is not read). Topologies: {@code count} (a count
 * per key in a state store with its changelog, as goka-py's count group keeps its table),
 * {@code tumbling} and {@code hopping} (windowed counts with grace, their final results through
 * {@code suppress(untilWindowCloses)} to the output topic: key = the record key, value = the
 * count (a long), headers {@code window-start} and {@code window-end} in decimal milliseconds).
 *
 * <p>Runs until it has read {@code expect} records, then closes (which flushes the caches and
 * commits) and prints one line of {@code name=value} figures: when it started, first and last
 * read a record, and finished closing (epoch milliseconds), the records read, the records its
 * windows dropped as late (its own metric), and its peak resident memory.
 *
 * <pre>java -cp ... dev.goka.peers.KStreamsPeer name=value...</pre>
 * Names: bootstrap, input, output, app, state, topology (count|tumbling|hopping), guarantee
 * (at_least_once|exactly_once_v2), expect, threads (2), size_ms (60000), advance_ms (size_ms),
 * grace_ms (5000), cache_bytes (Kafka Streams' default where not given), timeout_s (900).
 */
public final class KStreamsPeer {
    private KStreamsPeer() {}

    public static void main(String[] args) throws Exception {
        Map<String, String> opts = new HashMap<>();
        for (String arg : args) {
            int eq = arg.indexOf('=');
            if (eq < 0) {
                throw new IllegalArgumentException("expected name=value, got " + arg);
            }
            opts.put(arg.substring(0, eq), arg.substring(eq + 1));
        }
        long started = System.currentTimeMillis();
        String topology = need(opts, "topology");
        long expect = Long.parseLong(need(opts, "expect"));
        AtomicLong read = new AtomicLong();
        AtomicLong first = new AtomicLong();
        AtomicLong last = new AtomicLong();

        StreamsBuilder builder = new StreamsBuilder();
        KStream<String, byte[]> input = builder.stream(
                need(opts, "input"), Consumed.with(Serdes.String(), Serdes.ByteArray()));
        KGroupedStream<String, byte[]> grouped = input.peek((key, value) -> {
            long now = System.currentTimeMillis();
            first.compareAndSet(0, now);
            last.set(now);
            read.incrementAndGet();
        }).groupByKey(Grouped.with(Serdes.String(), Serdes.ByteArray()));
        if (topology.equals("count")) {
            grouped.count(Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as("counts")
                    .withKeySerde(Serdes.String()).withValueSerde(Serdes.Long()));
        } else {
            long size = Long.parseLong(opts.getOrDefault("size_ms", "60000"));
            long advance = topology.equals("hopping")
                    ? Long.parseLong(opts.getOrDefault("advance_ms", String.valueOf(size)))
                    : size;
            long grace = Long.parseLong(opts.getOrDefault("grace_ms", "5000"));
            TimeWindows windows = TimeWindows
                    .ofSizeAndGrace(Duration.ofMillis(size), Duration.ofMillis(grace))
                    .advanceBy(Duration.ofMillis(advance));
            grouped.windowedBy(windows)
                    .count(Materialized.<String, Long, WindowStore<Bytes, byte[]>>as(topology)
                            .withKeySerde(Serdes.String()).withValueSerde(Serdes.Long()))
                    .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()))
                    .toStream()
                    .process(WindowHeaders::new)
                    .to(need(opts, "output"), Produced.with(Serdes.String(), Serdes.Long()));
        }

        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, need(opts, "app"));
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, need(opts, "bootstrap"));
        props.put(StreamsConfig.STATE_DIR_CONFIG, need(opts, "state"));
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, opts.getOrDefault("threads", "2"));
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG,
                opts.getOrDefault("guarantee", StreamsConfig.AT_LEAST_ONCE));
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, "1");
        props.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");
        if (opts.containsKey("cache_bytes")) {
            props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, opts.get("cache_bytes"));
        }

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        streams.setUncaughtExceptionHandler(error -> {
            error.printStackTrace();
            System.exit(3);
            return null;
        });
        streams.start();
        long deadline = System.currentTimeMillis()
                + 1000L * Long.parseLong(opts.getOrDefault("timeout_s", "900"));
        while (read.get() < expect && System.currentTimeMillis() < deadline) {
            Thread.sleep(5);
        }
        if (read.get() < expect) {
            describe(streams, read.get(), expect);
        }
        // the peek counts a record before the windowed count sees it (and may drop it, which
        // its metric counts): wait until the stream threads have processed every record read
        while (processed(streams) < read.get() && System.currentTimeMillis() < deadline) {
            Thread.sleep(5);
        }
        double dropped = 0;
        for (Map.Entry<MetricName, ? extends Metric> m : streams.metrics().entrySet()) {
            if (m.getKey().name().equals("dropped-records-total")
                    && m.getKey().group().equals("stream-task-metrics")) {
                dropped += ((Number) m.getValue().metricValue()).doubleValue();
            }
        }
        streams.close(Duration.ofSeconds(120));
        long closed = System.currentTimeMillis();
        System.out.println("started=" + started + " first=" + first.get() + " last=" + last.get()
                + " closed=" + closed + " read=" + read.get() + " dropped=" + (long) dropped
                + " peak_rss_kb=" + peakRssKb());
        System.out.flush();
        System.exit(read.get() >= expect ? 0 : 2);
    }

    /** Why it stopped short, on stderr: its state, its threads' tasks and each partition's lag. */
    private static void describe(KafkaStreams streams, long read, long expect) {
        System.err.println("timed out: read " + read + " of " + expect + ", state "
                + streams.state());
        streams.metadataForLocalThreads().forEach(thread -> System.err.println(
                "thread " + thread.threadName() + " " + thread.threadState() + " active "
                + thread.activeTasks()));
        for (Map.Entry<MetricName, ? extends Metric> m : streams.metrics().entrySet()) {
            MetricName name = m.getKey();
            if (name.name().equals("records-lag") || name.name().equals("last-poll-seconds-ago")
                    || name.name().equals("rebalance-total")
                    || name.name().equals("failed-rebalance-total")) {
                System.err.println("metric " + name.group() + " " + name.name() + " "
                        + name.tags() + " = " + m.getValue().metricValue());
            }
        }
        System.err.flush();
    }

    private static String need(Map<String, String> opts, String name) {
        String value = opts.get(name);
        if (value == null) {
            throw new IllegalArgumentException("missing " + name + "=...");
        }
        return value;
    }

    /** Records the stream threads have taken through the whole topology. */
    static double processed(KafkaStreams streams) {
        double total = 0;
        for (Map.Entry<MetricName, ? extends Metric> m : streams.metrics().entrySet()) {
            if (m.getKey().name().equals("process-total")
                    && m.getKey().group().equals("stream-thread-metrics")) {
                total += ((Number) m.getValue().metricValue()).doubleValue();
            }
        }
        return total;
    }

    private static long peakRssKb() throws IOException {
        for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
            if (line.startsWith("VmHWM:")) {
                return Long.parseLong(line.replaceAll("[^0-9]", ""));
            }
        }
        return -1;
    }

    /** A window's final count as the record key, the count, and the window in headers. */
    private static final class WindowHeaders
            implements Processor<Windowed<String>, Long, String, Long> {
        private ProcessorContext<String, Long> context;

        @Override
        public void init(ProcessorContext<String, Long> context) {
            this.context = context;
        }

        @Override
        public void process(Record<Windowed<String>, Long> record) {
            Record<String, Long> out = record.withKey(record.key().key())
                    .withHeaders(new RecordHeaders(record.headers().toArray()));
            out.headers().add("window-start", String.valueOf(record.key().window().start())
                    .getBytes(StandardCharsets.UTF_8));
            out.headers().add("window-end", String.valueOf(record.key().window().end())
                    .getBytes(StandardCharsets.UTF_8));
            context.forward(out);
        }
    }
}
