# Sourced by the kernel-side scripts: where the cache is and how to call the kernel's make.
# The kernel's Rust must be Debian's rustc-web (it has the matching rust-src); rustup's rustc
# comes first on PATH, so it is named explicitly.
# Not under /var/cache: virtme-ng hides that directory from guests behind a tmpfs.
CACHE=${IWARP_CACHE:-/var/lib/iwarp}
export PATH="$CACHE/bindgen/bin:/usr/lib/llvm-19/bin:$PATH"
KMAKE=(make LLVM=1 RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc HOSTRUSTC=/usr/bin/rustc
       BINDGEN="$CACHE/bindgen/bin/bindgen" -j"$(( $(nproc) + 1 ))")

# kernel_source: the unpacked kernel source directory (fails when setup has not run).
kernel_source() {
    local v
    v=$(cat "$CACHE/src/VERSION" 2>/dev/null) || { echo "no kernel source: run 'cargo xtask setup'" >&2; return 1; }
    echo "$CACHE/src/linux-source-7.2-$v"
}

# Bump when the way the kernel is configured or built changes (not for cosmetic script edits).
KERNEL_RECIPE=1

# kernel_build_dir FLAVOUR: the cache directory of the kernel built from this source with this
# flavour's config (release|debug). The key covers everything that shapes the result: source
# version, config fragments, toolchain versions and the recipe number.
kernel_build_dir() {
    local flavour=$1 here key
    here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
    key=$( { cat "$CACHE/src/VERSION"; echo "recipe $KERNEL_RECIPE"; cat "$here/qemu/kernel.config";
             [ "$flavour" = debug ] && cat "$here/qemu/kernel-debug.config";
             /usr/bin/rustc --version; clang-19 --version | head -1; "$CACHE/bindgen/bin/bindgen" --version; } 2>&1 | sha256sum | cut -c1-12)
    echo "$CACHE/kernel/$(cat "$CACHE/src/VERSION")-$flavour-$key"
}
