#!/usr/bin/env python3
"""A connection inherited through fork (the sockets preload library's fork rule): the process
that uses it first owns it. With `serve`, the child serves it; the parent's copy must then fail
cleanly (EIO), and the parent's close must leave the child's connection working. With `stale`,
the parent uses it first and forks again: the first child's copy, out of date since, must fail
too, even though the second fork leaves the connection open to a claim.

Usage: sockets-fork.py serve|stale PORT | send HOST PORT MIB
Both print the SHA-256 of the stream they read or sent, for the caller to compare.
"""
import errno
import hashlib
import os
import socket
import sys

from sockets_ends import accept_one, main, read_hashed


def serve(port):
    c = accept_one(port)
    used_r, used_w = os.pipe()
    closed_r, closed_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(used_r)
        os.close(closed_w)
        d = c.recv(1 << 16)
        os.write(used_w, b"u")
        # The rest only once the parent has tried its copy and closed it.
        os.read(closed_r, 1)
        n, digest = read_hashed(c, d)
        c.sendall(b"k")
        print(f"child: read {n} octets, the parent's copy closed", flush=True)
        print(digest, flush=True)
        c.close()
        os._exit(0)
    os.close(used_w)
    os.close(closed_r)
    os.read(used_r, 1)
    try:
        c.recv(16)
        print("parent: read from the child's connection, which must fail", flush=True)
        ok = False
    except OSError as e:
        ok = e.errno == errno.EIO
        print(f"parent: reading its copy failed: {e}", flush=True)
    c.close()
    os.write(closed_w, b"c")
    _, status = os.waitpid(pid, 0)
    if not ok or status != 0:
        print(f"parent: failed (child's status {status})")
        sys.exit(1)


def stale(port):
    c = accept_one(port)
    go_r, go_w = os.pipe()
    first = os.fork()
    if first == 0:
        os.close(go_w)
        os.read(go_r, 1)
        try:
            c.recv(16)
            print("first child: read from a copy out of date, which must fail", flush=True)
            os._exit(1)
        except OSError as e:
            print(f"first child: reading its out-of-date copy failed: {e}", flush=True)
            os._exit(0 if e.errno == errno.EIO else 1)
    os.close(go_r)
    d = c.recv(1 << 16)
    second = os.fork()
    if second == 0:
        os._exit(0)
    os.waitpid(second, 0)
    # The connection is open to a claim by this process or the second child, not the first.
    os.write(go_w, b"g")
    _, status = os.waitpid(first, 0)
    n, digest = read_hashed(c, d)
    c.sendall(b"k")
    print(f"parent: read {n} octets after both forks")
    print(digest)
    if status != 0:
        print(f"parent: the first child's copy did not fail cleanly (status {status})")
        sys.exit(1)


def send(host, port, mib):
    data = os.urandom(mib << 20)
    c = socket.create_connection((host, port))
    c.sendall(data)
    c.shutdown(socket.SHUT_WR)
    if c.recv(1) != b"k":
        print("send: the server's child did not answer")
        sys.exit(1)
    print(hashlib.sha256(data).hexdigest())


if __name__ == "__main__":
    main(send, serve=serve, stale=stale)
