#!/usr/bin/env python3
"""Sums up `ss -tinmH` samples (blocks ended by a line '==') of a benchmark run, for the busiest
TCP connection in them: cwnd over the samples (min / median / max) and, from its last sample,
what TCP's own counters say of why it was slow (reordering, time limited by the receive window
or the send buffer, retransmissions, RTT). Reads stdin, prints one line."""
import re
import statistics
import sys

FIELDS = ("reordering", "rwnd_limited", "sndbuf_limited", "retrans", "rtt", "unacked", "rcv_space", "skmem")


def connections(block):
    """(bytes moved, info line) per connection of one sample."""
    out = []
    for line in block:
        if "cwnd:" in line or "rcv_space:" in line:
            moved = sum(int(v) for v in re.findall(r"bytes_(?:acked|received):(\d+)", line))
            out.append((moved, line))
    return out


def main():
    blocks, cur = [], []
    for line in sys.stdin:
        if line.strip() == "==":
            blocks.append(cur)
            cur = []
        else:
            cur.append(line.strip())
    samples = [max(c) for c in map(connections, blocks) if c]
    if not samples:
        print("no sample of the connection")
        return
    cwnds = [int(m.group(1)) for _, line in samples if (m := re.search(r"\bcwnd:(\d+)", line))]
    last = samples[-1][1]
    got = []
    for f in FIELDS:
        m = re.search(r"\b%s:(\S+)" % f, last)
        if m:
            got.append("%s %s" % (f, m.group(1)))
    spread = "cwnd %d/%d/%d" % (min(cwnds), statistics.median(cwnds), max(cwnds)) if cwnds else "no cwnd"
    print("%s over %d samples; last: %s" % (spread, len(samples), ", ".join(got)))


if __name__ == "__main__":
    main()
