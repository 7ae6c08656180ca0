#!/usr/bin/env python3
"""Gathering writes over the sockets preload library: sendfile(2) from a file, both at given
offsets and from the file's own offset, and sendmsg(2) with many small vectors.

Usage: sockets-gather.py serve PORT | send HOST PORT MIB
Both print the SHA-256 of the stream they read or sent, for the caller to compare.
"""
import hashlib
import os
import signal
import socket
import sys
import tempfile

from sockets_ends import connect, main, serve_hashed



def send(host, port, mib):
    data = os.urandom(mib << 20)
    half = len(data) // 2
    with tempfile.TemporaryFile() as f:
        f.write(data)
        f.flush()
        c = connect(host, port)
        # The first half by offset (socket.sendfile calls os.sendfile with one).
        sent = c.sendfile(f, offset=0, count=half)
        # The next quarter from the file's own offset, which must advance.
        f.seek(half)
        quarter = len(data) // 4
        at = 0
        while at < quarter:
            at += os.sendfile(c.fileno(), f.fileno(), None, quarter - at)
        moved = f.tell() - half
        # The rest as sendmsg with 1 KiB vectors, 64 per call.
        rest = memoryview(data)[half + quarter :]
        for i in range(0, len(rest), 64 << 10):
            block = rest[i : i + (64 << 10)]
            vecs = [block[j : j + 1024] for j in range(0, len(block), 1024)]
            n = c.sendmsg(vecs)
            if n != len(block):
                c.sendall(block[n:])
    c.shutdown(socket.SHUT_WR)
    # A write after the end fails with EPIPE and raises SIGPIPE, unless MSG_NOSIGNAL, as TCP's.
    pipes = []
    signal.signal(signal.SIGPIPE, lambda *_: pipes.append(1))
    for flags in (0, socket.MSG_NOSIGNAL):
        try:
            c.send(b"x", flags)
            sys.exit("send: a write after shutdown went")
        except BrokenPipeError:
            pass
    c.recv(1)
    print(f"send: after shutdown, EPIPE twice and {len(pipes)} SIGPIPE (want 1)")
    print(f"send: {sent} octets by sendfile at offsets, {at} from the file's offset (which moved {moved}), {len(rest)} by sendmsg")
    print(hashlib.sha256(data).hexdigest())
    if sent != half or moved != quarter or len(pipes) != 1:
        print("send: sendfile's counts, the file's offset or SIGPIPE are wrong")
        sys.exit(1)


if __name__ == "__main__":
    main(send, serve=serve_hashed)
