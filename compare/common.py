"""What the comparison scenarios share: the application processes of either
implementation, the feeder of word-count input, and how a scenario script ends.

Weir's examples and the Kafka Streams apps of compare/kafka-streams take the
same command line, so a scenario builds the flags once and `Instances` runs
them as one implementation or the other.
"""

import argparse
import collections
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time

from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

WORDS = "kafka stream state store commit offset fence zombie rust weir river task".split()
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# Weir's instance logs `to=Running`; the Kafka Streams apps `state X -> RUNNING`.
RUNNING = re.compile(r"to=Running|-> RUNNING")
# The Java app of each Weir example.
KS_MAIN = {"wordcount": "dev.weir.compare.WordCount", "dedup": "dev.weir.compare.Dedup",
           "deploy": "dev.weir.compare.Deploy"}


class Fail(Exception):
    """A run that could not finish: one line, exit status 1."""


def parser(doc, bootstrap=True, java_opts="-Xmx256m -XX:+UseG1GC"):
    """The flags every scenario takes; the scenario adds its own."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    if bootstrap:
        ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--weir-bin", help="cargo's target/<profile> holding examples/")
    ap.add_argument("--ks-classpath", help="classpath of compare/kafka-streams (its build.sh prints it)")
    ap.add_argument("--impls", default="weir,kafka-streams")
    ap.add_argument("--runs", type=int, default=1, help="rounds; each runs every implementation once")
    ap.add_argument("--java-opts", default=java_opts)
    ap.add_argument("--json", help="write every run here")
    return ap


def implementations(args, app):
    """The --impls list, checked: Weir's needs its example `app` built, Kafka
    Streams' its classpath."""
    impls = [i.strip() for i in args.impls.split(",") if i.strip()]
    for impl in impls:
        if impl not in ("weir", "kafka-streams"):
            raise Fail(f"unknown implementation {impl!r} (weir, kafka-streams)")
    if "weir" in impls and not (args.weir_bin and os.access(
            os.path.join(args.weir_bin, "examples", app), os.X_OK)):
        raise Fail(f"--weir-bin DIR must hold examples/{app} (cargo build -p weir-streams --examples)")
    if "kafka-streams" in impls and not args.ks_classpath:
        raise Fail("--ks-classpath is needed for kafka-streams (compare/kafka-streams/build.sh prints it)")
    return impls


def create_topics(admin, topics, partitions):
    for f in admin.create_topics([NewTopic(t, partitions) for t in topics]).values():
        f.result()


def write_json(args, results):
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "runs": results}, f)


def logger(prefix):
    def log(msg):
        print(f"{prefix}: {msg}", file=sys.stderr, flush=True)
    return log


def run_main(main, prefix):
    """Runs a scenario's main: its exit status, or 1 with one line for a Fail."""
    try:
        sys.exit(main())
    except Fail as e:
        logger(prefix)(f"FAIL {e}")
        sys.exit(1)


class Feeder(threading.Thread):
    """Writes lines of 1 to 3 words at a steady rate with librdkafka; each
    record's timestamp is its production time."""

    def __init__(self, bootstrap, topic, rate, seed):
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all",
                                  "enable.idempotence": True})
        self.topic, self.rate = topic, rate
        self.rng = random.Random(seed)
        self.words = collections.Counter()
        self.stop = threading.Event()
        self.errors = []

    def run(self):
        interval = 1.0 / self.rate
        next_at = time.time()
        while not self.stop.is_set():
            line = " ".join(self.rng.choice(WORDS) for _ in range(self.rng.randint(1, 3)))
            self.words.update(line.split())
            self.producer.produce(self.topic, value=line.encode(),
                                  on_delivery=lambda err, _m: err and self.errors.append(err))
            self.producer.poll(0)
            next_at += interval
            time.sleep(max(0.0, next_at - time.time()))  # the feeder's pace
        self.producer.flush(30)


class Instances:
    """The processes of one application, of one implementation: instance i
    runs `flags(i)` as Weir's example `app` or as its Kafka Streams twin,
    with `prefix` before the command (e.g. `ip netns exec NS`)."""

    def __init__(self, args, impl, app, work, flags, prefix=None):
        self.args, self.impl, self.app, self.work = args, impl, app, work
        self.flags, self.prefix = flags, prefix or (lambda i: [])
        self.procs = {}
        self.starts = collections.Counter()

    def command(self, i):
        if self.impl == "weir":
            return [os.path.join(self.args.weir_bin, "examples", self.app)] + self.flags(i)
        return ["java", *self.args.java_opts.split(), "-cp", self.args.ks_classpath,
                KS_MAIN[self.app]] + self.flags(i)

    def start(self, i):
        self.starts[i] += 1
        path = os.path.join(self.work, f"{self.impl}-i{i}.{self.starts[i]}.log")
        p = subprocess.Popen(self.prefix(i) + self.command(i), stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=open(path, "w"),
                             env=dict(os.environ, NO_COLOR="1"))
        self.procs[i] = (p, path)

    def wait_running(self, i, limit=120.0):
        p, path = self.procs[i]
        deadline = time.time() + limit
        while time.time() < deadline:
            if p.poll() is not None:
                raise Fail(f"{self.impl} i{i} exited {p.returncode} while starting (see {path})")
            with open(path, errors="replace") as f:
                if RUNNING.search(ANSI.sub("", f.read())):
                    return
            time.sleep(0.05)  # poll interval of a bounded wait on another process's log
        raise Fail(f"{self.impl} i{i} did not reach RUNNING within {limit:.0f} s (see {path})")

    def signal(self, i, sig):
        self.procs[i][0].send_signal(sig)

    def stop(self, i, sig):
        """Sends `sig` and waits for the exit; a SIGTERM must give exit 0."""
        p, path = self.procs[i]
        p.send_signal(sig)
        rc = p.wait(timeout=120)
        if sig == signal.SIGTERM and rc != 0:
            raise Fail(f"{self.impl} i{i} exited {rc} after SIGTERM (see {path})")

    def kill_all(self):
        for p, _ in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()

    def close_all(self):
        """SIGTERM to every live instance (thawed first), SIGKILL past 70 s."""
        for p, _ in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.terminate()
        for p, _ in self.procs.values():
            try:
                p.wait(timeout=70)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
