//! The ABI's [`Endpoint`] and the standard library's socket addresses, both ways.

use crate::abi::Endpoint;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// `a` as the module takes it (no IPv6 scope: the module does not carry one).
pub(crate) fn endpoint(a: SocketAddr) -> Endpoint {
    let mut addr = [0u8; 16];
    let family = match a.ip() {
        IpAddr::V4(ip) => {
            addr[..4].copy_from_slice(&ip.octets());
            libc::AF_INET
        }
        IpAddr::V6(ip) => {
            addr = ip.octets();
            libc::AF_INET6
        }
    };
    Endpoint { family: family as u16, port: a.port(), addr }
}

/// The address `e` holds, if it holds one.
pub(crate) fn socket_addr(e: &Endpoint) -> Option<SocketAddr> {
    let ip = match e.family as i32 {
        libc::AF_INET => IpAddr::V4(Ipv4Addr::new(e.addr[0], e.addr[1], e.addr[2], e.addr[3])),
        libc::AF_INET6 => IpAddr::V6(Ipv6Addr::from(e.addr)),
        _ => return None,
    };
    Some(SocketAddr::new(ip, e.port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_go_there_and_back() {
        for a in ["10.77.0.2:7000", "[fd77::2]:7001", "[::ffff:10.77.0.1]:1", "0.0.0.0:0", "[::]:9"] {
            let a: SocketAddr = a.parse().unwrap();
            assert_eq!(socket_addr(&endpoint(a)), Some(a));
        }
        assert_eq!(endpoint("1.2.3.4:5".parse().unwrap()).addr[4..], [0; 12]);
        assert_eq!(socket_addr(&Endpoint::default()), None);
    }
}
