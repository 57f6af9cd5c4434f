#!/usr/bin/env python3
"""Weir against Kafka Streams through a deploy, side by side on one Kafka cluster.

    compare/run.sh deploy [--runs N] [--strategy keep-state|empty-state|kill-all] [...]
    (or: "$(scripts/pyenv.sh)" compare/deploy.py --bootstrap B --weir-bin DIR --ks-classpath CP ...)

Runs the word count (Weir's `wordcount` example and the Kafka Streams 4.4 app
of compare/kafka-streams with the same command line) as real processes, one
implementation at a time, alternating Weir and Kafka Streams for --runs
rounds. Each run has topics and an application id of its own:

1. N instances start (static instance ids, each on its own state directory)
   and reach RUNNING;
2. a feeder writes lines at --rate per second with librdkafka, each record's
   timestamp its production time; a judge reads the output with librdkafka
   (read_committed under exactly-once). Both apps give an output record its
   input's timestamp, so an output's latency is its arrival at the judge
   minus that timestamp: production to visible output;
3. after --baseline seconds the deploy: `keep-state` restarts each instance
   in turn (SIGTERM, exit, start on the same state directory, RUNNING,
   --settle seconds); `empty-state` does the same on a wiped state
   directory; `kill-all` SIGKILLs every instance and starts them all again;
4. --after seconds more, then the feeder stops and the judge waits for every
   output. Under exactly-once it checks one output per input word and every
   word's last count equal to the recount.

Prints per run the latency p50, p99 and max before and during the deploy
(from its first signal until --after seconds past its end: the lag a deploy
leaves is the deploy's), the deploy's duration and the check; then each
implementation's medians over its runs and Weir's ratio to Kafka Streams.
--json writes every run; --chart draws, when matplotlib is installed, the
per-record latency over time of each implementation's first run on one
picture. Exit status 1 if a run failed its check.

Settings both sides share: exactly-once (or --guarantee), --threads stream
threads per instance, --standbys standby replicas, commit.interval.ms=100,
session.timeout.ms=10000, and Kafka Streams' other settings as
compare/kafka-streams/README.md says (its graceful close leaves the group, as
Weir's does). --ks-protocol streams runs Kafka Streams on KIP-1071
(group.protocol=streams).
"""

import os
import shutil
import signal
import statistics
import tempfile
import threading
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from common import Fail, Feeder, Instances, create_topics, implementations, logger, parser, run_main, write_json

log = logger("deploy")


def percentile(values, q):
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


class Judge(threading.Thread):
    """Reads the output topic with librdkafka from its start and notes each
    record's arrival time, latency, key and value."""

    def __init__(self, bootstrap, topic, partitions, read_committed):
        super().__init__(daemon=True)
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap,
            "group.id": f"judge-{topic}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed" if read_committed else "read_uncommitted",
            "fetch.wait.max.ms": 50,
        })
        self.consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        self.lock = threading.Lock()
        self.records = []  # (arrival ms, partition, latency ms, key, value)
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            for m in self.consumer.consume(num_messages=500, timeout=0.1):
                if m.error():
                    continue
                now = time.time() * 1000
                _, ts = m.timestamp()
                with self.lock:
                    self.records.append((now, m.partition(), now - ts,
                                         (m.key() or b"").decode("utf-8", "replace"),
                                         (m.value() or b"").decode("utf-8", "replace")))
        self.consumer.close()

    def snapshot(self):
        with self.lock:
            return list(self.records)


def run_once(args, impl, number, admin):
    suffix = f"{impl}-{os.getpid()}-{number}-{int(time.time())}"
    names = {"lines": f"deploy-lines-{suffix}", "counts": f"deploy-counts-{suffix}",
             "app": f"deploy-wc-{suffix}"}
    create_topics(admin, [names["lines"], names["counts"]], args.partitions)
    work = tempfile.mkdtemp(prefix=f"weir-compare-{impl}.")

    def flags(i):
        extra = ["-X", f"group.protocol={args.ks_protocol}"] if impl != "weir" and args.ks_protocol != "classic" else []
        return ["--bootstrap", args.bootstrap, "--application-id", names["app"],
                "--state-dir", os.path.join(work, f"i{i}"), "--input", names["lines"],
                "--output", names["counts"], "--guarantee", args.guarantee, "--threads", str(args.threads),
                "--standbys", str(args.standbys), "--instance-id", f"i{i}",
                "-X", "commit.interval.ms=100", "-X", "session.timeout.ms=10000"] + extra

    inst = Instances(args, impl, "wordcount", work, flags)
    judge = Judge(args.bootstrap, names["counts"], args.partitions, args.guarantee == "exactly-once")
    feeder = Feeder(args.bootstrap, names["lines"], args.rate, seed=number)
    events = []
    try:
        started = time.time()
        for i in range(args.instances):
            inst.start(i)
        for i in range(args.instances):
            inst.wait_running(i)
        startup = time.time() - started
        judge.start()
        feeder.start()
        feed_start = time.time() * 1000
        time.sleep(args.baseline)  # steady state before the deploy: the baseline
        deploy_start = time.time() * 1000
        if args.strategy == "kill-all":
            events.append((time.time() * 1000, "SIGKILL all"))
            inst.kill_all()
            for i in range(args.instances):
                inst.start(i)
            for i in range(args.instances):
                inst.wait_running(i)
            events.append((time.time() * 1000, "all RUNNING"))
        else:
            for i in range(args.instances):
                events.append((time.time() * 1000, f"SIGTERM i{i}"))
                inst.stop(i, signal.SIGTERM)
                if args.strategy == "empty-state":
                    shutil.rmtree(os.path.join(work, f"i{i}"), ignore_errors=True)
                inst.start(i)
                inst.wait_running(i)
                events.append((time.time() * 1000, f"i{i} RUNNING"))
                time.sleep(args.settle)  # the next instance goes once this one has settled
        deploy_end = time.time() * 1000
        time.sleep(args.after)  # what the deploy leaves behind counts as the deploy's
        window_end = time.time() * 1000
        feeder.stop.set()
        feeder.join()
        if feeder.errors:
            raise Fail(f"the feeder could not write: {feeder.errors[:3]}")
        words = sum(feeder.words.values())
        deadline = time.time() + 120
        while len(judge.snapshot()) < words and time.time() < deadline:
            time.sleep(0.2)  # poll interval of a bounded wait for the judge
        time.sleep(2)  # late duplicates, if any, would show up here
        judge.stop.set()
        judge.join()
        records = judge.snapshot()
    finally:
        feeder.stop.set()
        judge.stop.set()
        inst.kill_all()
        if os.environ.get("WEIR_KEEP_WORK"):
            log(f"logs kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
        admin.delete_topics([names["lines"], names["counts"]])

    before = [r[2] for r in records if r[0] < deploy_start]
    during = [r[2] for r in records if deploy_start <= r[0] < window_end]
    check = "n/a (at-least-once)"
    ok = True
    if args.guarantee == "exactly-once":
        last = {}
        for _, _, _, k, v in records:
            last[k] = int(v)
        if len(records) != words:
            check, ok = f"FAIL: {len(records)} outputs for {words} words", False
        elif last != dict(feeder.words):
            check, ok = "FAIL: last counts differ from the recount", False
        else:
            check = f"exact ({words} words)"
    return {
        "impl": impl, "run": number, "strategy": args.strategy, "startup_s": startup,
        "deploy_s": (deploy_end - deploy_start) / 1000,
        "before": {"p50": percentile(before, 0.5), "p99": percentile(before, 0.99),
                   "max": max(before, default=float("nan"))},
        "during": {"p50": percentile(during, 0.5), "p99": percentile(during, 0.99),
                   "max": max(during, default=float("nan"))},
        "check": check, "ok": ok,
        "series": [(round(r[0] - feed_start), round(r[2])) for r in records],
        "events": [(round(t - feed_start), what) for t, what in events],
    }


def chart(results, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log(f"no chart: matplotlib is not installed (pip install matplotlib), {path} not written")
        return
    fig, ax = plt.subplots(figsize=(10, 4.5))
    for impl, colour in (("weir", "tab:blue"), ("kafka-streams", "tab:orange")):
        first = next((r for r in results if r["impl"] == impl), None)
        if not first:
            continue
        xs = [t / 1000 for t, _ in first["series"]]
        ys = [lat / 1000 for _, lat in first["series"]]
        ax.scatter(xs, ys, s=2, color=colour, label=f"{impl} (run {first['run']})")
        for t, what in first["events"]:
            ax.axvline(t / 1000, color=colour, alpha=0.25, linewidth=0.8)
    ax.set_xlabel("seconds since the feed started (vertical lines: deploy steps)")
    ax.set_ylabel("latency, production to visible output (s)")
    ax.set_yscale("log")
    ax.set_title(f"word count through a deploy ({results[0]['strategy']})")
    ax.legend(markerscale=5)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    log(f"chart written to {path}")


def main():
    ap = parser(__doc__)
    ap.add_argument("--strategy", choices=["keep-state", "empty-state", "kill-all"], default="keep-state")
    ap.add_argument("--guarantee", choices=["exactly-once", "at-least-once"], default="exactly-once")
    ap.add_argument("--instances", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--standbys", type=int, default=1)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--rate", type=int, default=100, help="input lines per second")
    ap.add_argument("--baseline", type=float, default=10.0)
    ap.add_argument("--settle", type=float, default=5.0)
    ap.add_argument("--after", type=float, default=10.0)
    ap.add_argument("--ks-protocol", choices=["classic", "streams"], default="classic")
    ap.add_argument("--chart", help="PNG of each implementation's first run")
    args = ap.parse_args()
    impls = implementations(args, "wordcount")
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    results = []
    for number in range(args.runs):
        # Alternate which goes first, so neither always runs on a fresher machine.
        order = impls if number % 2 == 0 else list(reversed(impls))
        for impl in order:
            log(f"run {number + 1}/{args.runs}: {impl}, {args.strategy}")
            r = run_once(args, impl, number + 1, admin)
            results.append(r)
            b, d = r["before"], r["during"]
            print(f"run {r['run']} {impl:13} before p50 {b['p50']:6.0f} p99 {b['p99']:6.0f} max {b['max']:6.0f} ms | "
                  f"deploy {r['deploy_s']:5.1f} s: p50 {d['p50']:6.0f} p99 {d['p99']:6.0f} max {d['max']:6.0f} ms | "
                  f"start {r['startup_s']:.1f} s | {r['check']}", flush=True)

    print()
    print(f"| {args.strategy}, {args.instances} instances x {args.threads} threads, {args.partitions} partitions, "
          f"{args.rate} lines/s, {args.guarantee}, {args.standbys} standby | runs | p50 | p99 | max | deploy |")
    print("|---|---|---|---|---|---|")
    medians = {}
    for impl in impls:
        rs = [r for r in results if r["impl"] == impl]
        m = {k: statistics.median(r["during"][k] for r in rs) for k in ("p50", "p99", "max")}
        m["deploy_s"] = statistics.median(r["deploy_s"] for r in rs)
        medians[impl] = m
        print(f"| {impl} (median of runs) | {len(rs)} | {m['p50']:.0f} ms | {m['p99']:.0f} ms | "
              f"{m['max']:.0f} ms | {m['deploy_s']:.1f} s |")
    if "weir" in medians and "kafka-streams" in medians:
        w, k = medians["weir"], medians["kafka-streams"]
        print(f"| Weir / Kafka Streams | | {w['p50'] / k['p50']:.2f} | {w['p99'] / k['p99']:.2f} | "
              f"{w['max'] / k['max']:.2f} | |")
    write_json(args, results)
    if args.chart:
        chart(results, args.chart)
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    run_main(main, "deploy")
