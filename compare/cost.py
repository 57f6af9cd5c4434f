#!/usr/bin/env python3
"""What the word count costs: Weir against Kafka Streams 4.4 on one Kafka cluster.

    compare/run.sh cost [--lines N] [--runs R] [--guarantees exactly-once,at-least-once] [...]
    (or: "$(scripts/pyenv.sh)" compare/cost.py --bootstrap B --weir-bin DIR --ks-classpath CP ...)

For each guarantee and run, alternating which implementation goes first: the
input topic is filled beforehand with --lines lines of 1 to 3 words
(librdkafka), then one instance of the implementation's word count starts on
an empty state directory and works through the backlog, while a judge
(librdkafka, read_committed under exactly-once) counts the outputs. Measured:

- records/s: input words (one output each) over the time from the first
  output to the last;
- CPU per record: the process's user + system CPU time (from /proc) over
  the words, in microseconds;
- peak RSS: the process's VmHWM at the end.

Every run is printed, then each implementation's medians and Weir's ratios
to Kafka Streams. Both run with --threads stream threads and their
defaults otherwise (compare/kafka-streams/README.md: no record cache; the
JVM gets --java-opts).
"""

import os
import random
import shutil
import signal
import statistics
import subprocess
import tempfile
import threading
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from common import Fail, KS_MAIN, WORDS, create_topics, implementations, logger, parser, run_main, write_json

log = logger("cost")


def fill(bootstrap, topic, lines, seed):
    """Writes the input; returns the number of words."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                  "compression.type": "none", "acks": "all"})
    rng = random.Random(seed)
    words = 0
    for n in range(lines):
        line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3)))
        words += len(line.split())
        while True:
            try:
                p.produce(topic, value=line.encode())
                break
            except BufferError:
                p.poll(0.05)
        if n % 10000 == 0:
            p.poll(0)
    p.flush(120)
    return words


class Counter(threading.Thread):
    """Counts the output records and notes the first and last arrival."""

    def __init__(self, bootstrap, topic, partitions, read_committed):
        super().__init__(daemon=True)
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"cost-{topic}",
                           "enable.auto.commit": False,
                           "isolation.level": "read_committed" if read_committed else "read_uncommitted"})
        self.c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        self.count, self.first, self.last = 0, None, None
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            msgs = self.c.consume(num_messages=5000, timeout=0.2)
            n = sum(1 for m in msgs if not m.error())
            if n:
                now = time.time()
                self.first = self.first or now
                self.last = now
                self.count += n
        self.c.close()


def cpu_and_rss(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks  # utime + stime
    rss_kb = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                rss_kb = int(line.split()[1])
    return cpu, rss_kb


def run_once(args, impl, guarantee, number, admin):
    suffix = f"{impl}-{guarantee}-{os.getpid()}-{number}-{int(time.time())}"
    lines_t, counts_t, app = f"cost-lines-{suffix}", f"cost-counts-{suffix}", f"cost-wc-{suffix}"
    create_topics(admin, [lines_t, counts_t], args.partitions)
    words = fill(args.bootstrap, lines_t, args.lines, seed=number)
    work = tempfile.mkdtemp(prefix=f"weir-cost-{impl}.")
    flags = ["--bootstrap", args.bootstrap, "--application-id", app, "--state-dir", os.path.join(work, "state"),
             "--input", lines_t, "--output", counts_t, "--guarantee", guarantee, "--threads", str(args.threads),
             "-X", "auto.offset.reset=earliest"]
    if impl == "weir":
        cmd = [os.path.join(args.weir_bin, "examples", "wordcount")] + flags
    else:
        cmd = ["java", *args.java_opts.split(), "-cp", args.ks_classpath, KS_MAIN["wordcount"]] + flags
    counter = Counter(args.bootstrap, counts_t, args.partitions, guarantee == "exactly-once")
    counter.start()
    logf = open(os.path.join(work, "app.log"), "w")
    started = time.time()
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=logf,
                         env=dict(os.environ, NO_COLOR="1"))
    try:
        deadline = started + args.limit
        while counter.count < words and time.time() < deadline:
            if p.poll() is not None:
                raise Fail(f"{impl} exited {p.returncode} (see {work}/app.log)")
            time.sleep(0.2)  # poll interval of a bounded wait for the outputs
        if counter.count < words:
            raise Fail(f"{impl}: {counter.count} of {words} outputs within {args.limit:.0f} s")
        cpu, rss_kb = cpu_and_rss(p.pid)
    finally:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=70)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        counter.stop.set()
        counter.join()
        admin.delete_topics([lines_t, counts_t])
        if not os.environ.get("WEIR_KEEP_WORK"):
            shutil.rmtree(work, ignore_errors=True)
    busy = max(counter.last - counter.first, 1e-3)
    return {"impl": impl, "guarantee": guarantee, "run": number, "words": words,
            "records_per_s": words / busy, "to_first_output_s": counter.first - started,
            "cpu_us_per_record": cpu * 1e6 / words, "peak_rss_mib": rss_kb / 1024}


def main():
    ap = parser(__doc__, java_opts="-Xmx1g -XX:+UseG1GC")
    ap.add_argument("--guarantees", default="exactly-once,at-least-once")
    ap.add_argument("--lines", type=int, default=500_000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--limit", type=float, default=900.0, help="seconds a run may take")
    args = ap.parse_args()
    impls = implementations(args, "wordcount")
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    results = []
    for guarantee in [g for g in args.guarantees.split(",") if g]:
        for number in range(1, args.runs + 1):
            order = impls if number % 2 else list(reversed(impls))
            for impl in order:
                log(f"{guarantee} run {number}/{args.runs}: {impl}")
                r = run_once(args, impl, guarantee, number, admin)
                results.append(r)
                print(f"{guarantee:13} run {number} {impl:13} {r['words']} records: "
                      f"{r['records_per_s']:9.0f} records/s, {r['cpu_us_per_record']:6.1f} us CPU/record, "
                      f"peak RSS {r['peak_rss_mib']:6.0f} MiB, first output after {r['to_first_output_s']:.1f} s",
                      flush=True)
    print()
    print(f"| word count, {args.lines} lines, {args.threads} thread(s), {args.partitions} partitions "
          "| records/s | CPU us/record | peak RSS MiB |")
    print("|---|---|---|---|")
    for guarantee in [g for g in args.guarantees.split(",") if g]:
        med = {}
        for impl in impls:
            rs = [r for r in results if r["impl"] == impl and r["guarantee"] == guarantee]
            if not rs:
                continue
            med[impl] = {k: statistics.median(r[k] for r in rs)
                         for k in ("records_per_s", "cpu_us_per_record", "peak_rss_mib")}
            m = med[impl]
            print(f"| {impl}, {guarantee} (median of {len(rs)}) | {m['records_per_s']:.0f} | "
                  f"{m['cpu_us_per_record']:.1f} | {m['peak_rss_mib']:.0f} |")
        if "weir" in med and "kafka-streams" in med:
            w, k = med["weir"], med["kafka-streams"]
            print(f"| Weir / Kafka Streams, {guarantee} | {w['records_per_s'] / k['records_per_s']:.2f} | "
                  f"{w['cpu_us_per_record'] / k['cpu_us_per_record']:.2f} | "
                  f"{w['peak_rss_mib'] / k['peak_rss_mib']:.2f} |")
    write_json(args, results)
    return 0


if __name__ == "__main__":
    run_main(main, "cost")
