#!/usr/bin/env python3
"""The server for iwarp-check's sockets-liar (tools/iwarp-check/src/sockets_liar.rs), through
the sockets library: accepts COUNT connections from the liar, one per case, and reads each to
its end. Each must deliver the liar's honest first message and nothing after it (not the lie's
octets, nor those of the message after the lie), then end: ECONNRESET, or EOF if the stream
had ended before the lie. Prints one line per connection; exits 1 if any was wrong.

Usage: sockets-liar.py PORT COUNT
"""
import socket
import sys

from sockets_ends import listening

# The liar's honest first Write (its FIRST).
FIRST = b"the only octets this stream may deliver: the liar's honest first Write"


def read_to_end(c):
    """All `c` delivers, and how it ended."""
    got = b""
    c.settimeout(30)
    while True:
        try:
            d = c.recv(4096)
        except ConnectionResetError:
            return got, "ECONNRESET"
        except OSError as e:
            return got, f"error {e}"
        if not d:
            return got, "EOF"
        got += d


def main(port, count):
    s = listening(port)
    wrong = 0
    for i in range(count):
        c = s.accept()[0]
        got, end = read_to_end(c)
        c.close()
        good = got == FIRST and end in ("ECONNRESET", "EOF")
        wrong += not good
        print(f"{'ok' if good else 'WRONG'}: connection {i + 1}: {len(got)} octets "
              f"({'the honest message' if got == FIRST else repr(got[len(FIRST) - 8:])}), then {end}")
    sys.exit(1 if wrong else 0)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
