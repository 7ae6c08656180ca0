//! `cargo xtask test`: host tests (the whole workspace) then the VM tests, with one summary
//! line of passed, failed and skipped counts at the end.

use crate::run::{capture, root, script};
use std::process::{Command, ExitCode};

#[derive(Default)]
struct Tally {
    passed: u32,
    failed: u32,
    skipped: u32,
    broken: Vec<String>,
}

/// Runs the tests; `host_only` skips the VM part. The VM suite runs on the release kernel and,
/// when it is built (always under CI), on the debug kernel too.
pub fn run(host_only: bool) -> ExitCode {
    let mut t = Tally::default();
    host(&mut t);
    fuzz_smoke(&mut t);
    if host_only {
        println!("VM tests not run (--host)");
    } else {
        vm(&mut t, "release");
        if std::env::var("CI").as_deref() == Ok("true") || debug_kernel_built() {
            vm(&mut t, "debug");
        } else {
            println!("SKIP vm-tests-debug-kernel (build it once with 'cargo xtask kernel --debug')");
            t.skipped += 1;
        }
    }
    for b in &t.broken {
        println!("FAILED: {b}");
    }
    println!("summary: {} passed, {} failed, {} skipped", t.passed, t.failed, t.skipped);
    if t.failed == 0 && t.broken.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// `cargo test --workspace`, counted from libtest's "test result:" lines.
fn host(t: &mut Tally) {
    let (ok, out) = capture(Command::new(env!("CARGO")).args(["test", "--workspace", "--release"]).current_dir(root()).env("CARGO_TERM_COLOR", "never"));
    let mut seen = false;
    for line in out.lines().filter(|l| l.starts_with("test result:")) {
        seen = true;
        let num = |word: &str| -> u32 {
            line.split(';').find(|p| p.trim_end().ends_with(word)).and_then(|p| p.split_whitespace().rev().nth(1)?.parse().ok()).unwrap_or(0)
        };
        t.passed += num("passed");
        t.failed += num("failed");
        t.skipped += num("ignored");
    }
    if !ok || !seen {
        t.broken.push("cargo test --workspace".into());
    }
}

/// A short run of the receive-engine fuzz target over the committed corpus (new inputs go to
/// a temporary directory, not into the repository). The long runs are done by hand.
fn fuzz_smoke(t: &mut Tally) {
    let cargo_fuzz = std::path::Path::new(&std::env::var("IWARP_CACHE").unwrap_or_else(|_| "/var/lib/iwarp".into())).join("cargo-fuzz/bin/cargo-fuzz");
    if !cargo_fuzz.is_file() {
        println!("SKIP fuzz-receive (cargo-fuzz missing: run 'cargo xtask setup')");
        t.skipped += 1;
        if std::env::var("CI").as_deref() == Ok("true") {
            t.broken.push("fuzz smoke test could not run under CI".into());
        }
        return;
    }
    let scratch = std::env::temp_dir().join(format!("iwarp-fuzz-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&scratch);
    let fuzz_dir = root().join("proto/fuzz");
    let (ok, _) = capture(
        Command::new(&cargo_fuzz)
            .args(["fuzz", "run", "--sanitizer", "none", "-a", "receive"])
            .arg(&scratch)
            .arg(fuzz_dir.join("corpus/receive"))
            .args(["--", "-max_total_time=60", "-print_final_stats=1"])
            .current_dir(&fuzz_dir)
            .env("RUSTC_BOOTSTRAP", "1"),
    );
    let _ = std::fs::remove_dir_all(&scratch);
    if ok {
        println!("PASS fuzz-receive (60 s, committed corpus)");
        t.passed += 1;
    } else {
        println!("FAIL fuzz-receive (see the crash above; artifacts in proto/fuzz/artifacts)");
        t.failed += 1;
    }
}

fn debug_kernel_built() -> bool {
    let out = Command::new("bash").arg("-c").arg(format!("source {}/scripts/kenv.sh && test -f \"$(kernel_build_dir debug)/.built\"", root().display())).status();
    out.map(|s| s.success()).unwrap_or(false)
}

/// The VM suite prints one "PASS name", "FAIL name" or "SKIP name" line per test.
fn vm(t: &mut Tally, flavour: &str) {
    let built = script("build-kernel.sh", &[flavour])
        && script("build-kmod.sh", &[flavour])
        && crate::run::cargo(&["build", "--release", "-p", "libiwarp", "--bins"]);
    if !built {
        t.broken.push(format!("building the {flavour} kernel, module or tools for the VM tests"));
        return;
    }
    let (ok, out) = capture(Command::new("bash").arg(root().join("scripts/vm-tests.sh")).arg(flavour));
    for line in out.lines() {
        match line.split_whitespace().next() {
            Some("PASS") => t.passed += 1,
            Some("FAIL") => t.failed += 1,
            Some("SKIP") => t.skipped += 1,
            _ => {}
        }
    }
    if !ok && !out.lines().any(|l| l.starts_with("FAIL")) {
        t.broken.push("VM test suite (no FAIL line, but it did not finish cleanly)".into());
    }
}
