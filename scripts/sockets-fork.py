#!/usr/bin/env python3
"""A connection inherited through fork (the sockets preload library's fork rule): the child's
copy must fail cleanly (EIO) and its close must leave the parent's connection working.

Usage: sockets-fork.py serve PORT | send HOST PORT MIB
Both print the SHA-256 of the stream they read or sent, for the caller to compare.
"""
import errno
import hashlib
import os
import socket
import sys
import time


def serve(port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.listen(1)
    c, _ = s.accept()
    pid = os.fork()
    if pid == 0:
        try:
            c.recv(16)
            print("child: read from the inherited connection, which must fail", flush=True)
            os._exit(1)
        except OSError as e:
            ok = e.errno == errno.EIO
            print(f"child: reading the inherited connection failed: {e}", flush=True)
        c.close()
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        print("parent: the child's copy did not fail cleanly")
        sys.exit(1)
    h, n = hashlib.sha256(), 0
    while True:
        d = c.recv(1 << 16)
        if not d:
            break
        h.update(d)
        n += len(d)
    print(f"parent: read {n} octets after the child closed its copy")
    print(h.hexdigest())


def send(host, port, mib):
    data = os.urandom(mib << 20)
    c = socket.create_connection((host, port))
    time.sleep(1)
    c.sendall(data)
    c.shutdown(socket.SHUT_WR)
    c.recv(1)
    print(hashlib.sha256(data).hexdigest())


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(int(sys.argv[2]))
    else:
        send(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
