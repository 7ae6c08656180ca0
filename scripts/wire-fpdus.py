#!/usr/bin/env python3
"""Checks on the wire that FPDUs start TCP segments: reads a capture (classic pcap, Ethernet)
of iWARP connections on PORT without markers, with CRCs, and for every TCP segment that carries
data after the MPA exchange, walks the FPDUs from its first octet by their length fields. A
segment is aligned when it holds whole FPDUs only: the walk ends exactly at its end.

Usage: wire-fpdus.py PCAP PORT MIN-PERCENT [SENDER MIN-PERCENT]
Prints the counts, in all and per sending address, and exits 1 if fewer than MIN-PERCENT of the
data segments are aligned, or (with SENDER, an IPv4 address) fewer than its own MIN-PERCENT of
the segments SENDER sent: one stack of two held to more than the pair.
"""
import ipaddress
import struct
import sys

from pcap import tcp_payloads


def whole_fpdus(payload):
    """Whether `payload` is whole FPDUs (CRC on, no markers), walked from its first octet."""
    off = 0
    while off + 2 <= len(payload):
        ulpdu = struct.unpack(">H", payload[off:off + 2])[0]
        off += (2 + ulpdu + 3) // 4 * 4 + 4
    return off == len(payload)


def share(counts):
    segments, aligned = counts
    return 100.0 * aligned / segments if segments else 0.0


def main(path, port, min_percent, sender=None, sender_min=None):
    mpa = 0
    by_sender = {}
    for flow, payload in tcp_payloads(path, int(port)):
        if payload.startswith(b"MPA ID Re"):
            mpa += 1
            continue
        counts = by_sender.setdefault(str(ipaddress.IPv4Address(flow[0])), [0, 0])
        counts[0] += 1
        counts[1] += whole_fpdus(payload)
    total = [sum(c[0] for c in by_sender.values()), sum(c[1] for c in by_sender.values())]
    print(f"{path}: {total[0]} data segments in {len(by_sender)} directions after {mpa} MPA frames; "
          f"{total[1]} hold whole FPDUs from their first octet ({share(total):.1f} %, at least {min_percent} % required)")
    ok = total[0] > 0 and share(total) >= float(min_percent)
    for addr, counts in sorted(by_sender.items()):
        need = f", at least {sender_min} % required" if addr == sender else ""
        print(f"  from {addr}: {counts[0]} data segments, {counts[1]} whole ({share(counts):.1f} %{need})")
    if sender is not None:
        ok = ok and sender in by_sender and share(by_sender[sender]) >= float(sender_min)
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) not in (4, 6):
        sys.exit(__doc__)
    sys.exit(main(*sys.argv[1:]))
