package dev.weir.compare;

import java.util.List;
import java.util.Locale;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Named;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Repartitioned;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;

/**
 * The word count of Weir's example {@code wordcount}
 * (streams/examples/apps/wordcount.rs), on Kafka Streams.
 *
 * <pre>
 * input (value = a line, UTF-8; the key is ignored)
 *   -> split: lowercase words (split on Unicode white space), keyed by the word, null value
 *   -> &lt;application.id&gt;-by-word-repartition (so one task owns each word)
 *   -> count: a persistent key-value store `counts` (String -> Long), changelog
 *      &lt;application.id&gt;-counts-changelog, no record cache
 *   -> output (key = word, value = its new count as a decimal string, the input's timestamp)
 * </pre>
 */
public final class WordCount {
    /** The counts store (its changelog is {@code <application.id>-counts-changelog}). */
    public static final String STORE = "counts";

    private WordCount() {}

    static final class Split implements Processor<byte[], String, String, Void> {
        private ProcessorContext<String, Void> ctx;

        @Override
        public void init(ProcessorContext<String, Void> context) {
            this.ctx = context;
        }

        @Override
        public void process(Record<byte[], String> line) {
            String text = line.value();
            int i = 0;
            int n = text.length();
            while (i < n) {
                while (i < n && Text.isWhitespace(text.codePointAt(i))) {
                    i += Character.charCount(text.codePointAt(i));
                }
                int start = i;
                while (i < n && !Text.isWhitespace(text.codePointAt(i))) {
                    i += Character.charCount(text.codePointAt(i));
                }
                if (i > start) {
                    String word = text.substring(start, i).toLowerCase(Locale.ROOT);
                    ctx.forward(new Record<>(word, null, line.timestamp()));
                }
            }
        }
    }

    static final class Count implements Processor<String, Void, String, String> {
        private ProcessorContext<String, String> ctx;
        private KeyValueStore<String, Long> counts;

        @Override
        public void init(ProcessorContext<String, String> context) {
            this.ctx = context;
            this.counts = context.getStateStore(STORE);
        }

        @Override
        public void process(Record<String, Void> word) {
            Long old = counts.get(word.key());
            long n = (old == null ? 0 : old) + 1;
            counts.put(word.key(), n);
            ctx.forward(new Record<>(word.key(), Long.toUnsignedString(n), word.timestamp()));
        }
    }

    /** The word count from {@code input} to {@code output}. */
    public static Topology topology(String input, String output) {
        StreamsBuilder b = new StreamsBuilder();
        b.addStateStore(Stores.keyValueStoreBuilder(Stores.persistentKeyValueStore(STORE), Serdes.String(), Serdes.Long())
            .withCachingDisabled()
            .withLoggingEnabled(java.util.Map.of()));
        b.stream(input, Consumed.with(Serdes.ByteArray(), Text.serde()).withName("lines"))
            .process(Split::new, Named.as("split"))
            .repartition(Repartitioned.<String, Void>as("by-word").withKeySerde(Serdes.String()).withValueSerde(Serdes.Void()))
            .process(Count::new, Named.as("count"), STORE)
            .to(output, Produced.with(Serdes.String(), Serdes.String()).withName("counts-out"));
        return b.build();
    }

    public static void main(String[] argv) {
        Cli.Args a = Cli.parseOrExit("wordcount", "A stateful word count on Kafka (Kafka Streams 4.4 reference of Weir's example).",
            List.of(), argv);
        Cli.run("wordcount", a, topology(a.input, a.output));
    }
}
