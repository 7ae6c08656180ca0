//! Running the project's scripts and cargo, echoing what runs.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

/// The workspace root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives in the workspace").to_path_buf()
}

/// Runs `scripts/NAME ARGS…` with bash; true if it succeeded.
pub fn script(name: &str, args: &[&str]) -> bool {
    script_code(name, args) == 0
}

/// Runs `scripts/NAME ARGS…` with bash; its exit status (1 if it could not run or was killed).
pub fn script_code(name: &str, args: &[&str]) -> u8 {
    exit_code(Command::new("bash").arg(root().join("scripts").join(name)).args(args))
}

/// Runs cargo with ARGS in the workspace; true if it succeeded.
pub fn cargo(args: &[&str]) -> bool {
    exit_code(Command::new(env!("CARGO")).args(args).current_dir(root())) == 0
}

/// Compiles the test tools written in C: `tools/siw-peer/siw-peer.c` (libibverbs, librdmacm) to
/// `target/siw-peer`, the far end of the interop tests, run in the guest that has siw;
/// `tools/uverbs-check/uverbs-check.c` (libibverbs, librdmacm) to `target/uverbs-check`, our devices as
/// rdma-core sees them; and `tools/sockets-fortified/sockets-fortified.c` to
/// `target/sockets-fortified`, a reader built with `_FORTIFY_SOURCE` as Debian builds programs,
/// for the sockets tests.
pub fn c_tools() -> bool {
    let cc = |name: &str, flags: &[&str], libs: &[&str]| {
        let src = root().join(format!("tools/{name}/{name}.c"));
        let mut cc = Command::new("cc");
        cc.args(["-O2", "-Wall", "-Wextra", "-Werror"]).args(flags).arg("-o").arg(root().join("target").join(name)).arg(src).args(libs);
        exit_code(&mut cc) == 0
    };
    cc("siw-peer", &[], &["-libverbs", "-lrdmacm"])
        && cc("uverbs-check", &[], &["-libverbs", "-lrdmacm"])
        && cc("sockets-fortified", &["-D_FORTIFY_SOURCE=2"], &[])
}

/// Runs `cmd`, echoing it first and its time after (where CI's minutes go); its exit status (1
/// if it could not run or was killed).
fn exit_code(cmd: &mut Command) -> u8 {
    eprintln!("==> xtask: {}", shown(cmd));
    let start = Instant::now();
    let code = match cmd.stdin(Stdio::inherit()).status() {
        Ok(s) => s.code().map_or(1, |c| c as u8),
        Err(e) => {
            eprintln!("==> xtask: cannot run {}: {e}", shown(cmd));
            1
        }
    };
    took(start);
    code
}

/// A script running in the background at the lowest CPU priority, its output going to a log
/// that `wait` shows.
pub struct Background {
    child: std::process::Child,
    log: PathBuf,
    shown: String,
    start: Instant,
}

/// Starts `scripts/NAME ARGS…` with bash under `nice -n 19`, its output to `target/NAME.log`; None
/// (said why) if it could not start.
pub fn script_niced(name: &str, args: &[&str]) -> Option<Background> {
    let log = root().join("target").join(format!("{}.log", name.trim_end_matches(".sh")));
    let file = std::fs::create_dir_all(root().join("target")).and_then(|()| std::fs::File::create(&log));
    let mut cmd = Command::new("nice");
    cmd.args(["-n", "19", "bash"]).arg(root().join("scripts").join(name)).args(args);
    let shown = shown(&cmd);
    let spawned = file.and_then(|f| Ok((f.try_clone()?, f))).and_then(|(out, err)| cmd.stdin(Stdio::null()).stdout(out).stderr(err).spawn());
    match spawned {
        Ok(child) => {
            eprintln!("==> xtask: started in the background: {shown} (output: {})", log.display());
            Some(Background { child, log, shown, start: Instant::now() })
        }
        Err(e) => {
            eprintln!("==> xtask: cannot start {shown}: {e}");
            None
        }
    }
}

impl Background {
    /// Waits for the script to end, shows its output; true if it succeeded.
    pub fn wait(mut self) -> bool {
        eprintln!("==> xtask: waiting for {}", self.shown);
        let waited = Instant::now();
        let ok = self.child.wait().is_ok_and(|s| s.success());
        eprint!("{}", std::fs::read_to_string(&self.log).unwrap_or_default());
        eprintln!("==> xtask: waited {} s; it took {} s in all", waited.elapsed().as_secs(), self.start.elapsed().as_secs());
        ok
    }
}

fn took(start: Instant) {
    eprintln!("==> xtask: took {} s", start.elapsed().as_secs());
}

/// Runs a command, teeing its output to ours, and returns (success, captured output).
pub fn capture(cmd: &mut Command) -> (bool, String) {
    use std::io::{BufRead, BufReader, Write};
    eprintln!("==> xtask: {}", shown(cmd));
    let start = Instant::now();
    let mut child = match cmd.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn() {
        Ok(c) => c,
        Err(e) => return (false, format!("cannot run: {e}\n")),
    };
    let mut text = String::new();
    for line in BufReader::new(child.stdout.take().expect("piped")).lines().map_while(Result::ok) {
        println!("{line}");
        let _ = std::io::stdout().flush();
        text.push_str(&line);
        text.push('\n');
    }
    let ok = child.wait().map(|s| s.success()).unwrap_or(false);
    took(start);
    (ok, text)
}

fn shown(cmd: &Command) -> String {
    let args: Vec<String> = cmd.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
    format!("{} {}", cmd.get_program().to_string_lossy(), args.join(" "))
}
