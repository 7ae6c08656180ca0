#!/usr/bin/env python3
"""Checks on the wire that FPDUs start TCP segments: reads a capture (classic pcap, Ethernet)
of iWARP connections on PORT without markers, with CRCs, and for every TCP segment that carries
data after the MPA exchange, walks the FPDUs from its first octet by their length fields. A
segment is aligned when it holds whole FPDUs only: the walk ends exactly at its end.

Usage: wire-fpdus.py PCAP PORT MIN-PERCENT
Prints the counts and exits 1 if fewer than MIN-PERCENT of the data segments are aligned.
"""
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


def main(path, port, min_percent):
    segments = aligned = mpa = 0
    flows = set()
    for flow, payload in tcp_payloads(path, int(port)):
        if payload.startswith(b"MPA ID Re"):
            mpa += 1
            continue
        flows.add(flow)
        segments += 1
        aligned += whole_fpdus(payload)
    share = 100.0 * aligned / segments if segments else 0.0
    print(f"{path}: {segments} data segments in {len(flows)} directions after {mpa} MPA frames; "
          f"{aligned} hold whole FPDUs from their first octet ({share:.1f} %, at least {min_percent} % required)")
    return 0 if segments and share >= float(min_percent) else 1


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    sys.exit(main(*sys.argv[1:]))
