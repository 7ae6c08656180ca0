#!/usr/bin/env bash
# The latency statistics of a sockperf ping-pong's full log (--full-log FILE), over its first N
# exchanges, as iwarp-bench and perftest compute theirs: "count median mean p99" in
# microseconds, one way (half the round trip, sockperf's "latency" column).
# Usage: sockperf-lat.sh FILE N
set -euo pipefail
awk -F', *' -v n="$2" '/^[0-9]+, / && taken++ < n { print $4 }' "$1" | sort -g |
    awk '{ v[n++] = $1; s += $1 } END { if (n) printf "%d %.1f %.1f %.1f\n", n, v[int(n / 2)], s / n, v[int(n * 99 / 100)] }'
