#!/usr/bin/env python3
"""Answers whether a Kafka broker is really serving, using only the standard library.

A TCP connect only proves that something listens; this sends an ApiVersions v0
request and checks that a well-formed response with our correlation id and
error code 0 comes back. It runs before any venv exists (broker.sh start), so
it must not import anything outside the standard library.

Usage: kafka_ping.py HOST:PORT [--timeout SECONDS]
Exit status: 0 the broker answered, 1 it did not (reason on stderr).
"""

import argparse
import socket
import struct
import sys

API_VERSIONS = 18
CORRELATION_ID = 0x5745_4952  # "WEIR": any value works, a distinctive one eases packet reading.
CLIENT_ID = b"weir-ping"
# An ApiVersions response lists ~60 APIs at 6 bytes each; anything far larger is not Kafka.
MAX_RESPONSE = 64 * 1024


def request_bytes():
    # Request header v1: api_key, api_version, correlation_id, client_id (int16-prefixed).
    body = struct.pack(">hhih", API_VERSIONS, 0, CORRELATION_ID, len(CLIENT_ID)) + CLIENT_ID
    return struct.pack(">i", len(body)) + body


def read_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(buf)} of {n} bytes")
        buf.extend(chunk)
    return bytes(buf)


def ping(host, port, timeout):
    """Returns the number of APIs the broker advertises; raises on anything else."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(request_bytes())
        (size,) = struct.unpack(">i", read_exact(sock, 4))
        if size < 10 or size > MAX_RESPONSE:
            raise ValueError(f"implausible response size {size}")
        payload = read_exact(sock, size)
        correlation_id, error_code, api_count = struct.unpack(">ihi", payload[:10])
        if correlation_id != CORRELATION_ID:
            raise ValueError(f"correlation id {correlation_id:#x}, expected {CORRELATION_ID:#x}")
        if error_code != 0:
            raise ValueError(f"ApiVersions error code {error_code}")
        if api_count <= 0 or 10 + 6 * api_count > size:
            raise ValueError(f"implausible api count {api_count} in {size} bytes")
        return api_count


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("address", help="HOST:PORT")
    parser.add_argument("--timeout", type=float, default=1.0)
    args = parser.parse_args()
    host, _, port = args.address.rpartition(":")
    host = host.strip("[]")  # an IPv6 literal arrives as [::1]:9092
    try:
        count = ping(host or "127.0.0.1", int(port), args.timeout)
    except (OSError, ValueError) as err:
        print(f"kafka_ping: {args.address}: {err}", file=sys.stderr)
        return 1
    print(f"kafka_ping: {args.address} answered ApiVersions with {count} APIs", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
