//! `cargo xtask test`: host tests (the whole workspace) then the VM tests, with one summary
//! line of passed, failed and skipped counts at the end.

use crate::run::{capture, root, script, script_niced};
use std::process::{Command, ExitCode};

#[derive(Default)]
struct Tally {
    passed: u32,
    failed: u32,
    skipped: u32,
    broken: Vec<String>,
}

/// Runs the tests; `host_only` leaves the VM suites out. The VM suite runs on the release
/// kernel and on the debug kernel (each built first if it is not in the cache); `full` adds its
/// long runs. A run with anything skipped is incomplete and fails: a skip is never a pass.
pub fn run(host_only: bool, full: bool) -> ExitCode {
    let ci = std::env::var("CI").as_deref() == Ok("true");
    if ci && std::env::var_os("IWARP_VM_TESTS").is_some() {
        println!("FAILED: IWARP_VM_TESTS is set, and CI must run every test");
        return ExitCode::FAILURE;
    }
    // The debug kernel (if not cached) builds meanwhile, from the start: under TCG the release
    // suite's guests leave about half of two cores idle (each waits on the other, on timers and
    // on its peer's network), which the build's 15 minutes take instead of coming after. At nice
    // 19 it yields the CPU to everything else, and nothing measured runs before it ends.
    let debug_kernel = if host_only { None } else { script_niced("build-kernel.sh", &["debug"]) };
    let mut t = Tally::default();
    lint(&mut t);
    host(&mut t);
    counted(&mut t, "fuzz smoke run", Command::new("bash").arg(root().join("scripts/fuzz-smoke.sh")).arg("30"));
    if host_only {
        println!("VM tests not run (--host)");
    } else {
        vm(&mut t, "release", full);
        if debug_kernel.is_some_and(|b| !b.wait()) {
            t.broken.push("building the debug kernel in the background (its output is above)".into());
        } else {
            vm(&mut t, "debug", full);
        }
    }
    for b in &t.broken {
        println!("FAILED: {b}");
    }
    println!("summary: {} passed, {} failed, {} skipped", t.passed, t.failed, t.skipped);
    if t.skipped > 0 {
        println!("INCOMPLETE: {} test(s) skipped (see the SKIP lines above), so this run proves less than it says", t.skipped);
    }
    if t.failed == 0 && t.broken.is_empty() && t.skipped == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The host test that needs tshark: left out, and counted as skipped, where tshark is missing
/// (the test itself fails without it).
const TSHARK_TEST: &str = "tshark_dissects_our_exchange_cleanly";

/// The formatter and the linter: rustfmt over the workspace and the module, clippy over the
/// workspace with every warning an error (the module goes through clippy as it is built:
/// scripts/build-kmod.sh). Each counts as a test.
fn lint(t: &mut Tally) {
    let cargo = || {
        let mut c = Command::new(env!("CARGO"));
        c.current_dir(root()).env("CARGO_TERM_COLOR", "never");
        c
    };
    let checks: [(&str, Command); 3] = [
        ("lint/rustfmt-workspace", {
            let mut c = cargo();
            c.args(["fmt", "--all", "--check"]);
            c
        }),
        ("lint/rustfmt-kmod", {
            let mut c = Command::new("rustfmt");
            c.current_dir(root()).args(["--edition", "2021", "--check", "kmod/src/iwarp_main.rs"]);
            c
        }),
        ("lint/clippy-workspace", {
            let mut c = cargo();
            c.args(["clippy", "--workspace", "--all-targets", "--release", "--", "-D", "warnings"]);
            c
        }),
    ];
    for (name, mut cmd) in checks {
        let (ok, _) = capture(&mut cmd);
        if ok {
            println!("ok {name}");
            t.passed += 1;
        } else {
            println!("not ok {name}");
            t.failed += 1;
        }
    }
}

/// `cargo test --workspace`, counted from libtest's "test result:" lines.
fn host(t: &mut Tally) {
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args(["test", "--workspace", "--release"]).current_dir(root()).env("CARGO_TERM_COLOR", "never");
    if !on_path("tshark") {
        println!("ok host/{TSHARK_TEST} # SKIP tshark is not installed (cargo xtask setup installs it)");
        t.skipped += 1;
        cmd.args(["--", "--skip", TSHARK_TEST]);
    }
    let (ok, out) = capture(&mut cmd);
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

fn on_path(name: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
}

/// The VM suite on one kernel flavour, after building what it needs.
fn vm(t: &mut Tally, flavour: &str, full: bool) {
    let built = script("build-kernel.sh", &[flavour]) && crate::build_guest_side(flavour, true);
    if !built {
        t.broken.push(format!("building the {flavour} kernel, module or tools for the VM tests"));
        return;
    }
    counted(
        t,
        &format!("VM test suite ({flavour} kernel)"),
        Command::new("bash").arg(root().join("scripts/vm-tests.sh")).arg(flavour).env("IWARP_VM_FULL", if full { "1" } else { "0" }),
    );
}

/// Runs a script that reports in KTAP (`scripts/ktap.sh`) and counts its results. The script is
/// broken if it reports fewer results than its plan (it died part way) or fails without a
/// failed test.
fn counted(t: &mut Tally, what: &str, cmd: &mut Command) {
    let (ok, out) = capture(cmd);
    let report = Ktap::parse(&out);
    t.passed += report.passed;
    t.failed += report.failed;
    t.skipped += report.skipped;
    let results = report.passed + report.failed + report.skipped;
    match report.plan {
        Some(plan) if plan != results => t.broken.push(format!("{what}: {results} results for a plan of {plan}")),
        None => t.broken.push(format!("{what}: no KTAP plan")),
        _ if !ok && report.failed == 0 => t.broken.push(format!("{what} (no failed test, but it did not finish cleanly)")),
        _ => {}
    }
}

/// What a KTAP report says.
#[derive(Debug, Default, PartialEq)]
struct Ktap {
    plan: Option<u32>,
    passed: u32,
    failed: u32,
    skipped: u32,
}

impl Ktap {
    /// Reads the plan ("1..N") and the result lines ("ok N name", "not ok N name",
    /// "ok N name # SKIP why") of the top level; everything else is diagnostics.
    fn parse(text: &str) -> Ktap {
        let mut k = Ktap::default();
        for line in text.lines() {
            if let Some(n) = line.strip_prefix("1..") {
                k.plan = n.trim().parse().ok().or(k.plan);
            } else if let Some(rest) = line.strip_prefix("not ok ") {
                if numbered(rest) {
                    k.failed += 1;
                }
            } else if let Some(rest) = line.strip_prefix("ok ") {
                if numbered(rest) {
                    if rest.contains("# SKIP") {
                        k.skipped += 1;
                    } else {
                        k.passed += 1;
                    }
                }
            }
        }
        k
    }
}

/// Whether a result line goes on with its test number.
fn numbered(rest: &str) -> bool {
    rest.split_whitespace().next().is_some_and(|n| n.parse::<u32>().is_ok())
}

#[cfg(test)]
mod tests {
    use super::Ktap;

    #[test]
    fn ktap_results_and_plan_are_counted_and_diagnostics_ignored() {
        let out = "TAP version 13\n1..4\n# ok: a diagnostic\nok: not a result\nok 1 release/a\n\
                   not ok 2 release/b\nok 3 release/c # SKIP no VM\n# 1 more\nok 4 release/d\n";
        assert_eq!(Ktap::parse(out), Ktap { plan: Some(4), passed: 2, failed: 1, skipped: 1 });
        assert_eq!(Ktap::parse("ok 1 x\n").plan, None);
    }
}
