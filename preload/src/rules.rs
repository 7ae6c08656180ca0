//! Which TCP connections to upgrade, in the spirit of libsdp's `libsdp.conf`: rules from
//! `IWARP_SOCKETS` and then from the file named by `IWARP_SOCKETS_CONF`, the first that matches
//! deciding. A socket no rule matches is left to the C library.
//!
//! A rule is `ACTION SIDE ADDRESS:PORTS`:
//! - ACTION: `iwarp` (offer the upgrade) or `tcp` (leave it alone);
//! - SIDE: `connect` (the destination of a `connect`), `listen` (the address a listener is
//!   bound to), or `both`;
//! - ADDRESS: `*`, an IPv4 address, or `ADDRESS/BITS`;
//! - PORTS: `*`, a port, or `LOW-HIGH`.
//!
//! A bare port or range stands for `iwarp both *:PORTS`. In the variable, rules are separated by
//! `,` or `;`; in the file, one per line, `#` starting a comment.

use crate::say;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::OnceLock;

/// Which side of a connection a rule is asked about.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Side {
    Connect,
    Listen,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Rule {
    upgrade: bool,
    /// None: both sides.
    side: Option<Side>,
    net: Ipv4Addr,
    bits: u8,
    ports: (u16, u16),
}

impl Rule {
    fn matches(&self, side: Side, at: SocketAddrV4) -> bool {
        let mask = u32::MAX.checked_shl(32 - u32::from(self.bits)).unwrap_or(0);
        self.side.is_none_or(|s| s == side) && u32::from(*at.ip()) & mask == u32::from(self.net) & mask && (self.ports.0..=self.ports.1).contains(&at.port())
    }
}

/// The rules, read once.
fn rules() -> &'static [Rule] {
    static RULES: OnceLock<Vec<Rule>> = OnceLock::new();
    RULES.get_or_init(|| {
        let mut all = std::env::var("IWARP_SOCKETS").map(|v| parse(&v.replace(';', ","), ',', "IWARP_SOCKETS")).unwrap_or_default();
        if let Some(path) = std::env::var_os("IWARP_SOCKETS_CONF") {
            match std::fs::read_to_string(&path) {
                Ok(text) => all.extend(parse(&text, '\n', &path.to_string_lossy())),
                Err(e) => say!("IWARP_SOCKETS_CONF: {}: {e}; no rules read from it", path.to_string_lossy()),
            }
        }
        all
    })
}

/// Parses rules separated by `sep`; those that do not parse are left out, each said so on
/// stderr with `origin`.
pub(crate) fn parse(text: &str, sep: char, origin: &str) -> Vec<Rule> {
    let mut out = Vec::new();
    for item in text.split(sep).map(|l| l.split('#').next().unwrap_or("").trim()).filter(|s| !s.is_empty()) {
        match rule(item) {
            Some(r) => out.push(r),
            None => say!("{origin}: '{item}' is not a rule (ACTION SIDE ADDRESS:PORTS, or ports); ignored"),
        }
    }
    out
}

fn rule(item: &str) -> Option<Rule> {
    let words: Vec<&str> = item.split_whitespace().collect();
    let (upgrade, side, target) = match words[..] {
        [ports] => (true, None, ("*", ports)),
        [action, side, target] => {
            let upgrade = match action {
                "iwarp" => true,
                "tcp" => false,
                _ => return None,
            };
            let side = match side {
                "connect" => Some(Side::Connect),
                "listen" => Some(Side::Listen),
                "both" => None,
                _ => return None,
            };
            (upgrade, side, target.rsplit_once(':')?)
        }
        _ => return None,
    };
    let (net, bits) = match target.0 {
        "*" => (Ipv4Addr::UNSPECIFIED, 0),
        a => match a.split_once('/') {
            Some((ip, bits)) => (ip.parse().ok()?, bits.parse().ok().filter(|&b| b <= 32)?),
            None => (a.parse().ok()?, 32),
        },
    };
    let ports = match target.1 {
        "*" => (0, u16::MAX),
        p => match p.split_once('-') {
            Some((lo, hi)) => (lo.parse().ok()?, hi.parse().ok()?),
            None => {
                let port = p.parse().ok()?;
                (port, port)
            }
        },
    };
    (ports.0 <= ports.1).then_some(Rule { upgrade, side, net, bits, ports })
}

/// Whether a connection to `at` (`Side::Connect`), or accepted by a listener bound to `at`
/// (`Side::Listen`), is offered the upgrade: by the first rule that matches, if any.
pub(crate) fn chosen(side: Side, at: SocketAddrV4) -> bool {
    decide(rules(), side, at)
}

fn decide(rules: &[Rule], side: Side, at: SocketAddrV4) -> bool {
    rules.iter().find(|r| r.matches(side, at)).is_some_and(|r| r.upgrade)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> SocketAddrV4 {
        s.parse().unwrap()
    }

    #[test]
    fn bare_ports_and_ranges_match_any_address_on_both_sides() {
        let r = parse("5201, 8000-8010,,x,9-1", ',', "test");
        assert_eq!(r.len(), 2);
        assert!(decide(&r, Side::Connect, at("10.0.0.1:5201")));
        assert!(decide(&r, Side::Listen, at("0.0.0.0:8010")));
        assert!(!decide(&r, Side::Connect, at("10.0.0.1:8011")));
    }

    #[test]
    fn first_match_decides_by_side_address_and_port() {
        let text = "# a comment line\n\
                    tcp connect 10.77.0.9:*   # one host left alone\n\
                    iwarp connect 10.77.0.0/24:5201-5210\n\
                    iwarp listen *:7000\n\
                    bogus rule here\n";
        let r = parse(text, '\n', "test");
        assert_eq!(r.len(), 3);
        assert!(decide(&r, Side::Connect, at("10.77.0.2:5205")));
        assert!(!decide(&r, Side::Connect, at("10.77.0.9:5205")), "excluded before the subnet's rule");
        assert!(!decide(&r, Side::Connect, at("10.78.0.2:5205")), "outside the subnet");
        assert!(!decide(&r, Side::Listen, at("0.0.0.0:5205")), "a connect rule does not name listeners");
        assert!(decide(&r, Side::Listen, at("10.77.0.2:7000")));
        assert!(!decide(&r, Side::Connect, at("10.77.0.2:7000")));
    }

    #[test]
    fn malformed_rules_are_refused() {
        for bad in ["iwarp connect 10.0.0.1", "iwarp sideways *:1", "udp both *:1", "iwarp both 10.0.0.0/33:1", "iwarp both *:9-1", "iwarp both *:70000"] {
            assert_eq!(rule(bad), None, "{bad}");
        }
        assert_eq!(rule("tcp both 0.0.0.0/0:*").map(|r| (r.upgrade, r.bits, r.ports)), Some((false, 0, (0, u16::MAX))));
    }
}
