#!/usr/bin/env python3
"""A listener duplicated (dup, fcntl F_DUPFD, dup2), the server accepting on the last duplicate
only: twice, first with the original still open (the copies in between closed), then with the
original closed too. Each time the connection must be upgraded (the client was told it would
be), so the application reads the client's stream and never its MPA request; the last
duplicate keeps answering the question after the original is closed.

Usage: sockets-dup-listener.py serve PORT | send HOST PORT MIB
Both print the SHA-256 of the two streams together, for the caller to compare.
"""
import fcntl
import hashlib
import os
import socket

from sockets_ends import connect, main

LAST = 99


def read_all(c):
    chunks = []
    while d := c.recv(1 << 16):
        chunks.append(d)
    c.sendall(b"k")
    c.close()
    return b"".join(chunks)


def serve(port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.listen(1)
    a = os.dup(s.fileno())
    b = fcntl.fcntl(a, fcntl.F_DUPFD, 50)
    os.dup2(b, LAST)
    os.close(a)
    os.close(b)
    last = socket.socket(fileno=LAST)
    first = read_all(last.accept()[0])
    s.close()
    second = read_all(last.accept()[0])
    print(f"serve: read {len(first)} and {len(second)} octets through the third duplicate of the listener")
    print(hashlib.sha256(first + second).hexdigest())


def send(host, port, mib):
    data = os.urandom(int(mib * (1 << 20)))
    half = len(data) // 2
    for part in (data[:half], data[half:]):
        c = connect(host, port)
        c.sendall(part)
        c.shutdown(socket.SHUT_WR)
        c.recv(1)
        c.close()
    print(f"send: {len(data)} octets over two connections")
    print(hashlib.sha256(data).hexdigest())


if __name__ == "__main__":
    main(send, serve=serve)
