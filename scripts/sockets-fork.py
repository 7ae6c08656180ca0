#!/usr/bin/env python3
"""A connection shared by processes through fork, as TCP's is: each process may use it, and the
last one to close it ends it.

`split`: at each end, a forked child writes its stream (the client's MIB MiB, the server's 4)
while the parent reads the peer's (a file sync tool's reader and writer), both at once. The server's writer shuts its direction down and
closes its copy; the client's exits without closing. Each end prints `ROLE sent HASH` and
`ROLE read HASH`.

`turns`: the server's parent and child read the client's stream in turn, a read each, and
reassemble it in order; then the parent closes its copy and the child answers on the
connection and closes it last. The client must then read the answer and a clean end, not a
reset. Each end prints the hash of the stream.

Usage: sockets-fork.py split|turns PORT | send HOST PORT MIB split|turns
"""
import hashlib
import os
import random
import socket
import struct
import sys

from sockets_ends import accept_one, connect, main


def stream(seed, mib):
    """`mib` MiB from a seeded generator: different in each direction, so that a process that
    read its own writes would be caught."""
    return random.Random(seed).randbytes(mib << 20)


def split(c, role, seed, mib):
    """Forks a writer of `mib` MiB (seed `seed`), reads the peer's stream in the parent; prints
    both hashes."""
    pid = os.fork()
    if pid == 0:
        data = stream(seed, mib)
        c.sendall(data)
        c.shutdown(socket.SHUT_WR)
        print(f"{role} sent {hashlib.sha256(data).hexdigest()}", flush=True)
        if role == "server":
            c.close()
        os._exit(0)
    h, n = hashlib.sha256(), 0
    while d := c.recv(1 << 16):
        h.update(d)
        n += len(d)
    _, status = os.waitpid(pid, 0)
    print(f"{role} read {h.hexdigest()} ({n} octets; the writer's status {status})", flush=True)
    c.close()
    if status != 0:
        sys.exit(1)


def serve_split(port):
    split(accept_one(port), "server", 2, 4)


def serve_turns(port):
    c = accept_one(port)
    to_child_r, to_child_w = os.pipe()
    to_parent_r, to_parent_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(to_child_w)
        os.close(to_parent_r)
        # Each turn: wait for the parent's go, read once, hand the chunk back (empty: the end).
        while os.read(to_child_r, 1) == b"g":
            d = c.recv(1 << 16)
            os.write(to_parent_w, struct.pack("<I", len(d)))
            while d:
                d = d[os.write(to_parent_w, d):]
        # The parent has closed its copy: the connection is still this process's.
        c.sendall(b"k")
        c.close()
        os._exit(0)
    os.close(to_child_r)
    os.close(to_parent_w)
    parent_in = os.fdopen(to_parent_r, "rb")
    h, n, turns, ended = hashlib.sha256(), 0, [0, 0], False
    while not ended:
        for who in (0, 1):
            if who == 0:
                d = c.recv(1 << 16)
            else:
                os.write(to_child_w, b"g")
                (k,) = struct.unpack("<I", parent_in.read(4))
                d = parent_in.read(k)
            if not d:
                ended = True
                break
            turns[who] += 1
            h.update(d)
            n += len(d)
    c.close()
    os.write(to_child_w, b"e")
    _, status = os.waitpid(pid, 0)
    print(f"server: read {n} octets, {turns[0]} reads in the parent and {turns[1]} in the child")
    print(h.hexdigest())
    if status != 0 or min(turns) == 0:
        print(f"server: failed (child's status {status})")
        sys.exit(1)


def send(host, port, mib, mode):
    c = connect(host, port)
    if mode == "split":
        split(c, "client", 1, mib)
        return
    data = stream(1, mib)
    c.sendall(data)
    c.shutdown(socket.SHUT_WR)
    # The answer, then a clean end (a reset raises).
    if c.recv(1) != b"k" or c.recv(1) != b"":
        print("send: the server's child did not answer and close")
        sys.exit(1)
    print(hashlib.sha256(data).hexdigest())


if __name__ == "__main__":
    main(send, split=serve_split, turns=serve_turns)
