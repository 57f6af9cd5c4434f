#!/usr/bin/env python3
"""Starts librdkafka's mock cluster (a Kafka broker nobody here wrote) and prints its
bootstrap address as the first line of stdout; keeps it running until stdin closes or a
SIGTERM/SIGINT arrives, then destroys it and exits 0.

  scripts/interop/mock_cluster.py [--brokers N] [--topic NAME:PARTITIONS ...]

The cluster is started through ctypes from the librdkafka shared object that the
confluent-kafka wheel bundles (confluent_kafka.libs/librdkafka-*.so*, or one inside the
package directory): rd_kafka_new() makes a producer handle that owns the cluster,
rd_kafka_mock_cluster_new(rk, N) starts N mock brokers on loopback ports, and
rd_kafka_mock_cluster_bootstraps() gives their addresses. --topic creates a topic up front
with rd_kafka_mock_topic_create (the mock has no CreateTopics handler, and auto-creates
unknown topics on Metadata with its default partition count).

The mock answers ApiVersions v0 to v2 only (shared/NOTES.md §1), so a client that opens
with v3 must take the v0-format UNSUPPORTED_VERSION answer and retry lower.

Run it with the python from scripts/pyenv.sh. Exit status 1, with a message on stderr, if
the library or a symbol cannot be found or the cluster does not start.
"""

import argparse
import ctypes
import glob
import os
import signal
import sys
import threading

RD_KAFKA_PRODUCER = 0


def die(msg):
    print(f"mock_cluster: error: {msg}", file=sys.stderr)
    sys.exit(1)


def find_librdkafka():
    """The librdkafka bundled with confluent-kafka (not a system copy: that one may be old
    or built without the mock cluster)."""
    try:
        import confluent_kafka
    except ImportError as err:
        die(f"confluent-kafka not importable ({err}); run with the python from scripts/pyenv.sh")
    pkg = os.path.dirname(os.path.abspath(confluent_kafka.__file__))
    patterns = [
        os.path.join(os.path.dirname(pkg), "confluent_kafka.libs", "librdkafka*.so*"),
        os.path.join(pkg, "**", "librdkafka*.so*"),
        os.path.join(pkg, "**", "librdkafka*.dylib"),
    ]
    for pattern in patterns:
        found = sorted(glob.glob(pattern, recursive=True))
        if found:
            return found[0], confluent_kafka.libversion()[0]
    die(f"no librdkafka shared object next to {pkg} (looked for {patterns})")


def load(path):
    lib = ctypes.CDLL(path)
    sigs = {
        "rd_kafka_conf_new": ([], ctypes.c_void_p),
        "rd_kafka_conf_set": ([ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p,
                               ctypes.c_char_p, ctypes.c_size_t], ctypes.c_int),
        "rd_kafka_new": ([ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t],
                         ctypes.c_void_p),
        "rd_kafka_destroy": ([ctypes.c_void_p], None),
        "rd_kafka_mock_cluster_new": ([ctypes.c_void_p, ctypes.c_int], ctypes.c_void_p),
        "rd_kafka_mock_cluster_destroy": ([ctypes.c_void_p], None),
        "rd_kafka_mock_cluster_bootstraps": ([ctypes.c_void_p], ctypes.c_char_p),
        "rd_kafka_mock_set_apiversion": ([ctypes.c_void_p, ctypes.c_int16, ctypes.c_int16,
                                          ctypes.c_int16], ctypes.c_int),
        "rd_kafka_mock_topic_create": ([ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int,
                                        ctypes.c_int], ctypes.c_int),
    }
    for name, (argtypes, restype) in sigs.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            die(f"{path} has no symbol {name} (built without the mock cluster?)")
        fn.argtypes = argtypes
        fn.restype = restype
    return lib


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", type=int, default=1)
    parser.add_argument("--topic", action="append", default=[], metavar="NAME:PARTITIONS",
                        help="create this topic before printing the address (repeatable)")
    parser.add_argument("--api-versions", action="append", default=[],
                        metavar="KEY:MIN:MAX",
                        help="answer API KEY only for versions MIN..MAX (repeatable; for "
                             "diagnosis, e.g. 3:0:9 caps Metadata at v9)")
    args = parser.parse_args()

    path, version = find_librdkafka()
    lib = load(path)
    errstr = ctypes.create_string_buffer(512)
    conf = lib.rd_kafka_conf_new()
    # The handle only owns the mock cluster: it never connects anywhere itself.
    # log_level 4: no notice about the missing bootstrap.servers.
    for key, value in ((b"client.id", b"weir-mock-cluster"), (b"log_level", b"4")):
        if lib.rd_kafka_conf_set(conf, key, value, errstr, len(errstr)) != 0:
            die(f"rd_kafka_conf_set({key.decode()}): {errstr.value.decode()}")
    rk = lib.rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, len(errstr))
    if not rk:
        die(f"rd_kafka_new: {errstr.value.decode()}")
    mcluster = lib.rd_kafka_mock_cluster_new(rk, args.brokers)
    if not mcluster:
        die(f"rd_kafka_mock_cluster_new({args.brokers}) returned NULL")
    for spec in args.api_versions:
        try:
            key, lo, hi = (int(x) for x in spec.split(":"))
        except ValueError:
            die(f"--api-versions {spec!r}: expected KEY:MIN:MAX")
        if lib.rd_kafka_mock_set_apiversion(mcluster, key, lo, hi) != 0:
            die(f"rd_kafka_mock_set_apiversion({spec}) failed")
    for spec in args.topic:
        name, _, parts = spec.partition(":")
        err = lib.rd_kafka_mock_topic_create(mcluster, name.encode(), int(parts or 1), 1)
        if err != 0:
            die(f"rd_kafka_mock_topic_create({name}): error {err}")
    bootstraps = lib.rd_kafka_mock_cluster_bootstraps(mcluster)
    if not bootstraps:
        die("rd_kafka_mock_cluster_bootstraps returned NULL")

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())

    def watch_stdin():
        try:
            while sys.stdin.buffer.read(4096):
                pass
        except (OSError, ValueError):
            pass
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    print(bootstraps.decode(), flush=True)
    print(f"mock_cluster: librdkafka {version} ({os.path.basename(path)}): "
          f"{args.brokers} mock broker(s) at {bootstraps.decode()}", file=sys.stderr, flush=True)
    while not stop.wait(0.5):
        pass
    lib.rd_kafka_mock_cluster_destroy(mcluster)
    lib.rd_kafka_destroy(rk)
    return 0


if __name__ == "__main__":
    sys.exit(main())
