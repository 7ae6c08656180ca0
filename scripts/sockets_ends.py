"""What the sockets tests' Python ends share (sockets-fork.py, -pollout.py, -gather.py): one
accepted connection, and a reader that hashes the whole stream."""
import hashlib
import socket
import time


def accept_one(port):
    """Listens on `port` and returns the first connection accepted."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.listen(1)
    return s.accept()[0]


def read_hashed(c, first=b"", pause=0.0):
    """Reads `c` to its end (after `first`, already read), pausing `pause` seconds after each
    read; returns (octets, SHA-256 hex digest)."""
    h, n, d = hashlib.sha256(), 0, first or c.recv(1 << 16)
    while d:
        h.update(d)
        n += len(d)
        if pause:
            time.sleep(pause)
        d = c.recv(1 << 16)
    return n, h.hexdigest()
