#!/usr/bin/env bash
# Idempotent install of everything the project needs on a Debian 12 machine, from Debian's
# packages, crates.io and PyPI only. Prints each step. Safe to run again: it skips what is there.
set -euo pipefail

CACHE=${IWARP_CACHE:-/var/lib/iwarp}
RUST_WEB_VERSION=1.96.0+dfsg1-1~deb12u2
BINDGEN_VERSION=0.72.1
VIRTME_NG_VERSION=1.42
# The kernel source we pin; the newest 7.2.x is used (loudly) when this one is gone.
KERNEL_SOURCE_PIN=${KERNEL_SOURCE_PIN:-7.2.12}

say() { printf '==> setup: %s\n' "$*"; }
export DEBIAN_FRONTEND=noninteractive
mkdir -p "$CACHE"

if [ "$(id -u)" != 0 ]; then
    echo "setup: must run as root (apt-get, network namespaces, taps)" >&2
    exit 1
fi

# --- Debian packages -------------------------------------------------------------------------
HOST_PKGS=(
    "rustc-web=$RUST_WEB_VERSION" "libstd-rust-web-dev=$RUST_WEB_VERSION" "rust-web-src=$RUST_WEB_VERSION" "rust-web-clippy=$RUST_WEB_VERSION"
    clang-19 lld-19 llvm-19 libclang-19-dev
    flex bison bc libelf-dev libssl-dev cpio kmod make
    qemu-system-x86 iproute2
    rdma-core ibverbs-utils ibverbs-providers rdmacm-utils perftest qperf libibverbs-dev librdmacm-dev gcc
    iperf3 sockperf tcpdump tshark jq linux-perf socat nvme-cli fio
)
missing=()
for p in "${HOST_PKGS[@]}"; do
    name=${p%%=*}
    have=$(dpkg-query -W -f='${Status}|${Version}' "$name" 2>/dev/null || true)
    # Wanted: installed, and at the pinned version when one is given.
    if [ "${have%%|*}" != "install ok installed" ] || { [ "$p" != "$name" ] && [ "${have#*|}" != "${p#*=}" ]; }; then
        missing+=("$p")
    fi
done
if [ ${#missing[@]} -gt 0 ]; then
    say "apt-get install ${missing[*]}"
    apt-get update -qq
    echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
    say "Debian packages: all present"
fi

# --- bindgen (crates.io), in the cache so CI reuses it --------------------------------------
if [ -x "$CACHE/bindgen/bin/bindgen" ] && "$CACHE/bindgen/bin/bindgen" --version | grep -q "$BINDGEN_VERSION"; then
    say "bindgen $BINDGEN_VERSION: present"
else
    say "cargo install bindgen-cli $BINDGEN_VERSION"
    LIBCLANG_PATH=/usr/lib/llvm-19/lib cargo install --locked bindgen-cli --version "$BINDGEN_VERSION" --root "$CACHE/bindgen"
fi

# --- cargo-fuzz (crates.io), for the receive-engine fuzz target -----------------------------
CARGO_FUZZ_VERSION=0.13.2
if [ -x "$CACHE/cargo-fuzz/bin/cargo-fuzz" ]; then
    say "cargo-fuzz $CARGO_FUZZ_VERSION: present"
else
    say "cargo install cargo-fuzz $CARGO_FUZZ_VERSION"
    cargo install --locked cargo-fuzz --version "$CARGO_FUZZ_VERSION" --root "$CACHE/cargo-fuzz"
fi

# --- virtme-ng (PyPI) --------------------------------------------------------------------------
if command -v vng >/dev/null && vng --version 2>/dev/null | grep -q "$VIRTME_NG_VERSION"; then
    say "virtme-ng $VIRTME_NG_VERSION: present"
else
    say "pip install virtme-ng==$VIRTME_NG_VERSION"
    pip install -q "virtme-ng==$VIRTME_NG_VERSION"
fi

# --- kernel source (trixie-backports, private apt state: the machine's sources stay as they are)
SRC_DIR="$CACHE/src"
if ls -d "$SRC_DIR"/linux-source-7.2-* >/dev/null 2>&1 && [ -f "$SRC_DIR/VERSION" ]; then
    say "kernel source $(cat "$SRC_DIR/VERSION"): present"
else
    APT_D="$CACHE/apt"
    mkdir -p "$APT_D/lists/partial" "$SRC_DIR"
    MIRROR=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources | head -1)
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $MIRROR trixie-backports main" > "$APT_D/sources.list"
    O=(-o "Dir::Etc::SourceList=$APT_D/sources.list" -o Dir::Etc::SourceParts=/dev/null -o "Dir::State::Lists=$APT_D/lists")
    apt-get "${O[@]}" update -qq
    versions=$(apt-cache "${O[@]}" madison linux-source-7.2 | awk '{print $3}')
    pick=$(printf '%s\n' $versions | grep -E "^${KERNEL_SOURCE_PIN//./\\.}(-|$)" | head -1 || true)
    if [ -z "$pick" ]; then
        pick=$(printf '%s\n' $versions | sort -V | tail -1)
        say "NOTICE: pinned kernel source $KERNEL_SOURCE_PIN is gone; falling back to the newest 7.2.x: $pick"
    fi
    [ -n "$pick" ] || { echo "setup: no linux-source-7.2 in trixie-backports" >&2; exit 1; }
    say "downloading linux-source-7.2=$pick"
    (cd "$SRC_DIR" && apt-get "${O[@]}" download "linux-source-7.2=$pick")
    rm -rf "$SRC_DIR/x"
    dpkg -x "$SRC_DIR"/linux-source-7.2_*.deb "$SRC_DIR/x"
    tar -C "$SRC_DIR" -xf "$SRC_DIR"/x/usr/src/linux-source-7.2.tar.xz
    rm -rf "$SRC_DIR/x" "$SRC_DIR"/linux-source-7.2_*.deb
    mv "$SRC_DIR/linux-source-7.2" "$SRC_DIR/linux-source-7.2-$pick"
    echo "$pick" > "$SRC_DIR/VERSION"
fi
say "done"
