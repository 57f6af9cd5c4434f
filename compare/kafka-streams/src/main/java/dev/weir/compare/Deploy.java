package dev.weir.compare;

import java.util.List;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Named;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;

/**
 * The application of the third user report (rolling deploys), as Weir's
 * rolling-deploy test builds it (streams/tests/rolling_deploy.rs, shape
 * REPORT: `CountThree`); Weir has no example binary of it.
 *
 * <pre>
 * input (key = a word, UTF-8; the value is ignored), e.g. 12 partitions
 *   -> count: three persistent key-value stores, each with a changelog, no cache:
 *        counts    (String -> Long): the key's count, +1
 *        last-seen (String -> Long): the key's last record timestamp
 *        total     (String -> Long): the task's record total, under the key "all"
 *   -> output (key = the word, value = its new count as a decimal string, the input's timestamp)
 * </pre>
 *
 * No repartition: each count stays in its word's input partition.
 */
public final class Deploy {
    private Deploy() {}

    static final String COUNTS = "counts";
    static final String LAST_SEEN = "last-seen";
    static final String TOTAL = "total";

    static final class CountThree implements Processor<String, byte[], String, String> {
        private ProcessorContext<String, String> ctx;
        private KeyValueStore<String, Long> counts;
        private KeyValueStore<String, Long> lastSeen;
        private KeyValueStore<String, Long> total;

        @Override
        public void init(ProcessorContext<String, String> context) {
            this.ctx = context;
            this.counts = context.getStateStore(COUNTS);
            this.lastSeen = context.getStateStore(LAST_SEEN);
            this.total = context.getStateStore(TOTAL);
        }

        @Override
        public void process(Record<String, byte[]> r) {
            Long old = counts.get(r.key());
            long n = (old == null ? 0 : old) + 1;
            counts.put(r.key(), n);
            lastSeen.put(r.key(), r.timestamp());
            Long all = total.get("all");
            total.put("all", (all == null ? 0 : all) + 1);
            ctx.forward(new Record<>(r.key(), Long.toUnsignedString(n), r.timestamp()));
        }
    }

    /** The report's app from {@code input} to {@code output}. */
    public static Topology topology(String input, String output) {
        StreamsBuilder b = new StreamsBuilder();
        for (String store : new String[] {COUNTS, LAST_SEEN, TOTAL}) {
            b.addStateStore(Stores.keyValueStoreBuilder(Stores.persistentKeyValueStore(store), Serdes.String(), Serdes.Long())
                .withCachingDisabled()
                .withLoggingEnabled(java.util.Map.of()));
        }
        b.stream(input, Consumed.with(Text.serde(), Serdes.ByteArray()).withName("words"))
            .process(CountThree::new, Named.as("count"), COUNTS, LAST_SEEN, TOTAL)
            .to(output, Produced.with(Serdes.String(), Serdes.String()).withName("out"));
        return b.build();
    }

    public static void main(String[] argv) {
        Cli.Args a = Cli.parseOrExit("deploy",
            "The rolling-deploy report's application: keyed counts with three stores (Kafka Streams 4.4 reference).",
            List.of(), argv);
        Cli.run("deploy", a, topology(a.input, a.output));
    }
}
