#!/usr/bin/env python3
"""A rolling deploy of the `wordcount` example as real processes.

    scripts/rolling_deploy_procs.py [--instances 3] [--rate 100] [--bin DIR]

Starts `weir-testkit serve` (3 brokers), or with --bootstrap uses the Kafka
cluster there (topic and application names then carry a unique suffix),
creates the topics with the `weir` CLI, and runs N `wordcount` processes (exactly-once, 2 threads, 1 standby,
static instance ids, each on its own state directory). A feeder writes
lines at a steady rate through `weir produce` (each record's timestamp is
its production time); an independent `weir consume --isolation
read_committed` reads the counts, whose timestamps are their input's, so
the latency of every output is the wall clock at its arrival minus its
timestamp.

Once the output flows, each instance in turn gets SIGTERM (a graceful
close: it must exit 0), and a new process starts on the same directory and
instance id; the next one goes once it logs RUNNING and a settle time has
passed. Prints the worst latency before, during and after the deploy, per
output partition, the close and restart times, then checks exactly-once:
one output record per input word and every word's last count its recount.
Exit status 0 if every check passed. Builds nothing: pass --bin (default
target/debug, after `cargo build -p weir-testkit -p weir-cli -p
weir-streams --examples`).
"""

import argparse
import collections
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

WORDS = "kafka stream state store commit offset fence zombie rust weir river task".split()
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def log(msg):
    print(f"rolling_deploy: {msg}", file=sys.stderr, flush=True)


class Fail(Exception):
    pass


class Consumer(threading.Thread):
    """Reads `partition<TAB>timestamp<TAB>key<TAB>value` lines and notes each
    record's latency at arrival."""

    def __init__(self, proc):
        super().__init__(daemon=True)
        self.proc = proc
        self.lock = threading.Lock()
        self.records = []  # (arrival ms, partition, latency ms, key, value)

    def run(self):
        for line in self.proc.stdout:
            now = time.time() * 1000
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 4:
                continue
            p, ts, k, v = parts
            with self.lock:
                self.records.append((now, int(p), now - int(ts), k, v))

    def snapshot(self):
        with self.lock:
            return list(self.records)


def worst(records, start, end):
    """The largest latency per partition among records that arrived in
    [start, end)."""
    out = collections.defaultdict(float)
    for at, p, lat, _, _ in records:
        if start <= at < end:
            out[p] = max(out[p], lat)
    return dict(out)


def print_timeline(records, start, events):
    """Per second since the feed started: records arrived, median and worst
    latency, and what the deploy did in that second."""
    buckets = collections.defaultdict(list)
    for arrival, _, latency, _, _ in records:
        buckets[int((arrival - start) // 1000)].append(latency)
    marks = collections.defaultdict(list)
    for at, what in events:
        marks[int((at - start) // 1000)].append(what)
    print("| second | records | median latency | worst | deploy |")
    print("|---|---|---|---|---|")
    for second in range(0, max(buckets) + 1 if buckets else 0):
        lat = sorted(buckets.get(second, []))
        med = f"{lat[len(lat) // 2]:.0f} ms" if lat else "-"
        top = f"{lat[-1]:.0f} ms" if lat else "-"
        print(f"| {second} | {len(lat)} | {med} | {top} | {', '.join(marks.get(second, []))} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--instances", type=int, default=3)
    ap.add_argument("--rate", type=int, default=100, help="input lines per second")
    ap.add_argument("--settle", type=float, default=5.0, help="seconds after RUNNING before the next restart")
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(__file__), "..", "target", "debug"))
    ap.add_argument("--bootstrap", help="an existing cluster (e.g. Apache Kafka) instead of weir-testkit")
    ap.add_argument("--timeline", action="store_true",
                    help="also print, per second of arrival, the median and worst latency and the events")
    args = ap.parse_args()
    bin_dir = os.path.abspath(args.bin)
    weir = os.path.join(bin_dir, "weir")
    wordcount = os.path.join(bin_dir, "examples", "wordcount")
    testkit = os.path.join(bin_dir, "weir-testkit")
    for b in (weir, wordcount) + (() if args.bootstrap else (testkit,)):
        if not os.access(b, os.X_OK):
            raise Fail(f"{b} is not built")

    work = tempfile.mkdtemp(prefix="weir-rolling.")
    procs = []
    try:
        if args.bootstrap:
            bootstrap = args.bootstrap
            # A shared cluster: names no earlier run used.
            suffix = f"-{os.getpid()}-{int(time.time())}"
            log(f"the cluster at {bootstrap}")
        else:
            kit = subprocess.Popen([testkit, "serve", "--port", "0", "--brokers", "3"],
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=open(os.path.join(work, "testkit.log"), "w"), text=True)
            procs.append(kit)
            bootstrap = kit.stdout.readline().strip()
            if not bootstrap:
                raise Fail("weir-testkit printed no address")
            suffix = ""
            log(f"weir-testkit at {bootstrap}")
        env = dict(os.environ, KAFKA_BOOTSTRAP=bootstrap, NO_COLOR="1")
        lines_topic, counts_topic, app_id = f"lines{suffix}", f"counts{suffix}", f"wc{suffix}"
        for t in (lines_topic, counts_topic):
            subprocess.run([weir, "topics", "create", t, "-p", "6"], env=env, check=True,
                           stdout=subprocess.DEVNULL)

        logs = {}

        def start(i):
            name = f"i{i}"
            path = os.path.join(work, f"{name}.{len([k for k in logs if k.startswith(name)])}.log")
            logs[os.path.basename(path)] = path
            p = subprocess.Popen(
                [wordcount, "--application-id", app_id, "--state-dir", os.path.join(work, name),
                 "--input", lines_topic, "--output", counts_topic, "--guarantee", "exactly-once",
                 "--threads", "2", "--standbys", "1", "--instance-id", name,
                 "-X", "commit.interval.ms=100", "-X", "session.timeout.ms=10000"],
                env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=open(path, "w"))
            procs.append(p)
            return p, path

        def wait_running(path, limit=60.0):
            # Each process logs to a file of its own.
            deadline = time.time() + limit
            while time.time() < deadline:
                with open(path) as f:
                    text = ANSI.sub("", f.read())
                if "to=Running" in text:
                    return
                time.sleep(0.05)  # poll interval of a bounded wait on another process's log
            raise Fail(f"{path} did not reach RUNNING within {limit:.0f} s")

        instances = {}
        for i in range(args.instances):
            instances[i] = start(i)
        for i, (_, path) in instances.items():
            wait_running(path)

        consumer_proc = subprocess.Popen(
            [weir, "consume", "-t", counts_topic, "--from-beginning", "--isolation", "read_committed",
             "-f", "%p\t%T\t%k\t%v"], env=env, stdout=subprocess.PIPE,
            stderr=open(os.path.join(work, "consumer.log"), "w"), text=True)
        procs.append(consumer_proc)
        consumer = Consumer(consumer_proc)
        consumer.start()

        feeder = subprocess.Popen([weir, "produce", "-t", lines_topic], env=env,
                                  stdin=subprocess.PIPE, stderr=open(os.path.join(work, "feeder.log"), "w"),
                                  text=True)
        procs.append(feeder)
        rng = random.Random(7)
        sent_words = collections.Counter()
        stop_feeding = threading.Event()

        def feed():
            interval = 1.0 / args.rate
            next_at = time.time()
            while not stop_feeding.is_set():
                line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3)))
                sent_words.update(line.split())
                feeder.stdin.write(line + "\n")
                feeder.stdin.flush()
                next_at += interval
                time.sleep(max(0.0, next_at - time.time()))  # the feeder's pace

        feeding = threading.Thread(target=feed, daemon=True)
        feed_start = time.time() * 1000
        events = []  # (ms, what), for --timeline
        feeding.start()

        time.sleep(10)  # steady state before the deploy: the baseline
        deploy_start = time.time() * 1000
        closes, restarts = [], []
        for i in range(args.instances):
            p, path = instances[i]
            t0 = time.time()
            events.append((t0 * 1000, f"SIGTERM i{i}"))
            p.send_signal(signal.SIGTERM)
            rc = p.wait(timeout=120)
            closes.append(time.time() - t0)
            if rc != 0:
                raise Fail(f"i{i} exited {rc} after SIGTERM (see {path})")
            t1 = time.time()
            instances[i] = start(i)
            wait_running(instances[i][1])
            restarts.append(time.time() - t1)
            events.append((t1 * 1000, f"i{i} exited, restarted"))
            events.append((time.time() * 1000, f"i{i} RUNNING"))
            log(f"i{i}: closed in {closes[-1]:.1f} s, running again {restarts[-1]:.1f} s after its restart")
            time.sleep(args.settle)  # the next instance goes once this one has settled
        deploy_end = time.time() * 1000
        time.sleep(10)  # after the deploy
        stop_feeding.set()
        feeding.join()
        feeder.stdin.close()
        if feeder.wait(timeout=60) != 0:
            raise Fail("weir produce failed (see feeder.log)")
        words = sum(sent_words.values())
        deadline = time.time() + 120
        while len(consumer.snapshot()) < words and time.time() < deadline:
            time.sleep(0.2)  # poll interval of a bounded wait for the consumer
        time.sleep(2)  # late duplicates, if any, would show up here
        records = consumer.snapshot()
        end = time.time() * 1000

        before = worst(records, 0, deploy_start)
        during = worst(records, deploy_start, deploy_end)
        after = worst(records, deploy_end, end)
        print(f"{args.instances} wordcount processes, {args.rate} lines/s, exactly-once, "
              f"commit.interval.ms=100, 1 standby; deploy {(deploy_end - deploy_start) / 1000:.1f} s "
              f"(settle {args.settle:.0f} s per instance)")
        print("| output partition | worst latency before | during the deploy | after |")
        print("|---|---|---|---|")
        for p in sorted(set(before) | set(during) | set(after)):
            print(f"| {p} | {before.get(p, 0):.0f} ms | {during.get(p, 0):.0f} ms | {after.get(p, 0):.0f} ms |")
        if args.timeline:
            print_timeline(records, feed_start, events)
        print("closes (SIGTERM to exit): " + ", ".join(f"{c:.1f} s" for c in closes))
        print("restarts (start to RUNNING): " + ", ".join(f"{r:.1f} s" for r in restarts))

        if len(records) != words:
            raise Fail(f"{len(records)} output records for {words} input words (exactly-once)")
        last = {}
        for _, _, _, k, v in records:
            last[k] = int(v)
        if last != dict(sent_words):
            raise Fail(f"last counts {sorted(last.items())} differ from the recount {sorted(sent_words.items())}")
        print(f"exactly-once: {words} output records for {words} words; every last count equals the recount")
        return 0
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.kill()
                p.wait()
        if os.environ.get("WEIR_KEEP_WORK"):
            log(f"logs kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Fail as e:
        log(f"FAIL {e}")
        sys.exit(1)
