//! `cargo xtask …`: the project's tasks. The system-level work (packages, kernel, guests) is in
//! `scripts/`; this runner sequences it, builds the Rust parts and counts test results.

mod bench;
mod run;
mod test;

use run::{c_tools, cargo, script, script_code};
use std::process::ExitCode;

const USAGE: &str = "\
usage: cargo xtask <task>
  setup                 install everything (Debian packages, bindgen, virtme-ng, kernel source)
  kernel [--debug]      build the test kernel into the cache (a warm run does nothing)
  kmod [--debug]        build iwarp.ko against it
  vm [--guests N] [--debug] [--guest G] [--insmod] -- CMD
                        boot guests on a bridge, run CMD in guest G (default A), tear down
  test [--host] [--full]
                        host tests, fuzz smoke run, VM tests (release kernel, and the debug
                        kernel when built; CI always builds it); --full: the long runs too
                        (netem tests with over 1 GiB of Writes, Sends and Reads each, release)
  bench core [--quick]  protocol-core benchmarks, as ratios (--quick: short measurements)
  bench verbs [--quick] [--faults | --sweep]
                        iwarp.ko beside siw (perftest -R) and TCP (iperf3, sockperf) between
                        two guests in one run: write_bw, write_lat, send_lat and their ratios;
                        --faults: write_bw under each network fault (netem), as ratios;
                        --sweep: write_bw and write_lat against message size (8 B to 4 MiB),
                        write_bw against reorder rate, loss and marker separation (out-of-order
                        placement through markers, alignment, or none), plotted as SVG in
                        target/bench/
  bench sockets [--quick]
                        unmodified iperf3 and sockperf between two guests over plain TCP and
                        over the sockets preload library (with and without markers and CRC):
                        throughput, CPU per MB, ping-pong latency, ratios to TCP
  bench nvme [--quick]  NVMe over Fabrics between two guests over iwarp.ko (markers and CRC,
                        and neither), over siw and over NVMe/TCP, in turns: fio 4 KiB latency
                        and IOPS, 128 KiB MB/s, CPU per I/O, ratios to NVMe/TCP and siw
  bench profile [--quick] [--reorder | --nvme]
                        where both guests' CPU time goes (perf, by symbol and by area) in the
                        benchmark's runs: 64 KiB write_bw with and without markers and CRC,
                        8 B write_lat and send_lat; --reorder: the write_bw runs under 25 %
                        reordering, one wire packet per fault; --nvme: fio's 4 KiB reads
                        32 deep over NVMe on iwarp.ko plain, siw and NVMe/TCP
  fuzz-vm [--streams N] [--seed S] [--debug]
                        the hostile peer: N (1000) mutated streams against iwarp.ko between two
                        guests, each checked against the model, outcomes tallied
  demo                  set up, build, boot two guests, load the module, run the verbs
                        benchmark between them";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |f: &str| args.iter().any(|a| a == f);
    let flavour = if flag("--debug") { "debug" } else { "release" };
    let ok = match args.first().map(String::as_str) {
        Some("setup") => script("setup.sh", &[]),
        Some("kernel") => script("build-kernel.sh", &[flavour]),
        Some("kmod") => script("build-kmod.sh", &[flavour]),
        Some("vm") => {
            // The guest command's own exit status is ours.
            let rest: Vec<&str> = args[1..].iter().map(String::as_str).collect();
            if !build_guest_side(flavour, flag("--insmod")) {
                return ExitCode::FAILURE;
            }
            return ExitCode::from(script_code("vm.sh", &rest));
        }
        Some("test") => return test::run(flag("--host"), flag("--full")),
        Some("bench") if args.get(1).map(String::as_str) == Some("core") => bench::core(flag("--quick")),
        Some("bench") if args.get(1).map(String::as_str) == Some("verbs") => {
            script("build-kernel.sh", &["release"])
                && build_guest_side("release", true)
                && script("bench-vm.sh", &["--quick", "--faults", "--sweep"].into_iter().filter(|f| flag(f)).collect::<Vec<_>>())
        }
        Some("bench") if args.get(1).map(String::as_str) == Some("sockets") => {
            script("build-kernel.sh", &["release"])
                && build_guest_side("release", true)
                && script("bench-sockets.sh", &["--quick"].into_iter().filter(|f| flag(f)).collect::<Vec<_>>())
        }
        Some("bench") if args.get(1).map(String::as_str) == Some("nvme") => {
            script("build-kernel.sh", &["release"])
                && build_guest_side("release", true)
                && script("bench-nvme.sh", &["--quick"].into_iter().filter(|f| flag(f)).collect::<Vec<_>>())
        }
        Some("bench") if args.get(1).map(String::as_str) == Some("profile") => {
            script("build-kernel.sh", &["release"])
                && build_guest_side("release", true)
                && script("profile-vm.sh", &["--quick", "--reorder", "--nvme"].into_iter().filter(|f| flag(f)).collect::<Vec<_>>())
        }
        Some("demo") => demo(),
        Some("fuzz-vm") => {
            let rest: Vec<&str> = args[1..].iter().map(String::as_str).collect();
            script("build-kernel.sh", &[flavour]) && build_guest_side(flavour, true) && script("fuzz-vm.sh", &rest)
        }
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// What guests need from the host build: the module (if asked), the user-space binaries, the
/// sockets preload library and the test tools in C.
fn build_guest_side(flavour: &str, module: bool) -> bool {
    (!module || script("build-kmod.sh", &[flavour]))
        && cargo(&["build", "--release", "-p", "libiwarp", "-p", "iwarp-check", "-p", "iwarp-bench", "-p", "wire-check", "--bins", "--examples"])
        && cargo(&["build", "--release", "-p", "iwarp-preload"])
        && c_tools()
}

/// The newcomer's main job.
fn demo() -> bool {
    script("setup.sh", &[])
        && script("build-kernel.sh", &["release"])
        && build_guest_side("release", true)
        && script("demo.sh", &[])
        && script("bench-vm.sh", &[])
}
