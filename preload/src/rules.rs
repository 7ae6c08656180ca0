//! Which TCP connections to upgrade: `IWARP_SOCKETS`, a comma-separated list of ports (or
//! `LOW-HIGH` ranges). A connection to one of them, or accepted by a listener on one of them, is
//! offered the upgrade; every other socket is left to the C library.

use std::sync::OnceLock;

/// The port ranges, read once from the environment.
fn ranges() -> &'static [(u16, u16)] {
    static RULES: OnceLock<Vec<(u16, u16)>> = OnceLock::new();
    RULES.get_or_init(|| std::env::var("IWARP_SOCKETS").map(|v| parse(&v)).unwrap_or_default())
}

/// Parses the rule text; items that do not parse are left out (and said so on stderr).
pub(crate) fn parse(text: &str) -> Vec<(u16, u16)> {
    let mut out = Vec::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let range = match item.split_once('-') {
            Some((a, b)) => a.parse().ok().zip(b.parse().ok()),
            None => item.parse().ok().map(|p| (p, p)),
        };
        match range {
            Some((lo, hi)) if lo <= hi => out.push((lo, hi)),
            _ => eprintln!("iwarp-preload: IWARP_SOCKETS: '{item}' is not a port or a range; ignored"),
        }
    }
    out
}

/// Whether connections on TCP port `port` are offered the upgrade.
pub(crate) fn chosen(port: u16) -> bool {
    ranges().iter().any(|&(lo, hi)| (lo..=hi).contains(&port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_and_ranges() {
        assert_eq!(parse("5201, 8000-8010,,x,9-1"), vec![(5201, 5201), (8000, 8010)]);
    }
}
