//! `cargo xtask bench core`: runs the protocol-core benchmarks and prints ratios, side by side
//! from one run: marker tax (markers on ÷ off throughput), CRC cost (CRC on ÷ off), and a whole
//! pass through the core against `memcpy` of the same octets.

use crate::run::{cargo, root};
use std::collections::HashMap;

/// Runs criterion and prints the ratio table; false if the benchmarks failed.
pub fn core(quick: bool) -> bool {
    let mut args = vec!["bench", "-p", "iwarp-proto", "--features", "host-crc", "--bench", "fpdu", "--", "--noplot"];
    if quick {
        // CI's form: short runs and fewer bootstrap resamples (criterion's analysis of each
        // benchmark otherwise takes as long as measuring it).
        args.extend(["--warm-up-time", "0.3", "--measurement-time", "0.6", "--nresamples", "20000"]);
    }
    if !cargo(&args) {
        return false;
    }
    let means = read_means();
    let mean = |group: &str, id: &str| means.get(&(group.to_string(), id.to_string())).copied();
    println!("\nprotocol core, throughput ratios (1.00 = no cost; from criterion means of this run)");
    println!("{:<16} {:>20} {:>20} {:>20}", "", "marker tax crc=off", "marker tax crc=on", "crc cost markers=off");
    let mut ok = true;
    for op in ["emit", "receive"] {
        for size in ["4KiB", "64KiB"] {
            let g = format!("{op}/{size}");
            let t = |m: &str, c: &str| mean(&g, &format!("markers={m}/crc={c}"));
            // Throughput ratio of A to B is time(B) / time(A).
            let ratio = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| format!("{:.2}", b / a));
            let cells = [ratio(t("on", "off"), t("off", "off")), ratio(t("on", "on"), t("off", "on")), ratio(t("off", "on"), t("off", "off"))];
            ok &= cells.iter().all(Option::is_some);
            let show: Vec<String> = cells.into_iter().map(|c| c.unwrap_or_else(|| "missing".into())).collect();
            println!("{:<16} {:>20} {:>20} {:>20}", g, show[0], show[1], show[2]);
        }
    }
    // Throughput of a whole pass through the core as a share of one memcpy of the payload.
    let memcpy = mean("pipeline/64KiB", "memcpy");
    println!("\nemit + receive + place, 64 KiB, throughput ÷ memcpy of the same octets (goal with markers and CRC ≥ 0.50)");
    for (m, c) in [("off", "off"), ("on", "off"), ("off", "on"), ("on", "on")] {
        let id = format!("markers={m}/crc={c}");
        let cell = memcpy.zip(mean("pipeline/64KiB", &id)).map(|(copy, pass)| format!("{:.2}", copy / pass));
        ok &= cell.is_some();
        println!("{:<24} {:>8}", id, cell.unwrap_or_else(|| "missing".into()));
    }
    ok
}

/// (group, benchmark id) -> mean time in ns, from target/criterion/**/new/{benchmark,estimates}.json.
fn read_means() -> HashMap<(String, String), f64> {
    let mut out = HashMap::new();
    let mut stack = vec![root().join("target/criterion")];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.ends_with("new/benchmark.json") {
                let read = |f: &str| -> Option<serde_json::Value> { serde_json::from_str(&std::fs::read_to_string(p.with_file_name(f)).ok()?).ok() };
                let (Some(b), Some(est)) = (read("benchmark.json"), read("estimates.json")) else { continue };
                let group = b["group_id"].as_str().unwrap_or_default().to_string();
                let id = b["value_str"].as_str().or(b["function_id"].as_str()).unwrap_or_default().to_string();
                if let Some(ns) = est["mean"]["point_estimate"].as_f64() {
                    out.insert((group, id), ns);
                }
            }
        }
    }
    out
}
