#!/usr/bin/env python3
"""A server that closes as soon as its last write returns, as many programs do (no shutdown, no
waiting for the client): everything written must still arrive, as over TCP. On a slow link the
server's last octets are still on the way after its close while the client, reading, hands
credits back (its library's own messages, which the program never asked for). The client first
sends many small writes, as a request.

Usage: sockets-close.py serve PORT | send HOST PORT MIB
Three connections one after another: the client sends lines and "END", the server answers MIB
of random octets and closes. Both ends print the SHA-256 of all the server sent.
"""
import hashlib
import os
import select
import socket

from sockets_ends import connect, main

ROUNDS = 3
LINES = 2000
END = b"END\n"


def serve(port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.listen(1)
    h = hashlib.sha256()
    for i in range(ROUNDS):
        c = s.accept()[0]
        got = b""
        while not got.endswith(END):
            d = c.recv(1 << 16)
            if not d:
                raise SystemExit("serve: the request ended early")
            got += d
        size = int(got.split(b"\n")[0])
        data = os.urandom(size)
        h.update(data)
        c.sendall(data)
        c.close()
        print(f"serve: connection {i}: read {len(got)} octets, wrote {size} and closed", flush=True)
    print(h.hexdigest())


def send(host, port, mib):
    h, size = hashlib.sha256(), int(mib * (1 << 20))
    for i in range(ROUNDS):
        c = connect(host, port)
        c.sendall(b"%d\n" % size)
        for n in range(LINES):
            c.sendall(b"%099d\n" % n)
        c.sendall(END)
        n = 0
        while True:
            select.select([c], [], [])
            d = c.recv(1 << 16)
            if not d:
                break
            h.update(d)
            n += len(d)
        c.close()
        print(f"send: connection {i}: read {n} of {size} octets", flush=True)
    print(h.hexdigest())


if __name__ == "__main__":
    main(send, serve=serve)
