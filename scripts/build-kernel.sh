#!/usr/bin/env bash
# Builds the test kernel (bzImage + modules) into the cache, keyed by source version and config.
# A warm run (same key, build finished) does nothing. Usage: build-kernel.sh [release|debug]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
source "$here/scripts/kenv.sh"
flavour=${1:-release}
src=$(kernel_source)
out=$(kernel_build_dir "$flavour")
say() { printf '==> kernel(%s): %s\n' "$flavour" "$*"; }

if [ -f "$out/.built" ]; then
    say "cached: $out"
    exit 0
fi
mkdir -p "$out"
start=$(date +%s)
frags=("$here/qemu/kernel.config")
[ "$flavour" = debug ] && frags+=("$here/qemu/kernel-debug.config")

say "configuring in $out"
"${KMAKE[@]}" -C "$src" O="$out" rustavailable
"${KMAKE[@]}" -C "$src" O="$out" allnoconfig >/dev/null
"$src/scripts/kconfig/merge_config.sh" -m -O "$out" "$out/.config" \
    "$src/kernel/configs/kvm_guest.config" "${frags[@]}" >/dev/null
"${KMAKE[@]}" -C "$src" O="$out" olddefconfig >/dev/null
# The fragments must survive olddefconfig; a dropped CONFIG_RUST means the toolchain was not found.
fail=0
for f in "${frags[@]}"; do
    while IFS= read -r line; do
        case "$line" in CONFIG_*=y|CONFIG_*=m) ;; *) continue ;; esac
        grep -qx "$line" "$out/.config" || { echo "config: $line did not survive" >&2; fail=1; }
    done < "$f"
done
grep -qx CONFIG_RUST=y "$out/.config" || { echo "FATAL: CONFIG_RUST=y did not survive configuration" >&2; exit 1; }
[ $fail = 0 ] || { echo "FATAL: config fragment not honoured (see above)" >&2; exit 1; }

say "building bzImage and modules"
"${KMAKE[@]}" -C "$src" O="$out" bzImage modules > "$out/build.log" 2>&1 || {
    tail -40 "$out/build.log" >&2; echo "FATAL: kernel build failed, log: $out/build.log" >&2; exit 1; }
touch "$out/.built"
say "built in $(( $(date +%s) - start )) s: $out"
