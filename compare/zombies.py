#!/usr/bin/env python3
"""Zombie members under at-least-once: Weir and Kafka Streams 4.4 through outages.

    compare/run.sh zombies [--runs N] [--fault cut|stop] [--instances 2 --threads 3] [...]
    (as root; or "$(scripts/pyenv.sh)" compare/zombies.py --weir-bin DIR --ks-classpath CP ...)

The first report Weir answers: after a network partition a stream thread is
dropped from its group but goes on processing and writing state, while the
task's new owner writes too, and the final state is wrong. This replays it on
a real Apache Kafka 4.4 cluster (three nodes, started here) with the word count
of both implementations (compare/kafka-streams and Weir's `wordcount`
example, the same command line) under at-least-once:

- every instance runs in a network namespace of its own, joined to the
  brokers by a bridge (each broker on an address of its own), so the harness
  can cut one instance off from the group coordinator only: a blackhole
  route in its namespace drops its packets to the coordinator's address
  (this kernel has no `tc` queueing disciplines), while the other brokers (partition
  leaders among them) stay reachable. `--fault stop` instead freezes the
  instance (SIGSTOP) and thaws it (SIGCONT);
- a feeder writes lines at --rate per second (librdkafka, in the harness);
- --outages times, an instance (in turn) is cut off, or frozen, for the
  session timeout (10 s) plus --margin seconds, then restored; the next
  outage follows --gap seconds later;
- then the feed stops, the output drains, and a judge reads the store's
  changelog (`<app>-counts-changelog`) and the output topic from their start
  with librdkafka: for each word the values, in offset order, must never go
  down (a decrease is a lost update: two writers of one changelog partition),
  and the last one must be at least the word's true count. Both are read
  read_committed: Weir's at-least-once writes go in transactions that fence
  a task's previous owner, and a store restores only committed records.
  Decreasing counts in the output are reported but are no verdict:
  at-least-once lets records processed again emit their counts again.

Prints per run the decreases and short final counts found in the changelog
and the output, and a summary per implementation: in how many runs state was
corrupted. Needs root (network namespaces); exit status 1 if a Weir run was
corrupted or any run could not finish. Kafka Streams' corruption is reported,
not failed: it is what the comparison shows.
"""

import os
import random
import shutil
import signal
import struct
import subprocess
import tempfile
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from common import Fail, Feeder, Instances, create_topics, implementations, logger, parser, run_main, write_json

SESSION_S = 10
NET = "10.78.0"
BRIDGE = "wzbr0"
BROKER_IPS = [f"{NET}.11", f"{NET}.12", f"{NET}.13"]
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


log = logger("zombies")


def sh(*cmd, check=True):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise Fail(f"{' '.join(cmd)}: {r.stderr.strip() or r.returncode}")
    return r


class Network:
    """A bridge with one address per broker, and a namespace per instance."""

    def __init__(self, instances):
        self.instances = instances
        self.cut_to = {}

    def ns(self, i):
        return f"wz-i{i}"

    def dev(self, i):
        return f"wzv{i}p"

    def up(self):
        self.down()
        sh("ip", "link", "add", BRIDGE, "type", "bridge")
        sh("ip", "addr", "add", f"{NET}.1/24", "dev", BRIDGE)
        for ip in BROKER_IPS:
            sh("ip", "addr", "add", f"{ip}/24", "dev", BRIDGE)
        sh("ip", "link", "set", BRIDGE, "up")
        for i in range(self.instances):
            ns, outer, inner = self.ns(i), f"wzv{i}", self.dev(i)
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
            sh("ip", "link", "set", outer, "master", BRIDGE)
            sh("ip", "link", "set", outer, "up")
            sh("ip", "link", "set", inner, "netns", ns)
            sh("ip", "-n", ns, "addr", "add", f"{NET}.{100 + i}/24", "dev", inner)
            sh("ip", "-n", ns, "link", "set", inner, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")

    def cut(self, i, ip):
        # A blackhole route: packets to the coordinator are dropped in the
        # namespace (new connections fail at once), the rest flows.
        sh("ip", "-n", self.ns(i), "route", "add", "blackhole", f"{ip}/32")
        self.cut_to[i] = ip

    def heal(self, i):
        ip = self.cut_to.pop(i, None)
        if ip:
            sh("ip", "-n", self.ns(i), "route", "del", "blackhole", f"{ip}/32", check=False)

    def down(self):
        for i in range(self.instances):
            sh("ip", "netns", "del", self.ns(i), check=False)
            sh("ip", "link", "del", f"wzv{i}", check=False)
        sh("ip", "link", "del", BRIDGE, check=False)


def read_all(bootstrap, topic, group):
    """Every record of `topic` from its start to its end, per partition in
    offset order: (partition, offset, key, value bytes)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "isolation.level": "read_committed"})
    md = c.list_topics(topic, timeout=30).topics[topic]
    parts = sorted(md.partitions)
    ends = {}
    for p in parts:
        _, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
        ends[p] = hi
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
    out = []
    # Done when every position reached its end, or (transaction markers are
    # never delivered, so a position may stop short of the end) when nothing
    # came for 3 s.
    deadline = time.time() + 120
    quiet_since = time.time()
    while time.time() < deadline:
        batch = c.consume(num_messages=1000, timeout=0.5)
        for m in batch:
            if m.error():
                continue
            out.append((m.partition(), m.offset(), (m.key() or b"").decode("utf-8", "replace"), m.value()))
        if batch:
            quiet_since = time.time()
        positions = c.position([TopicPartition(topic, p) for p in parts])
        if all(tp.offset >= ends[tp.partition] for tp in positions) or time.time() - quiet_since > 3:
            c.close()
            return out
    c.close()
    raise Fail(f"could not read {topic} to its end within 120 s")


def judge(records, decode, truth, what):
    """Decreases per word in offset order, and words whose last value is
    short of the truth."""
    last = {}
    decreases = []
    for partition, offset, key, raw in sorted(records, key=lambda r: (r[0], r[1])):
        if raw is None:
            continue
        value = decode(raw)
        if value is None:
            continue
        if key in last and value < last[key][0]:
            decreases.append(f"{what} {key}: {last[key][0]} at {partition}@{last[key][1]} then {value} at {offset}")
        last[key] = (value, offset)
    short = [f"{what} {w}: final {last.get(w, (0,))[0]} < true {n}" for w, n in truth.items()
             if last.get(w, (0,))[0] < n]
    return decreases, short


def be_long(raw):
    return struct.unpack(">q", raw)[0] if len(raw) == 8 else None


def decimal(raw):
    try:
        return int(raw.decode())
    except ValueError:
        return None


def coordinator_ip(admin, group):
    """The address of `group`'s coordinator."""
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            d = admin.describe_consumer_groups([group], request_timeout=10)[group].result()
            if d.coordinator is not None:
                return d.coordinator.host
        except Exception:  # the group may not be known yet
            pass
        time.sleep(0.5)  # poll interval of a bounded wait for the group
    raise Fail(f"no coordinator found for {group}")


def run_once(args, impl, number, bootstrap, net):
    suffix = f"{impl}-{os.getpid()}-{number}-{int(time.time())}"
    names = {"lines": f"zombie-lines-{suffix}", "counts": f"zombie-counts-{suffix}", "app": f"zombie-wc-{suffix}"}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    create_topics(admin, [names["lines"], names["counts"]], args.partitions)
    work = tempfile.mkdtemp(prefix=f"weir-zombies-{impl}.")

    def flags(i):
        return ["--bootstrap", bootstrap, "--application-id", names["app"],
                "--state-dir", os.path.join(work, f"i{i}"), "--input", names["lines"],
                "--output", names["counts"], "--guarantee", "at-least-once", "--threads", str(args.threads),
                "--instance-id", f"i{i}", "-X", f"session.timeout.ms={SESSION_S * 1000}",
                "-X", "commit.interval.ms=1000"]

    inst = Instances(args, impl, "wordcount", work, flags, prefix=lambda i: ["ip", "netns", "exec", net.ns(i)])
    feeder = Feeder(bootstrap, names["lines"], args.rate, seed=number)
    rng = random.Random(number)
    outages = []
    try:
        for i in range(args.instances):
            inst.start(i)
        for i in range(args.instances):
            inst.wait_running(i)
        feeder.start()
        time.sleep(args.baseline)  # steady state before the first outage
        coord = coordinator_ip(admin, names["app"])
        for k in range(args.outages):
            i = (k + rng.randrange(args.instances)) % args.instances
            if args.fault == "cut":
                net.cut(i, coord)
            else:
                inst.signal(i, signal.SIGSTOP)
            outages.append(f"i{i} {args.fault} {SESSION_S + args.margin:.0f} s")
            time.sleep(SESSION_S + args.margin)  # the outage: past the session timeout
            if args.fault == "cut":
                net.heal(i)
            else:
                inst.signal(i, signal.SIGCONT)
            time.sleep(args.gap)  # recovery before the next outage
        feeder.stop.set()
        feeder.join()
        if feeder.errors:
            raise Fail(f"the feeder could not write: {feeder.errors[:3]}")
        # Drain: until every word's count in the output reaches the truth, or a bound.
        deadline = time.time() + args.drain
        while time.time() < deadline:
            out = read_all(bootstrap, names["counts"], f"judge-{suffix}")
            _, short = judge(out, decimal, feeder.words, "output")
            if not short:
                break
            time.sleep(2)  # poll interval of a bounded drain
        inst.close_all()
        changelog = read_all(bootstrap, f"{names['app']}-counts-changelog", f"judge-cl-{suffix}")
        output = read_all(bootstrap, names["counts"], f"judge-out-{suffix}")
    finally:
        feeder.stop.set()
        for i in range(args.instances):
            net.heal(i)
        inst.close_all()
        if os.environ.get("WEIR_KEEP_WORK"):
            log(f"logs kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    d1, s1 = judge(changelog, be_long, feeder.words, "changelog")
    d2, s2 = judge(output, decimal, feeder.words, "output")
    # The verdict is the state's: the committed changelog. An output count
    # that goes down is reported too, but at-least-once allows it (records
    # processed again after a failover emit their counts again).
    return {"impl": impl, "run": number, "outages": outages, "words": sum(feeder.words.values()),
            "changelog_records": len(changelog), "decreases": d1, "short": s1,
            "output_decreases": d2, "output_short": s2, "corrupted": bool(d1 or s1)}


def main():
    ap = parser(__doc__, bootstrap=False)
    ap.add_argument("--fault", choices=["cut", "stop"], default="cut")
    ap.add_argument("--instances", type=int, default=2)
    ap.add_argument("--threads", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--rate", type=int, default=200)
    ap.add_argument("--outages", type=int, default=3)
    ap.add_argument("--margin", type=float, default=5.0, help="seconds an outage outlasts the session")
    ap.add_argument("--gap", type=float, default=10.0)
    ap.add_argument("--baseline", type=float, default=5.0)
    ap.add_argument("--drain", type=float, default=90.0)
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise Fail("needs root: every instance runs in a network namespace of its own")
    impls = implementations(args, "wordcount")
    net = Network(args.instances)
    run_dir = tempfile.mkdtemp(prefix="zombies-kafka.", dir=os.path.join(REPO, ".weir-kafka"))
    env = dict(os.environ, WEIR_KAFKA_RUN_DIR=run_dir)
    results = []
    try:
        net.up()
        out = subprocess.run([os.path.join(REPO, "scripts", "kafka.sh"), "start", "--nodes", "3",
                              "--listen-ips", ",".join(BROKER_IPS)], env=env, capture_output=True, text=True)
        if out.returncode != 0:
            raise Fail(f"could not start Kafka: {out.stderr.strip().splitlines()[-1:]}")
        bootstrap = out.stdout.strip().removeprefix("KAFKA_BOOTSTRAP=")
        log(f"Kafka at {bootstrap}; instances in namespaces {[net.ns(i) for i in range(args.instances)]}")
        for number in range(1, args.runs + 1):
            order = impls if number % 2 else list(reversed(impls))
            for impl in order:
                log(f"run {number}/{args.runs}: {impl}, {args.fault}")
                r = run_once(args, impl, number, bootstrap, net)
                results.append(r)
                verdict = "CORRUPTED" if r["corrupted"] else "intact"
                print(f"run {number} {impl:13} {verdict}: changelog {len(r['decreases'])} decreases, "
                      f"{len(r['short'])} short final counts (output: {len(r['output_decreases'])} "
                      f"decreases, {len(r['output_short'])} short); {r['words']} words, "
                      f"{r['changelog_records']} changelog records; outages {r['outages']}", flush=True)
                for line in (r["decreases"] + r["short"] + r["output_decreases"])[:5]:
                    print(f"    {line}")
    finally:
        subprocess.run([os.path.join(REPO, "scripts", "kafka.sh"), "stop"], env=env, capture_output=True)
        shutil.rmtree(run_dir, ignore_errors=True)
        net.down()
    print()
    print(f"| {args.fault}, {args.instances} instances x {args.threads} threads, at-least-once | runs | corrupted |")
    print("|---|---|---|")
    for impl in impls:
        rs = [r for r in results if r["impl"] == impl]
        print(f"| {impl} | {len(rs)} | {sum(r['corrupted'] for r in rs)} |")
    write_json(args, results)
    return 1 if any(r["corrupted"] for r in results if r["impl"] == "weir") else 0


if __name__ == "__main__":
    run_main(main, "zombies")
