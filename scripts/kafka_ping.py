#!/usr/bin/env python3
"""Answers whether a Kafka broker is really serving, using only the standard library.

A TCP connect only proves that something listens; this sends an ApiVersions v0
request and checks that a well-formed response with our correlation id and
error code 0 comes back. It runs before any venv exists (broker.sh start), so
it must not import anything outside the standard library.

With --brokers N it also sends a Metadata v4 request for no topics and checks that
the cluster lists at least N brokers (a cluster is ready when every node does).

Usage: kafka_ping.py HOST:PORT [--timeout SECONDS] [--brokers N]
Exit status: 0 the broker answered, 1 it did not (reason on stderr).
"""

import argparse
import socket
import struct
import sys

API_VERSIONS = 18
METADATA = 3
CORRELATION_ID = 0x5745_4952  # "WEIR": any value works, a distinctive one eases packet reading.
CLIENT_ID = b"weir-ping"
# An ApiVersions response lists ~60 APIs at 6 bytes each; anything far larger is not Kafka.
MAX_RESPONSE = 64 * 1024


def read_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(buf)} of {n} bytes")
        buf.extend(chunk)
    return bytes(buf)


def roundtrip(host, port, timeout, body, min_size):
    """Sends one request body and returns the response payload, checked for our correlation id."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(struct.pack(">i", len(body)) + body)
        (size,) = struct.unpack(">i", read_exact(sock, 4))
        if size < min_size or size > MAX_RESPONSE:
            raise ValueError(f"implausible response size {size}")
        payload = read_exact(sock, size)
    (correlation_id,) = struct.unpack(">i", payload[:4])
    if correlation_id != CORRELATION_ID:
        raise ValueError(f"correlation id {correlation_id:#x}, expected {CORRELATION_ID:#x}")
    return payload


def ping(host, port, timeout):
    """Returns the number of APIs the broker advertises; raises on anything else."""
    # Request header v1: api_key, api_version, correlation_id, client_id (int16-prefixed).
    body = struct.pack(">hhih", API_VERSIONS, 0, CORRELATION_ID, len(CLIENT_ID)) + CLIENT_ID
    payload = roundtrip(host, port, timeout, body, 10)
    size = len(payload)
    error_code, api_count = struct.unpack(">hi", payload[4:10])
    if error_code != 0:
        raise ValueError(f"ApiVersions error code {error_code}")
    if api_count <= 0 or 10 + 6 * api_count > size:
        raise ValueError(f"implausible api count {api_count} in {size} bytes")
    return api_count


def metadata_broker_count(host, port, timeout):
    """Returns how many brokers a Metadata v4 response (no topics) lists."""
    # v4 is non-flexible and still served by Kafka 4.x (KIP-896 removed v0-3 only).
    body = struct.pack(">hhih", METADATA, 4, CORRELATION_ID, len(CLIENT_ID)) + CLIENT_ID
    body += struct.pack(">i?", 0, False)  # no topics, no auto-creation
    payload = roundtrip(host, port, timeout, body, 12)
    _throttle, brokers = struct.unpack(">ii", payload[4:12])
    return brokers


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("address", help="HOST:PORT")
    parser.add_argument("--timeout", type=float, default=1.0)
    parser.add_argument("--brokers", type=int, default=0, help="wait for at least N brokers")
    args = parser.parse_args()
    host, _, port = args.address.rpartition(":")
    host = host.strip("[]")  # an IPv6 literal arrives as [::1]:9092
    try:
        count = ping(host or "127.0.0.1", int(port), args.timeout)
        if args.brokers:
            listed = metadata_broker_count(host or "127.0.0.1", int(port), args.timeout)
            if listed < args.brokers:
                raise ValueError(f"Metadata lists {listed} of {args.brokers} brokers")
    except (OSError, ValueError) as err:
        print(f"kafka_ping: {args.address}: {err}", file=sys.stderr)
        return 1
    print(f"kafka_ping: {args.address} answered ApiVersions with {count} APIs", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
