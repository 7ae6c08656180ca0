"""What the sockets tests' Python ends share (sockets-fork.py, -pollout.py, -gather.py,
-zerocopy.py): one accepted connection, a reader that hashes the whole stream, and the command
line."""
import hashlib
import socket
import sys
import time


def listening(port):
    """A socket listening on `port`."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.listen(1)
    return s


def accept_one(port):
    """Listens on `port` and returns the first connection accepted."""
    return listening(port).accept()[0]


def connect(host, port, prepare=None):
    """Connects a new socket (given to `prepare` first, for options that must precede the
    connection), waiting up to 20 s for a listener (a server's start under TCG can take that):
    the clients start as soon as their server is asked to."""
    deadline = time.monotonic() + 20
    while True:
        c = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        if prepare:
            prepare(c)
        try:
            c.connect((host, port))
            return c
        except ConnectionRefusedError:
            c.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


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


def serve_hashed(port):
    """Reads the first connection accepted on `port` to its end; prints the count and the hash."""
    n, digest = read_hashed(accept_one(port))
    print(f"serve: read {n} octets")
    print(digest)


def main(send, **serves):
    """Runs the command line `NAME PORT`, NAME one of `serves` (a function of the port), or
    `send HOST PORT MIB [MORE...]`."""
    if sys.argv[1] == "send":
        send(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]) if "." in sys.argv[4] else int(sys.argv[4]), *sys.argv[5:])
    else:
        serves[sys.argv[1]](int(sys.argv[2]))
