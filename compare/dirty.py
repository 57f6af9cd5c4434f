#!/usr/bin/env python3
"""Dirty state after an aborted transaction: Weir and Kafka Streams 4.4 deduplicating commands.

    compare/run.sh dirty [--runs N] [--crash kill|term] [...]
    (or: "$(scripts/pyenv.sh)" compare/dirty.py --bootstrap B --weir-bin DIR --ks-classpath CP ...)

The second report Weir answers (KAFKA-9891, again as KAFKA-20685): under
exactly-once with a standby, a persistent store kept the write of an aborted
transaction, so a command was later flagged a duplicate although it had never
been accepted. This replays it with the `dedup` application of both
implementations (compare/kafka-streams and Weir's example, the same command
line): three instances, exactly-once, one standby of every task, a window
store of seen command ids.

Per run, on topics of its own:
1. the three instances start;
2. batch 1 of commands goes in: unique ids, some sent twice on purpose (a
   real re-send), and some whose payload holds the fail marker, so the
   application throws after the store's put, once per process and id
   (under exactly-once the put must be aborted with the transaction);
3. instance i0 is crashed (--crash kill: SIGKILL; term: SIGTERM), its
   tasks move to their standbys; batch 2 goes in, with fail markers too;
4. i0 starts again on its state directory, and after --settle seconds batch
   3 goes in (its tasks may move back once it has caught up);
5. a judge reads the output read_committed with librdkafka: every command
   id must have exactly one `accepted`, and `duplicate` only as often as it
   was really re-sent.

Prints per run the commands lost (flagged duplicate, never accepted),
accepted twice, and wrongly flagged; and per implementation in how many runs
the verdicts were exact. Exit status 1 if a Weir run was not exact or a run
could not finish.
"""

import collections
import os
import shutil
import signal
import tempfile
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from common import Fail, Instances, create_topics, implementations, logger, parser, run_main, write_json

MARKER = "BOOM"
log = logger("dirty")


def send(bootstrap, topic, batch):
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    errors = []
    for key, value in batch:
        p.produce(topic, key=key.encode(), value=value.encode(),
                  on_delivery=lambda err, _m: err and errors.append(err))
        p.poll(0)
    p.flush(60)
    if errors:
        raise Fail(f"could not send commands: {errors[:3]}")


def batch(number, size, resend_every, fail_every):
    """Commands of one batch: (id, payload); some ids twice (a real re-send)
    and some payloads with the fail marker."""
    out = []
    for n in range(size):
        cid = f"b{number}-c{n}"
        payload = f"pay {cid}" + (f" {MARKER}" if n % fail_every == 0 else "")
        out.append((cid, payload))
        if n % resend_every == 3:
            out.append((cid, payload))
    return out


def read_output(bootstrap, topic, partitions, expected, limit):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"judge-{topic}", "enable.auto.commit": False,
                  "isolation.level": "read_committed"})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out = []
    deadline = time.time() + limit
    while len(out) < expected and time.time() < deadline:
        for m in c.consume(num_messages=1000, timeout=0.2):
            if not m.error():
                out.append((m.key().decode(), m.value().decode()))
    late_until = time.time() + 2
    while time.time() < late_until:  # late extras, if any, would come now
        for m in c.consume(num_messages=1000, timeout=0.2):
            if not m.error():
                out.append((m.key().decode(), m.value().decode()))
    c.close()
    return out


def run_once(args, impl, number, admin):
    suffix = f"{impl}-{os.getpid()}-{number}-{int(time.time())}"
    names = {"in": f"dirty-in-{suffix}", "out": f"dirty-out-{suffix}", "app": f"dirty-{suffix}"}
    create_topics(admin, [names["in"], names["out"]], args.partitions)
    work = tempfile.mkdtemp(prefix=f"weir-dirty-{impl}.")

    def flags(i):
        return ["--bootstrap", args.bootstrap, "--application-id", names["app"],
                "--state-dir", os.path.join(work, f"i{i}"), "--input", names["in"], "--output", names["out"],
                "--guarantee", "exactly-once", "--threads", "1", "--standbys", "1", "--instance-id", f"i{i}",
                "--fail-marker", MARKER, "-X", "commit.interval.ms=100", "-X", "session.timeout.ms=10000"]

    app = Instances(args, impl, "dedup", work, flags)
    sent = []
    try:
        for i in range(3):
            app.start(i)
        for i in range(3):
            app.wait_running(i)
        b1 = batch(1, args.commands, 7, args.fail_every)
        send(args.bootstrap, names["in"], b1)
        sent += b1
        time.sleep(args.settle)  # batch 1 processed and its changelog on the standbys
        app.stop(0, signal.SIGKILL if args.crash == "kill" else signal.SIGTERM)
        b2 = batch(2, args.commands, 7, args.fail_every)
        send(args.bootstrap, names["in"], b2)
        sent += b2
        time.sleep(args.settle)  # batch 2 on the standbys that took over
        app.start(0)
        app.wait_running(0)
        time.sleep(args.settle)  # i0 catching up; its tasks may move back
        b3 = batch(3, args.commands, 7, args.fail_every)
        send(args.bootstrap, names["in"], b3)
        sent += b3
        outputs = read_output(args.bootstrap, names["out"], args.partitions, len(sent), args.drain)
    finally:
        app.close_all()
        admin.delete_topics([names["in"], names["out"]])
        if os.environ.get("WEIR_KEEP_WORK"):
            log(f"logs kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    times_sent = collections.Counter(cid for cid, _ in sent)
    verdicts = collections.defaultdict(collections.Counter)
    for cid, verdict in outputs:
        verdicts[cid][verdict] += 1
    lost = [c for c in times_sent if verdicts[c]["accepted"] == 0 and verdicts[c]["duplicate"] > 0]
    twice = [c for c in times_sent if verdicts[c]["accepted"] > 1]
    wrong_dup = [c for c in times_sent if verdicts[c]["duplicate"] > times_sent[c] - 1]
    missing = [c for c in times_sent if sum(verdicts[c].values()) < times_sent[c]]
    exact = not (lost or twice or wrong_dup or missing) and len(outputs) == len(sent)
    return {"impl": impl, "run": number, "commands": len(times_sent), "sent": len(sent),
            "outputs": len(outputs), "lost": lost, "accepted_twice": twice, "wrong_duplicates": wrong_dup,
            "missing": missing, "exact": exact}


def main():
    ap = parser(__doc__)
    ap.add_argument("--crash", choices=["kill", "term"], default="kill")
    ap.add_argument("--commands", type=int, default=60, help="unique commands per batch")
    ap.add_argument("--fail-every", type=int, default=30,
                    help="every Nth command of a batch carries the fail marker (Kafka Streams replaces its "
                         "thread, with a rebalance, at each)")
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--settle", type=float, default=8.0)
    ap.add_argument("--drain", type=float, default=180.0)
    args = ap.parse_args()
    impls = implementations(args, "dedup")
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    results = []
    for number in range(1, args.runs + 1):
        for impl in (impls if number % 2 else list(reversed(impls))):
            log(f"run {number}/{args.runs}: {impl}, crash by {args.crash}")
            r = run_once(args, impl, number, admin)
            results.append(r)
            print(f"run {number} {impl:13} {'exact' if r['exact'] else 'WRONG'}: {r['commands']} commands "
                  f"({r['sent']} sent, {r['outputs']} verdicts): {len(r['lost'])} lost (flagged duplicate, "
                  f"never accepted), {len(r['accepted_twice'])} accepted twice, {len(r['wrong_duplicates'])} "
                  f"wrongly flagged, {len(r['missing'])} without a verdict", flush=True)
            for key in ("lost", "accepted_twice", "wrong_duplicates", "missing"):
                if r[key]:
                    print(f"    {key}: {r[key][:8]}")
    print()
    print(f"| dedup, 3 instances, exactly-once, 1 standby, crash by {args.crash} | runs | exact |")
    print("|---|---|---|")
    for impl in impls:
        rs = [r for r in results if r["impl"] == impl]
        print(f"| {impl} | {len(rs)} | {sum(r['exact'] for r in rs)} |")
    write_json(args, results)
    return 1 if any(not r["exact"] for r in results if r["impl"] == "weir") else 0


if __name__ == "__main__":
    run_main(main, "dirty")
