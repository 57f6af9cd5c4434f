package dev.weir.compare;

import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;

import com.sun.net.httpserver.HttpServer;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.streams.CloseOptions;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.errors.LogAndContinueExceptionHandler;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse;

/**
 * The command line the reference applications share, as Weir's examples
 * (streams/examples/cli/mod.rs) spell it, and their run loop: start, run until
 * SIGTERM or SIGINT, close gracefully (leaving the group), exit 0; one clear
 * line on stderr and a non-zero exit when something is wrong (2: the command
 * line or the configuration; 1: the instance failed or stopped on its own).
 *
 * <pre>
 * APP --bootstrap HOST:PORT --application-id ID --state-dir DIR --input TOPIC --output TOPIC
 *     [--guarantee at-least-once|exactly-once] [--threads N] [--standbys N]
 *     [--instance-id ID] [--instance-id-from-hostname] [--metrics-addr HOST:PORT]
 *     [-X key=value]... [app flags]
 * </pre>
 */
public final class Cli {
    /** How long a graceful close may take, as Weir's examples (60 s). */
    static final Duration CLOSE_TIMEOUT = Duration.ofSeconds(60);

    private Cli() {}

    /** The command line is wrong: one line on stderr, exit 2. */
    static final class UsageError extends Exception {
        private static final long serialVersionUID = 1L;

        UsageError(String message) {
            super(message);
        }
    }

    /** A flag an application adds to the shared ones. */
    record Extra(String flag, String valueName, String defaultValue, String help) {}

    /** The parsed command line. */
    static final class Args {
        String bootstrap;
        String applicationId;
        String stateDir;
        String input;
        String output;
        String guarantee = "at-least-once";
        int threads = 1;
        int standbys = 0;
        String instanceId;
        boolean instanceIdFromHostname;
        String metricsAddr;
        /** -X properties, in order (a later one wins). */
        final Map<String, String> properties = new LinkedHashMap<>();
        /** The application's own flags (by flag, without "--"), defaults filled in. */
        final Map<String, String> extras = new HashMap<>();

        String extra(String flag) {
            return extras.get(flag);
        }
    }

    private static final String[][] COMMON_HELP = {
        {"--bootstrap HOST:PORT[,HOST:PORT...]", "the cluster's bootstrap servers [env: KAFKA_BOOTSTRAP]"},
        {"--application-id ID", "application.id: the consumer group and the prefix of internal topics"},
        {"--state-dir DIR", "state.dir: where the task stores live"},
        {"--input TOPIC", "the input topic"},
        {"--output TOPIC", "the output topic"},
        {"--guarantee at-least-once|exactly-once", "the processing guarantee [default: at-least-once]"},
        {"--threads N", "num.stream.threads [default: 1]"},
        {"--standbys N", "num.standby.replicas [default: 0]"},
        {"--instance-id ID", "group.instance.id (static membership) [env: WEIR_INSTANCE_ID]"},
        {"--instance-id-from-hostname", "use the host name as group.instance.id when no instance id is given"},
        {"--metrics-addr HOST:PORT", "serve the instance's metrics for Prometheus at http://HOST:PORT/metrics"},
        {"-X KEY=VALUE", "any Kafka Streams or client property (repeatable)"},
    };

    static String usage(String app, String about, List<Extra> extras) {
        StringBuilder s = new StringBuilder();
        s.append(about).append("\n\nUsage: ").append(app)
            .append(" --bootstrap HOST:PORT --application-id ID --state-dir DIR --input TOPIC --output TOPIC [OPTIONS]\n\nOptions:\n");
        for (String[] h : COMMON_HELP) {
            s.append(String.format("  %-42s %s%n", h[0], h[1]));
        }
        for (Extra e : extras) {
            String left = "--" + e.flag() + " " + e.valueName();
            String help = e.help() + (e.defaultValue() != null ? " [default: " + e.defaultValue() + "]" : "");
            s.append(String.format("  %-42s %s%n", left, help));
        }
        s.append(String.format("  %-42s %s%n", "-h, --help", "print this help"));
        s.append(String.format("  %-42s %s%n", "-V, --version", "print the version"));
        return s.toString();
    }

    /**
     * Parses the command line; prints help or version and exits 0 when asked,
     * or prints one line and exits 2 when the command line is wrong.
     */
    static Args parseOrExit(String app, String about, List<Extra> extras, String[] argv) {
        try {
            return parse(app, about, extras, argv);
        } catch (UsageError e) {
            System.err.println(app + ": " + e.getMessage());
            System.exit(2);
            throw new AssertionError();
        }
    }

    static Args parse(String app, String about, List<Extra> extras, String[] argv) throws UsageError {
        Args a = new Args();
        Map<String, Extra> extraByFlag = new HashMap<>();
        for (Extra e : extras) {
            extraByFlag.put(e.flag(), e);
            if (e.defaultValue() != null) {
                a.extras.put(e.flag(), e.defaultValue());
            }
        }
        Set<String> seen = new TreeSet<>();
        for (int i = 0; i < argv.length; i++) {
            String arg = argv[i];
            if (arg.equals("-h") || arg.equals("--help")) {
                System.out.print(usage(app, about, extras));
                System.exit(0);
            }
            if (arg.equals("-V") || arg.equals("--version")) {
                System.out.println(app + " " + version());
                System.exit(0);
            }
            if (arg.startsWith("-X")) {
                String kv;
                if (arg.length() > 2) {
                    // -Xkey=value, or -X=key=value as clap also takes it
                    kv = arg.startsWith("-X=") ? arg.substring(3) : arg.substring(2);
                } else if (i + 1 < argv.length) {
                    kv = argv[++i];
                } else {
                    throw new UsageError("-X needs a value: -X KEY=VALUE");
                }
                int eq = kv.indexOf('=');
                String key = eq < 0 ? "" : kv.substring(0, eq).trim();
                if (key.isEmpty()) {
                    throw new UsageError("invalid value for -X: expected KEY=VALUE, got \"" + kv + "\"");
                }
                a.properties.put(key, kv.substring(eq + 1).trim());
                continue;
            }
            if (!arg.startsWith("--") || arg.equals("--")) {
                throw new UsageError("unexpected argument '" + arg + "' (see --help)");
            }
            String flag = arg.substring(2);
            String value = null;
            int eq = flag.indexOf('=');
            if (eq >= 0) {
                value = flag.substring(eq + 1);
                flag = flag.substring(0, eq);
            }
            boolean known = flag.equals("instance-id-from-hostname") || extraByFlag.containsKey(flag)
                || Set.of("bootstrap", "application-id", "state-dir", "input", "output", "guarantee",
                    "threads", "standbys", "instance-id", "metrics-addr").contains(flag);
            if (!known) {
                throw new UsageError("unknown flag '--" + flag + "' (see --help)");
            }
            if (!seen.add(flag)) {
                throw new UsageError("the flag '--" + flag + "' cannot be used more than once");
            }
            if (flag.equals("instance-id-from-hostname")) {
                if (value != null) {
                    throw new UsageError("the flag '--instance-id-from-hostname' takes no value");
                }
                a.instanceIdFromHostname = true;
                continue;
            }
            if (value == null) {
                if (i + 1 >= argv.length) {
                    throw new UsageError("the flag '--" + flag + "' needs a value");
                }
                value = argv[++i];
            }
            switch (flag) {
                case "bootstrap" -> a.bootstrap = value;
                case "application-id" -> a.applicationId = value;
                case "state-dir" -> a.stateDir = value;
                case "input" -> a.input = value;
                case "output" -> a.output = value;
                case "guarantee" -> {
                    if (!value.equals("at-least-once") && !value.equals("exactly-once")) {
                        throw new UsageError("invalid value '" + value
                            + "' for '--guarantee': possible values are at-least-once, exactly-once");
                    }
                    a.guarantee = value;
                }
                case "threads" -> a.threads = count(flag, value);
                case "standbys" -> a.standbys = count(flag, value);
                case "instance-id" -> a.instanceId = value;
                case "metrics-addr" -> a.metricsAddr = value;
                default -> a.extras.put(flag, value);
            }
        }
        if (a.bootstrap == null) {
            a.bootstrap = System.getenv("KAFKA_BOOTSTRAP");
        }
        if (a.instanceId == null) {
            String env = System.getenv("WEIR_INSTANCE_ID");
            if (env != null) {
                a.instanceId = env;
            }
        }
        List<String> missing = new ArrayList<>();
        if (a.bootstrap == null) missing.add("--bootstrap");
        if (a.applicationId == null) missing.add("--application-id");
        if (a.stateDir == null) missing.add("--state-dir");
        if (a.input == null) missing.add("--input");
        if (a.output == null) missing.add("--output");
        if (!missing.isEmpty()) {
            throw new UsageError("missing required flag(s): " + String.join(" ", missing) + " (see --help)");
        }
        if (a.metricsAddr != null) {
            hostPort(a.metricsAddr);
        }
        return a;
    }

    private static int count(String flag, String value) throws UsageError {
        try {
            int n = Integer.parseInt(value);
            if (n >= 0) {
                return n;
            }
        } catch (NumberFormatException e) {
            // below
        }
        throw new UsageError("invalid value '" + value + "' for '--" + flag + "': expected a number >= 0");
    }

    /** A non-negative number of milliseconds, as Rust's u64 (values past Long.MAX_VALUE clamp to it). */
    static long millis(String flag, String value) throws UsageError {
        if (!value.isEmpty() && value.chars().allMatch(Character::isDigit)) {
            try {
                return Long.parseLong(value);
            } catch (NumberFormatException e) {
                if (new java.math.BigInteger(value).bitLength() <= 64) {
                    return Long.MAX_VALUE;
                }
            }
        }
        throw new UsageError("invalid value '" + value + "' for '--" + flag + "': expected milliseconds >= 0");
    }

    static InetSocketAddress hostPort(String s) throws UsageError {
        int colon = s.lastIndexOf(':');
        try {
            if (colon > 0) {
                String host = s.substring(0, colon);
                if (host.startsWith("[") && host.endsWith("]")) {
                    host = host.substring(1, host.length() - 1);
                }
                int port = Integer.parseInt(s.substring(colon + 1));
                if (port >= 0 && port < 65536) {
                    return new InetSocketAddress(host, port);
                }
            }
        } catch (NumberFormatException e) {
            // below
        }
        throw new UsageError("invalid value '" + s + "' for '--metrics-addr': expected HOST:PORT");
    }

    static String version() {
        Properties v = new Properties();
        try (var in = KafkaStreams.class.getResourceAsStream("/kafka/kafka-streams-version.properties")) {
            if (in != null) {
                v.load(in);
            }
        } catch (IOException e) {
            // unknown
        }
        return "(Kafka Streams " + v.getProperty("version", "unknown") + ")";
    }

    /** The host name as Weir's machine_instance_id() finds it: $WEIR_INSTANCE_ID, $HOSTNAME, the kernel's. */
    static String machineInstanceId() {
        for (String name : new String[] {"WEIR_INSTANCE_ID", "HOSTNAME"}) {
            String v = System.getenv(name);
            if (v != null && !v.trim().isEmpty()) {
                return v.trim();
            }
        }
        try {
            String v = Files.readString(Path.of("/proc/sys/kernel/hostname")).trim();
            return v.isEmpty() ? null : v;
        } catch (IOException e) {
            return null;
        }
    }

    static boolean streamsProtocol(Map<String, String> props) {
        return "streams".equalsIgnoreCase(props.getOrDefault(StreamsConfig.GROUP_PROTOCOL_CONFIG, "classic").trim());
    }

    /**
     * The Kafka Streams properties these flags give: the flags, then this
     * folder's settings (README.md says why), then every -X property, which
     * overrides both.
     */
    static Properties properties(String app, Args a) throws UsageError {
        Map<String, String> p = new LinkedHashMap<>();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, a.applicationId);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, a.bootstrap);
        p.put(StreamsConfig.STATE_DIR_CONFIG, a.stateDir);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG,
            a.guarantee.equals("exactly-once") ? StreamsConfig.EXACTLY_ONCE_V2 : StreamsConfig.AT_LEAST_ONCE);
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, Integer.toString(a.threads));
        if (a.standbys > 0) {
            p.put(StreamsConfig.NUM_STANDBY_REPLICAS_CONFIG, Integer.toString(a.standbys));
        }
        String instanceId = a.instanceId;
        if (instanceId == null && a.instanceIdFromHostname) {
            instanceId = machineInstanceId();
        }
        if (instanceId != null) {
            // Kafka Streams gives each stream thread's main consumer
            // group.instance.id = ID-<thread index> (classic protocol); the
            // streams protocol (4.4) uses it as the member's instance id.
            p.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, instanceId);
        }
        // Weir's stores have no record cache: every put reaches the store
        // and its changelog, every forward goes downstream at once.
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, "0");
        // Weir's default: a record whose key or value does not decode is
        // logged and skipped (Kafka Streams' default is to fail).
        p.put(StreamsConfig.DESERIALIZATION_EXCEPTION_HANDLER_CLASS_CONFIG,
            LogAndContinueExceptionHandler.class.getName());
        // Kafka Streams 4.4 recommends it (and warns without it; the constant
        // is deprecated as the future default); no app here has a global
        // store, so it changes nothing else.
        p.put("processing.exception.handler.global.enabled", "true");
        boolean streamsProtocol = streamsProtocol(a.properties);
        if (!streamsProtocol) {
            // Weir's failure detection and rebalance notice (its defaults);
            // Kafka's are 45 s and 3 s. The streams protocol sets both on the
            // broker (group configs), see applyGroupConfigs.
            p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "10000");
            p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "250");
        }
        for (Map.Entry<String, String> e : a.properties.entrySet()) {
            if (!knownProperty(e.getKey())) {
                throw new UsageError("unknown property '" + e.getKey() + "' in -X " + e.getKey() + "=" + e.getValue());
            }
            p.put(e.getKey(), e.getValue());
        }
        Properties props = new Properties();
        props.putAll(p);
        return props;
    }

    /** A key Kafka Streams or one of its clients knows, bare or with a client prefix. */
    static boolean knownProperty(String key) {
        for (String free : new String[] {StreamsConfig.TOPIC_PREFIX, StreamsConfig.CLIENT_TAG_PREFIX}) {
            if (key.startsWith(free)) {
                return key.length() > free.length();
            }
        }
        String[][] prefixes = {
            {StreamsConfig.MAIN_CONSUMER_PREFIX, "c"}, {StreamsConfig.RESTORE_CONSUMER_PREFIX, "c"},
            {StreamsConfig.GLOBAL_CONSUMER_PREFIX, "c"}, {StreamsConfig.CONSUMER_PREFIX, "c"},
            {StreamsConfig.PRODUCER_PREFIX, "p"}, {StreamsConfig.ADMIN_CLIENT_PREFIX, "a"},
        };
        for (String[] pre : prefixes) {
            if (key.startsWith(pre[0])) {
                String k = key.substring(pre[0].length());
                return switch (pre[1]) {
                    case "c" -> ConsumerConfig.configNames().contains(k);
                    case "p" -> ProducerConfig.configNames().contains(k);
                    default -> AdminClientConfig.configNames().contains(k);
                };
            }
        }
        return StreamsConfig.configDef().names().contains(key)
            || ConsumerConfig.configNames().contains(key)
            || ProducerConfig.configNames().contains(key)
            || AdminClientConfig.configNames().contains(key);
    }

    /**
     * Under group.protocol=streams (KIP-1071) the assignment settings live on
     * the broker as group configs and Kafka Streams ignores its own: this sets
     * the group's configs from the same flags and -X keys, so --standbys and
     * -X max.warmup.replicas=... mean the same under both protocols.
     */
    static void applyGroupConfigs(String app, Args a, StreamsConfig config) throws Exception {
        Map<String, String> group = new LinkedHashMap<>();
        if (a.standbys > 0 || a.properties.containsKey(StreamsConfig.NUM_STANDBY_REPLICAS_CONFIG)) {
            group.put("streams.num.standby.replicas",
                a.properties.getOrDefault(StreamsConfig.NUM_STANDBY_REPLICAS_CONFIG, Integer.toString(a.standbys)));
        }
        String[][] mapped = {
            {StreamsConfig.MAX_WARMUP_REPLICAS_CONFIG, "streams.num.warmup.replicas"},
            {StreamsConfig.ACCEPTABLE_RECOVERY_LAG_CONFIG, "streams.acceptable.recovery.lag"},
            {ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "streams.session.timeout.ms"},
            {ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "streams.heartbeat.interval.ms"},
        };
        for (String[] m : mapped) {
            if (a.properties.containsKey(m[0])) {
                group.put(m[1], a.properties.get(m[0]));
            }
        }
        if (group.isEmpty()) {
            return;
        }
        List<AlterConfigOp> ops = new ArrayList<>();
        group.forEach((k, v) -> ops.add(new AlterConfigOp(new ConfigEntry(k, v), AlterConfigOp.OpType.SET)));
        Map<String, Object> adminConfig = config.getAdminConfigs(a.applicationId + "-" + app + "-setup");
        try (Admin admin = Admin.create(adminConfig)) {
            admin.incrementalAlterConfigs(Map.of(new ConfigResource(ConfigResource.Type.GROUP, a.applicationId), ops))
                .all().get(30, TimeUnit.SECONDS);
        }
        System.err.println(app + ": streams group " + a.applicationId + " configs set: " + group);
    }

    /**
     * Runs `topology` until SIGTERM or SIGINT, then closes gracefully
     * (leaving the group, within 60 s) and exits 0; exits 1 when the instance
     * fails to start, stops on its own or cannot close in time.
     */
    static void run(String app, Args a, Topology topology) {
        System.exit(runToCode(app, a, topology));
    }

    private static int runToCode(String app, Args a, Topology topology) {
        Properties props;
        StreamsConfig config;
        try {
            props = properties(app, a);
            config = new StreamsConfig(props);
        } catch (UsageError | ConfigException e) {
            System.err.println(app + ": " + e.getMessage());
            return 2;
        }
        if (streamsProtocol(a.properties)) {
            try {
                applyGroupConfigs(app, a, config);
            } catch (Exception e) {
                Throwable cause = e instanceof java.util.concurrent.ExecutionException && e.getCause() != null ? e.getCause() : e;
                System.err.println(app + ": cannot set the streams group's configs: " + cause);
                return 1;
            }
        }
        final KafkaStreams streams;
        try {
            streams = new KafkaStreams(topology, props);
        } catch (RuntimeException e) {
            System.err.println(app + ": " + e.getMessage());
            return 2;
        }
        CountDownLatch stop = new CountDownLatch(1);
        AtomicBoolean signalled = new AtomicBoolean();
        AtomicBoolean closing = new AtomicBoolean();
        AtomicBoolean closed = new AtomicBoolean();
        AtomicReference<KafkaStreams.State> stoppedAs = new AtomicReference<>();
        // Weir's default for a processing error: abort the uncommitted work and
        // start the thread's tasks again from their last commit.
        streams.setUncaughtExceptionHandler(e -> {
            System.err.println(app + ": stream thread failed, replacing it: " + rootMessage(e));
            return StreamThreadExceptionResponse.REPLACE_THREAD;
        });
        streams.setStateListener((now, before) -> {
            System.err.println(app + ": state " + before + " -> " + now);
            if ((now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) && !closing.get()) {
                stoppedAs.compareAndSet(null, now);
                stop.countDown();
            }
        });
        CloseOptions closeOptions = CloseOptions.groupMembershipOperation(CloseOptions.GroupMembershipOperation.LEAVE_GROUP)
            .withTimeout(CLOSE_TIMEOUT);
        installSignalHandlers(() -> {
            signalled.set(true);
            stop.countDown();
        });
        // Any other way out of the JVM (SIGHUP, System.exit elsewhere) still closes.
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            if (closed.compareAndSet(false, true)) {
                closing.set(true);
                streams.close(closeOptions);
            }
        }, app + "-shutdown"));
        HttpServer metrics = null;
        if (a.metricsAddr != null) {
            try {
                metrics = serveMetrics(streams, hostPort(a.metricsAddr));
                System.err.println(app + ": serving metrics at http://" + a.metricsAddr + "/metrics");
            } catch (IOException | UsageError e) {
                System.err.println(app + ": cannot serve metrics on " + a.metricsAddr + ": " + e.getMessage());
                return 2;
            }
        }
        try {
            streams.start();
        } catch (RuntimeException e) {
            System.err.println(app + ": " + rootMessage(e));
            closed.set(true);
            streams.close(Duration.ofSeconds(10));
            return 1;
        }
        try {
            stop.await();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        if (signalled.get()) {
            System.err.println(app + ": signal received: closing");
        }
        closing.set(true);
        boolean ok = true;
        if (closed.compareAndSet(false, true)) {
            ok = streams.close(closeOptions);
        }
        if (metrics != null) {
            metrics.stop(0);
        }
        KafkaStreams.State stopped = stoppedAs.get();
        if (!ok) {
            System.err.println(app + ": could not close within " + CLOSE_TIMEOUT.toSeconds() + " s");
            return 1;
        }
        if (stopped != null && !signalled.get()) {
            System.err.println(app + ": the instance stopped on its own (" + stopped + ")");
            return 1;
        }
        System.err.println(app + ": closed");
        return 0;
    }

    private static String rootMessage(Throwable e) {
        Throwable t = e;
        while (t.getCause() != null && t.getCause() != t) {
            t = t.getCause();
        }
        return t == e ? String.valueOf(e) : e.getClass().getSimpleName() + ": " + t;
    }

    // SIGTERM and SIGINT handled here rather than by the JVM's own handler,
    // which would run the shutdown hooks and then exit 143 (130); javac warns
    // that sun.misc.Signal is internal (jdk.unsupported), which it is.
    private static void installSignalHandlers(Runnable onSignal) {
        for (String name : new String[] {"TERM", "INT"}) {
            sun.misc.Signal.handle(new sun.misc.Signal(name), sig -> onSignal.run());
        }
    }

    /** Kafka Streams' metrics (and its clients') in Prometheus' text format. */
    private static HttpServer serveMetrics(KafkaStreams streams, InetSocketAddress addr) throws IOException {
        HttpServer server = HttpServer.create(addr, 0);
        server.createContext("/", exchange -> {
            StringBuilder body = new StringBuilder();
            Map<String, List<String>> byName = new java.util.TreeMap<>();
            for (Map.Entry<MetricName, ? extends Metric> e : streams.metrics().entrySet()) {
                Object v = e.getValue().metricValue();
                if (!(v instanceof Number n) || Double.isNaN(n.doubleValue())) {
                    continue;
                }
                MetricName m = e.getKey();
                String name = promName(m.group() + "_" + m.name());
                StringBuilder labels = new StringBuilder();
                for (Map.Entry<String, String> t : new java.util.TreeMap<>(m.tags()).entrySet()) {
                    labels.append(labels.length() == 0 ? "{" : ",").append(promName(t.getKey())).append("=\"")
                        .append(t.getValue().replace("\\", "\\\\").replace("\"", "\\\"")).append('"');
                }
                if (labels.length() > 0) {
                    labels.append('}');
                }
                byName.computeIfAbsent(name, k -> new ArrayList<>()).add(name + labels + " " + n.doubleValue());
            }
            byName.forEach((name, lines) -> {
                body.append("# TYPE ").append(name).append(" untyped\n");
                lines.forEach(l -> body.append(l).append('\n'));
            });
            byte[] bytes = body.toString().getBytes(StandardCharsets.UTF_8);
            exchange.getResponseHeaders().set("content-type", "text/plain; version=0.0.4");
            exchange.sendResponseHeaders(200, bytes.length);
            try (OutputStream out = exchange.getResponseBody()) {
                out.write(bytes);
            }
        });
        server.start();
        return server;
    }

    private static String promName(String s) {
        return s.toLowerCase(Locale.ROOT).replaceAll("[^a-z0-9_]", "_");
    }
}
