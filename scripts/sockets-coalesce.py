#!/usr/bin/env python3
"""Separate small writes over the sockets preload library, coalesced while TCP is backlogged:
the sender makes writes of 100 octets as fast as it can, over a link slower than that (the
caller limits it), with a send buffer of 16 KiB. The library says at close how many data messages carried them
(IWARP_SOCKETS_LOG), for the caller to compare with the writes.

Usage: sockets-coalesce.py serve PORT | send HOST PORT MIB (a fraction will do)
Both print the SHA-256 of the stream they read or sent, for the caller to compare.
"""
import hashlib
import os
import socket

from sockets_ends import connect, main, serve_hashed

WRITE = 100
SNDBUF = 16 << 10


def send(host, port, mib):
    data = os.urandom(int(mib * (1 << 20)))
    # A small send buffer, so that TCP holds messages back while the link is busy (Linux
    # would otherwise grow it to megabytes and take each message at once).
    def prepare(c):
        c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SNDBUF)
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    c = connect(host, port, prepare)
    for at in range(0, len(data), WRITE):
        c.sendall(data[at : at + WRITE])
    c.shutdown(socket.SHUT_WR)
    c.recv(1)
    print(f"send: {len(data)} octets in writes of {WRITE}")
    print(hashlib.sha256(data).hexdigest())


if __name__ == "__main__":
    main(send, serve=serve_hashed)
