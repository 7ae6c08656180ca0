#!/usr/bin/env bash
# Builds iwarp.ko against the cached test kernel. Usage: build-kmod.sh [release|debug]
# Output: target/kmod/FLAVOUR/iwarp.ko (Kbuild's MO= keeps objects out of the source tree).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
source "$here/scripts/kenv.sh"
flavour=${1:-release}
kdir=$(kernel_build_dir "$flavour")
[ -f "$kdir/.built" ] || { echo "no $flavour kernel built: run 'cargo xtask kernel'" >&2; exit 1; }
out="$here/target/kmod/$flavour"
mkdir -p "$out"
rm -f "$out/iwarp.ko"
# Built through clippy (the kernel's CLIPPY=1, with Debian's clippy for the kernel's rustc): its
# lints, and the module's own (iwarp_main.rs), are warnings, and a warning fails the build.
if ! "${KMAKE[@]}" CLIPPY=1 CLIPPY_DRIVER=/usr/bin/clippy-driver -C "$kdir" M="$here/kmod" MO="$out" modules >"$out/build.log" 2>&1; then
    cat "$out/build.log" >&2
    echo "FATAL: module build failed (log: $out/build.log)" >&2
    exit 1
fi
if grep -qE 'warning:' "$out/build.log"; then
    cat "$out/build.log" >&2
    echo "FATAL: module build has warnings (log: $out/build.log)" >&2
    exit 1
fi
echo "==> kmod($flavour): $out/iwarp.ko"
