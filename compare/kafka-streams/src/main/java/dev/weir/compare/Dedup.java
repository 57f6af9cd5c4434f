package dev.weir.compare;

import java.time.Duration;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Named;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.Stores;
import org.apache.kafka.streams.state.WindowStore;
import org.apache.kafka.streams.state.WindowStoreIterator;

/**
 * The command deduplicator of Weir's example {@code dedup}
 * (streams/examples/apps/dedup.rs), the application of the second user
 * report, on Kafka Streams.
 *
 * <pre>
 * input (key = command id, value = payload)
 *   -> dedup: look the id up in the persistent window store `seen` (String -> Long,
 *      windows starting in [timestamp - window, timestamp]); if absent, put
 *      (id, timestamp) at window start = the command's timestamp
 *   -> execute: fail once per process and command id on a payload holding the
 *      fail marker (after the put: the failure must abort it); else write the verdict
 *   -> output (key = command id, value `accepted` or `duplicate`, the input's timestamp)
 * </pre>
 */
public final class Dedup {
    /** The window store of seen ids. */
    public static final String STORE = "seen";

    /** The command ids this process has already failed on, shared by all its tasks and threads. */
    static final Set<String> FAILED_ONCE = ConcurrentHashMap.newKeySet();

    private Dedup() {}

    /** What dedup passes to execute (in memory, never serialized). */
    record Seen(String payload, boolean duplicate) {}

    static final class Check implements Processor<String, String, String, Seen> {
        private final long windowMs;
        private ProcessorContext<String, Seen> ctx;
        private WindowStore<String, Long> seen;

        Check(long windowMs) {
            this.windowMs = windowMs;
        }

        @Override
        public void init(ProcessorContext<String, Seen> context) {
            this.ctx = context;
            this.seen = context.getStateStore(STORE);
        }

        @Override
        public void process(Record<String, String> command) {
            long ts = command.timestamp();
            // Weir: timestamp.saturating_sub(window_ms); window starts are
            // record timestamps, never negative, so 0 bounds it the same.
            long from = Math.max(0L, ts - windowMs);
            boolean duplicate;
            try (WindowStoreIterator<Long> it = seen.fetch(command.key(), from, ts)) {
                duplicate = it.hasNext();
            }
            if (!duplicate) {
                seen.put(command.key(), ts, ts);
            }
            ctx.forward(new Record<>(command.key(), new Seen(command.value(), duplicate), ts));
        }
    }

    static final class Execute implements Processor<String, Seen, String, String> {
        private final String failMarker;
        private ProcessorContext<String, String> ctx;

        Execute(String failMarker) {
            this.failMarker = failMarker;
        }

        @Override
        public void init(ProcessorContext<String, String> context) {
            this.ctx = context;
        }

        @Override
        public void process(Record<String, Seen> command) {
            Seen s = command.value();
            if (!s.duplicate() && failMarker != null && s.payload().contains(failMarker)
                && FAILED_ONCE.add(command.key())) {
                throw new IllegalStateException("command " + command.key() + ": validation failed on its payload");
            }
            String verdict = s.duplicate() ? "duplicate" : "accepted";
            ctx.forward(new Record<>(command.key(), verdict, command.timestamp()));
        }
    }

    /** The deduplicator from {@code input} to {@code output}, remembering ids for {@code windowMs}. */
    public static Topology topology(String input, String output, long windowMs, String failMarker) {
        Duration window = Duration.ofMillis(windowMs);
        StreamsBuilder b = new StreamsBuilder();
        // retainDuplicates=false: one value per id and window start, as Weir's.
        b.addStateStore(Stores.windowStoreBuilder(Stores.persistentWindowStore(STORE, window, window, false),
                Serdes.String(), Serdes.Long())
            .withCachingDisabled()
            .withLoggingEnabled(java.util.Map.of()));
        b.stream(input, Consumed.with(Text.serde(), Text.serde()).withName("commands"))
            .process(() -> new Check(windowMs), Named.as("dedup"), STORE)
            .process(() -> new Execute(failMarker), Named.as("execute"))
            .to(output, Produced.with(Serdes.String(), Serdes.String()).withName("verdicts"));
        return b.build();
    }

    public static void main(String[] argv) {
        List<Cli.Extra> extras = List.of(
            new Cli.Extra("window-ms", "MS", "3600000", "how long a command id is remembered, in milliseconds"),
            new Cli.Extra("fail-marker", "TEXT", null, "fail once per process on a command whose payload holds this text"));
        Cli.Args a = Cli.parseOrExit("dedup", "A command deduplicator on Kafka (Kafka Streams 4.4 reference of Weir's example).",
            extras, argv);
        long windowMs;
        Topology t;
        try {
            windowMs = Cli.millis("window-ms", a.extra("window-ms"));
            t = topology(a.input, a.output, windowMs, a.extra("fail-marker"));
        } catch (Cli.UsageError | IllegalArgumentException e) {
            System.err.println("dedup: " + e.getMessage());
            System.exit(2);
            return;
        }
        Cli.run("dedup", a, t);
    }
}
