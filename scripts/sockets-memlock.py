#!/usr/bin/env python3
"""A client whose RLIMIT_MEMLOCK holds one upgraded connection's buffers, and no more, opens
two connections at once to a hash server (each answers with the SHA-256 of what it got): the
library upgrades the first and leaves the second plain TCP (it does not ask), and both carry
their data intact.

Usage: sockets-memlock.py HOST PORT
Prints "sent HASH got HASH" per connection."""
import hashlib
import os
import socket
import sys

from sockets_ends import connect


def main(host, port):
    conns = [connect(host, port) for _ in range(2)]
    for c in conns:
        data = os.urandom(1 << 20)
        c.sendall(data)
        c.shutdown(socket.SHUT_WR)
        got = b""
        while d := c.recv(1 << 16):
            got += d
        print(f"sent {hashlib.sha256(data).hexdigest()} got {got[:64].decode()}", flush=True)
        c.close()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
