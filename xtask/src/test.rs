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

/// Runs the tests; `host_only` skips the VM part.
pub fn run(host_only: bool, flavour: &str) -> ExitCode {
    let mut t = Tally::default();
    host(&mut t);
    if host_only {
        println!("VM tests not run (--host)");
    } else {
        vm(&mut t, flavour);
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
