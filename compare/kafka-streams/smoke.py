#!/usr/bin/env python3
"""The independent side of smoke.sh: inputs produced and outputs judged with librdkafka
(confluent-kafka), never with Kafka Streams or Weir. Run it with the python from
scripts/pyenv.sh.

  smoke.py BOOTSTRAP topics NAME:PARTITIONS...       create topics
  smoke.py BOOTSTRAP produce APP BATCH TOPIC          produce batch 1 or 2 of APP's input
  smoke.py BOOTSTRAP expect APP BATCH                 how many outputs batches 1..BATCH give
  smoke.py BOOTSTRAP wait TOPIC COUNT ISOLATION SECS [KEY]
                                                      wait until COUNT records (and one keyed
                                                      KEY) are readable
  smoke.py BOOTSTRAP check LABEL APP GUARANTEE APP_ID OUT LOG
                                                      judge the run, one line per check
  smoke.py BOOTSTRAP group-left GROUP                  exit 0 if the (classic) group has no
                                                      member left, printing its state
  smoke.py BOOTSTRAP cleanup PREFIX                   delete the topics named PREFIX*

Each check prints one line, "ok   ..." or "FAIL ..."; exit status 1 if any failed.
"""

import os
import struct
import sys
import time
from collections import defaultdict

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

# Rust's char::is_whitespace (Unicode White_Space), which Weir's split_whitespace uses.
RUST_WHITESPACE = set(chr(c) for c in [*range(0x09, 0x0E), 0x20, 0x85, 0xA0, 0x1680,
                                        *range(0x2000, 0x200B), 0x2028, 0x2029, 0x202F,
                                        0x205F, 0x3000])

# Record timestamps: near now (smoke.sh passes its start time), as windows and changelog
# retention (time-based for window stores) expect real time.
BASE_TS = int(os.environ.get("SMOKE_BASE_TS") or 0) or int(time.time() * 1000)

# (key, value, timestamp) per app and batch; bytes values are sent as they are, None is null.
WORDCOUNT = {
    1: [None, "the quick brown fox", "The lazy dog", "the end\tTHE  fox", "   ",
        "Ünïcode ÜNÏCODE straße", "nbsp\u00a0split\u2003em", None, b"\xff\xfe not utf-8 fox"],
    2: ["fox fox the", "DOG"],
}
DEDUP = {
    1: [("c1", "ok"), ("c2", "ok"), ("c3", "ok"), ("c4", "ok"), ("c5", "ok")],
    # the marked command first, then re-sends of c1 and c2, and a new command
    2: [("m1", "boom FAIL"), ("c1", "ok"), ("c2", "ok"), ("c6", "ok")],
}
DEPLOY_KEYS = [f"w{n}" for n in range(24)]
DEPLOY = {
    1: [(k, None) for _ in range(3) for k in DEPLOY_KEYS] + [(None, "no key: skipped")],
    2: [(k, "x") for k in DEPLOY_KEYS],
}


def records(app, batch):
    """The batch's records as (key, value, timestamp)."""
    offset = 0 if batch == 1 else 1000
    if app == "wordcount":
        rows = [(None, v) for v in WORDCOUNT[batch]]
    elif app == "dedup":
        rows = DEDUP[batch]
    else:
        rows = DEPLOY[batch]
    return [(k, v, BASE_TS + offset + i) for i, (k, v) in enumerate(rows)]


def encode(x):
    return x.encode() if isinstance(x, str) else x


def rust_words(line):
    out, word = [], []
    for ch in line:
        if ch in RUST_WHITESPACE:
            if word:
                out.append("".join(word))
                word = []
        else:
            word.append(ch)
    if word:
        out.append("".join(word))
    return [w.lower() for w in out]


def admin(bootstrap):
    return AdminClient({"bootstrap.servers": bootstrap})


def cmd_topics(bootstrap, specs):
    new = []
    for spec in specs:
        name, parts = spec.rsplit(":", 1)
        new.append(NewTopic(name, num_partitions=int(parts), replication_factor=-1))
    a = admin(bootstrap)
    for _name, fut in a.create_topics(new, operation_timeout=30).items():
        fut.result()
    return 0


def cmd_produce(bootstrap, app, batch, topic):
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    errors = []
    for k, v, ts in records(app, int(batch)):
        p.produce(topic, key=encode(k), value=encode(v), timestamp=ts,
                  on_delivery=lambda err, _m: err and errors.append(err))
    left = p.flush(30)
    if left or errors:
        print(f"smoke.py: produce to {topic} failed: {left} undelivered, errors {errors[:3]}",
              file=sys.stderr)
        return 1
    return 0


def read_all(bootstrap, topic, isolation, timeout=30.0):
    """Every readable record of `topic` (up to each partition's end), as Message objects."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "smoke-reader",
                  "enable.auto.commit": False, "isolation.level": isolation,
                  "fetch.wait.max.ms": 50, "enable.partition.eof": False})
    try:
        md = c.list_topics(topic, timeout=10).topics.get(topic)
        if md is None or md.error is not None:
            raise KafkaException(f"no topic {topic}")
        tps = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(md.partitions)]
        ends = {}
        for tp in tps:
            _, high = c.get_watermark_offsets(tp, timeout=10, cached=False)
            ends[tp.partition] = high
        c.assign(tps)
        out = []
        pos = {tp.partition: 0 for tp in tps}
        deadline = time.time() + timeout
        while any(pos[p] < ends[p] for p in pos) and time.time() < deadline:
            for m in c.consume(500, timeout=0.2):
                if m.error():
                    continue
                pos[m.partition()] = m.offset() + 1
                if m.offset() < ends[m.partition()]:
                    out.append(m)
            # under read_committed the end is the LSO; markers leave gaps, so also trust position()
            for tp in c.position([TopicPartition(topic, p) for p in pos]):
                if tp.offset >= 0:
                    pos[tp.partition] = max(pos[tp.partition], tp.offset)
        return out, len(md.partitions)
    finally:
        c.close()


def cmd_wait(bootstrap, topic, count, isolation, secs, key=None):
    deadline = time.time() + float(secs)
    n = -1
    while time.time() < deadline:
        try:
            msgs, _ = read_all(bootstrap, topic, isolation, timeout=10)
            n = len(msgs)
            if n >= int(count) and (key is None or any(m.key() == key.encode() for m in msgs)):
                return 0
        except KafkaException:
            pass
        time.sleep(0.5)
    print(f"smoke.py: {topic}: {n} of {count} records after {secs} s", file=sys.stderr)
    return 1


class Checks:
    def __init__(self, label):
        self.label = label
        self.failed = 0

    def line(self, ok, what):
        print(f"{'ok  ' if ok else 'FAIL'} {self.label}: {what}", flush=True)
        if not ok:
            self.failed += 1


def by_key(msgs):
    seen = defaultdict(list)
    for m in msgs:
        seen[m.key().decode() if m.key() is not None else None].append(
            m.value().decode() if m.value() is not None else None)
    return dict(seen)


def long_be(b):
    return struct.unpack(">q", b)[0] if b is not None and len(b) == 8 else None


def show(d, n=4):
    items = sorted(d.items(), key=lambda kv: str(kv[0]))[:n]
    return ", ".join(f"{k}={v}" for k, v in items) + (" ..." if len(d) > n else "")


def diff(got, want):
    keys = sorted(set(got) | set(want), key=str)
    bad = [f"{k}: got {got.get(k)} want {want.get(k)}" for k in keys if got.get(k) != want.get(k)]
    return "; ".join(bad[:4])


def check_wordcount(ch, bootstrap, app_id, out, isolation):
    words = []
    for batch in (1, 2):
        for _k, v, _ts in records("wordcount", batch):
            if isinstance(v, str):
                words.extend(rust_words(v))
    n = defaultdict(int)
    want = defaultdict(list)
    for w in words:
        n[w] += 1
        want[w].append(str(n[w]))
    got = by_key(read_all(bootstrap, out, isolation)[0])
    ch.line(got == dict(want),
            f"output exact: {len(words)} words, per word the counts 1..n in order "
            f"(nbsp/em-space split, null and non-UTF-8 lines skipped)"
            + ("" if got == dict(want) else f" -- {diff(got, dict(want))}"))
    changelog = f"{app_id}-counts-changelog"
    msgs, _ = read_all(bootstrap, changelog, isolation)
    last = {m.key().decode(): long_be(m.value()) for m in msgs}
    want_last = {w: c for w, c in n.items()}
    ok = len(msgs) == len(words) and last == want_last
    ch.line(ok, f"{changelog}: {len(msgs)} records (one per word: no cache), last values "
                f"8-byte big-endian counts" + ("" if ok else f" -- want {len(words)}; {diff(last, want_last)}"))
    repart = f"{app_id}-by-word-repartition"
    try:
        _, parts = read_all(bootstrap, repart, isolation, timeout=5)
        ch.line(parts == 3, f"{repart} exists with {parts} partitions (as the input)")
    except KafkaException as e:
        ch.line(False, f"{repart}: {e}")


def check_dedup(ch, bootstrap, app_id, out, isolation, guarantee, log):
    got = by_key(read_all(bootstrap, out, isolation)[0])
    try:
        text = open(log, encoding="utf-8", errors="replace").read()
    except OSError:
        text = ""
    failures = text.count("dedup: stream thread failed, replacing it")
    ch.line(failures == 1 and "command m1: validation failed" in text,
            f"the fail marker made processing throw once (thread replaced {failures} time(s))")
    if guarantee == "exactly-once":
        want = {"c1": ["accepted", "duplicate"], "c2": ["accepted", "duplicate"],
                "c3": ["accepted"], "c4": ["accepted"], "c5": ["accepted"],
                "m1": ["accepted"], "c6": ["accepted"]}
        ch.line(got == want, "verdicts exact (read_committed): every command accepted once, "
                             "only the re-sends c1 c2 duplicate, m1 accepted after its failure"
                + ("" if got == want else f" -- {diff(got, want)}"))
        changelog = f"{app_id}-seen-changelog"
        msgs, _ = read_all(bootstrap, changelog, isolation)
        keys = sorted(m.key()[:-12].decode(errors="replace") for m in msgs)
        want_keys = ["c1", "c2", "c3", "c4", "c5", "c6", "m1"]
        ok = keys == want_keys
        ch.line(ok, f"{changelog}: one committed put per accepted command ({len(msgs)}; the "
                    f"aborted put of m1 not among them)" + ("" if ok else f" -- got {keys}"))
    else:
        first = {k: v[:1] for k, v in got.items() if k in ("c1", "c2", "c3", "c4", "c5")}
        ok1 = first == {k: ["accepted"] for k in ("c1", "c2", "c3", "c4", "c5")}
        ok2 = all("duplicate" in got.get(k, [])[1:] for k in ("c1", "c2"))
        ok3 = all(got.get(k) for k in ("m1", "c6"))
        ch.line(ok1 and ok2 and ok3,
                "verdicts: batch 1 accepted, the re-sends c1 c2 flagged duplicate, m1 and c6 "
                f"answered (m1: {got.get('m1')}, c6: {got.get('c6')}; at-least-once: Kafka "
                "Streams keeps the put of a failed record, see README)"
                + ("" if ok1 and ok2 and ok3 else f" -- got {show(got, 8)}"))


def check_deploy(ch, bootstrap, app_id, out, isolation):
    recs = [r for b in (1, 2) for r in records("deploy", b) if r[0] is not None]
    n = defaultdict(int)
    want = defaultdict(list)
    last_ts = {}
    for k, _v, ts in recs:
        n[k] += 1
        want[k].append(str(n[k]))
        last_ts[k] = ts
    msgs, parts = read_all(bootstrap, out, isolation)
    got = by_key(msgs)
    ch.line(got == dict(want), f"output exact: {len(recs)} records, {len(n)} keys on {parts} "
                               "partitions, per key the counts 1..n (null key skipped)"
            + ("" if got == dict(want) else f" -- {diff(got, dict(want))}"))
    results = []
    ok_all = True
    for store, want_last in (("counts", dict(n)), ("last-seen", last_ts), ("total", None)):
        topic = f"{app_id}-{store}-changelog"
        cl, _ = read_all(bootstrap, topic, isolation)
        if want_last is None:
            per_part = {}
            for m in cl:
                per_part[m.partition()] = long_be(m.value())
            ok = len(cl) == len(recs) and sum(per_part.values()) == len(recs) and \
                all(m.key() == b"all" for m in cl)
        else:
            last = {m.key().decode(): long_be(m.value()) for m in cl}
            ok = len(cl) == len(recs) and last == want_last
        ok_all &= ok
        results.append(f"{store} {len(cl)}")
    ch.line(ok_all, f"changelogs one record per input record (no cache), last values right: "
                    f"{', '.join(results)} (want {len(recs)} each; total summed over tasks)")


def cmd_check(bootstrap, label, app, guarantee, app_id, out, log):
    isolation = "read_committed" if guarantee == "exactly-once" else "read_uncommitted"
    ch = Checks(label)
    try:
        if app == "wordcount":
            check_wordcount(ch, bootstrap, app_id, out, isolation)
        elif app == "dedup":
            check_dedup(ch, bootstrap, app_id, out, isolation, guarantee, log)
        else:
            check_deploy(ch, bootstrap, app_id, out, isolation)
    except KafkaException as e:
        ch.line(False, f"reading: {e}")
    return 1 if ch.failed else 0


def expected_outputs(app, batch):
    """How many output records the batches up to `batch` give (both guarantees, no failure)."""
    total = 0
    for b in range(1, int(batch) + 1):
        for k, v, _ts in records(app, b):
            if app == "wordcount":
                total += len(rust_words(v)) if isinstance(v, str) else 0
            elif app == "deploy":
                total += 1 if k is not None else 0
            else:
                total += 1
    return total


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    bootstrap, cmd, rest = argv[1], argv[2], argv[3:]
    if cmd == "topics":
        return cmd_topics(bootstrap, rest)
    if cmd == "produce":
        return cmd_produce(bootstrap, *rest)
    if cmd == "expect":
        print(expected_outputs(*rest))
        return 0
    if cmd == "wait":
        return cmd_wait(bootstrap, *rest)
    if cmd == "check":
        return cmd_check(bootstrap, *rest)
    if cmd == "group-left":
        a = admin(bootstrap)
        try:
            g = a.describe_consumer_groups([rest[0]])[rest[0]].result()
        except KafkaException as e:
            print(f"cannot describe the group: {e}")
            return 1
        print(f"group state {g.state.name}, {len(g.members)} member(s)")
        return 0 if not g.members else 1
    if cmd == "cleanup":
        a = admin(bootstrap)
        names = [t for t in a.list_topics(timeout=10).topics if t.startswith(rest[0])]
        for _t, fut in (a.delete_topics(names, operation_timeout=30).items() if names else []):
            try:
                fut.result()
            except KafkaException:
                pass
        return 0
    print(f"smoke.py: unknown command {cmd}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
