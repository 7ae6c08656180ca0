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
    counted(&mut t, "fuzz smoke run", Command::new("bash").arg(root().join("scripts/fuzz-smoke.sh")));
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

fn debug_kernel_built() -> bool {
    let out =
        Command::new("bash").arg("-c").arg(format!("source {}/scripts/kenv.sh && test -f \"$(kernel_build_dir debug)/.built\"", root().display())).status();
    out.map(|s| s.success()).unwrap_or(false)
}

/// The VM suite on one kernel flavour, after building what it needs.
fn vm(t: &mut Tally, flavour: &str) {
    let built = script("build-kernel.sh", &[flavour]) && crate::build_guest_side(flavour, true);
    if !built {
        t.broken.push(format!("building the {flavour} kernel, module or tools for the VM tests"));
        return;
    }
    counted(t, &format!("VM test suite ({flavour} kernel)"), Command::new("bash").arg(root().join("scripts/vm-tests.sh")).arg(flavour));
}

/// Runs a script that prints one "PASS name", "FAIL name" or "SKIP name" line per test, and
/// counts them; a script that fails without a FAIL line is reported as broken.
fn counted(t: &mut Tally, what: &str, cmd: &mut Command) {
    let (ok, out) = capture(cmd);
    for line in out.lines() {
        match line.split_whitespace().next() {
            Some("PASS") => t.passed += 1,
            Some("FAIL") => t.failed += 1,
            Some("SKIP") => t.skipped += 1,
            _ => {}
        }
    }
    if !ok && !out.lines().any(|l| l.starts_with("FAIL")) {
        t.broken.push(format!("{what} (no FAIL line, but it did not finish cleanly)"));
    }
}
