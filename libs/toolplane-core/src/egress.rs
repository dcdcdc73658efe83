//! The egress policy: which hosts and addresses the plane may open connections to when a
//! registration or a request names a URL (HTTP MCP servers, model endpoints, and every redirect
//! they answer with).
//!
//! A deployed plane must not become a way into its own network: cloud metadata at
//! 169.254.169.254, loopback admin ports, private ranges. This module decides, for a host name or
//! an address, whether it may be reached; resolving names and connecting is the services'
//! business (they check every resolved address and connect only to checked ones). No IO here.
//! A cell may have settings of its own over the default ([`CellEgress`], [`EgressPolicy::for_cell`]).

mod cells;

pub use cells::CellEgress;

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Whether loopback, link-local and private addresses may be reached.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PrivateNetworks {
    /// Decided by how the service runs: allowed on loopback without authentication (a laptop),
    /// denied when bound beyond loopback or with authentication on. The service resolves it with
    /// [`EgressPolicy::for_posture`]; unresolved, it allows.
    #[default]
    Auto,
    Allow,
    Deny,
}

/// Hosts and addresses that may be reached.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EgressPolicy {
    pub private_networks: PrivateNetworks,
    /// When not empty, the only host names that may be reached (exact, or `*.example.com` for
    /// its subdomains). A listed name may resolve to any address, private ones included: the
    /// operator vouched for it.
    pub allowed_hosts: Vec<String>,
    /// Addresses that may always be reached, private or not (`10.0.3.0/24`, `fd00::/8`).
    pub allowed_cidrs: Vec<Cidr>,
    /// Cells with settings of their own over these (`[egress.cells.<cell>]`); a URL named in a
    /// cell is checked against [`EgressPolicy::for_cell`].
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub cells: BTreeMap<String, CellEgress>,
}

/// What checking a host name decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostVerdict {
    /// Listed in `allowed_hosts`: every address it resolves to may be reached.
    Vouched,
    /// Allowed as a name; each address it resolves to must pass [`EgressPolicy::check_ip`].
    CheckAddresses,
}

/// Why a destination was refused; `Display` is for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EgressDenied {
    /// The host is not on a non-empty `allowed_hosts` list.
    HostNotAllowed(String),
    /// The address is in a range a deployed plane does not reach.
    Address { ip: IpAddr, range: &'static str },
}

impl fmt::Display for EgressDenied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EgressDenied::HostNotAllowed(host) => {
                let host: String = host.chars().take(80).collect();
                write!(
                    f,
                    "host `{host}` is not on the egress policy's allowed_hosts"
                )
            }
            EgressDenied::Address { ip, range } => {
                write!(f, "address {ip} is {range}, which the egress policy denies")
            }
        }
    }
}

impl EgressPolicy {
    /// The policy with [`PrivateNetworks::Auto`] decided: `deployed` is true when the service is
    /// bound beyond loopback (docs/egress.md).
    pub fn for_posture(mut self, deployed: bool) -> EgressPolicy {
        let decided = if deployed {
            PrivateNetworks::Deny
        } else {
            PrivateNetworks::Allow
        };
        if self.private_networks == PrivateNetworks::Auto {
            self.private_networks = decided;
        }
        for cell in self.cells.values_mut() {
            if cell.private_networks == Some(PrivateNetworks::Auto) {
                cell.private_networks = Some(decided);
            }
        }
        self
    }

    /// Whether loopback, link-local and private ranges are refused.
    pub fn denies_private(&self) -> bool {
        self.private_networks == PrivateNetworks::Deny
    }

    /// Checks a URL's host: a name (lowercase, no trailing dot needed) or an IP literal (without
    /// brackets).
    pub fn check_host(&self, host: &str) -> Result<HostVerdict, EgressDenied> {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = IpAddr::from_str(bare) {
            return self.check_ip(ip).map(|()| HostVerdict::CheckAddresses);
        }
        let name = host.trim_end_matches('.').to_ascii_lowercase();
        if self.allowed_hosts.is_empty() {
            return Ok(HostVerdict::CheckAddresses);
        }
        let listed = self
            .allowed_hosts
            .iter()
            .any(|entry| match entry.strip_prefix("*.") {
                Some(domain) => name
                    .strip_suffix(&domain.to_ascii_lowercase())
                    .is_some_and(|sub| sub.len() > 1 && sub.ends_with('.')),
                None => entry.eq_ignore_ascii_case(&name),
            });
        if listed {
            Ok(HostVerdict::Vouched)
        } else {
            Err(EgressDenied::HostNotAllowed(name))
        }
    }

    /// Checks one address a connection would go to.
    pub fn check_ip(&self, ip: IpAddr) -> Result<(), EgressDenied> {
        if self.allowed_cidrs.iter().any(|c| c.contains(ip)) {
            return Ok(());
        }
        match restricted_range(ip) {
            Some(range) if self.denies_private() => Err(EgressDenied::Address { ip, range }),
            _ => Ok(()),
        }
    }
}

/// The range `ip` belongs to when it is not a public unicast address.
pub fn restricted_range(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => restricted_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return restricted_v4(v4);
            }
            let s = v6.segments();
            // NAT64 (64:ff9b::/96) carries an IPv4 address in its last 32 bits.
            if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
                let [a, b] = s[6].to_be_bytes();
                let [c, d] = s[7].to_be_bytes();
                return restricted_v4(Ipv4Addr::new(a, b, c, d));
            }
            restricted_v6(v6)
        }
    }
}

fn restricted_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, ..] = ip.octets();
    Some(match (a, b) {
        (127, _) => "loopback",
        (169, 254) => "link-local (cloud metadata lives here)",
        (10, _) | (192, 168) => "private",
        (172, 16..=31) => "private",
        (100, 64..=127) => "shared address space (carrier-grade NAT)",
        (0, _) => "unspecified",
        (224..=239, _) => "multicast",
        (240..=255, _) => "reserved",
        _ => return None,
    })
}

fn restricted_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let first = ip.segments()[0];
    Some(if ip.is_loopback() {
        "loopback"
    } else if ip.is_unspecified() {
        "unspecified"
    } else if first & 0xfe00 == 0xfc00 {
        "private (unique local)"
    } else if first & 0xffc0 == 0xfe80 {
        "link-local"
    } else if first & 0xff00 == 0xff00 {
        "multicast"
    } else {
        return None;
    })
}

/// An address range, `10.0.0.0/8` or `fd00::/8` (a bare address is a single-address range).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    prefix: u8,
}

impl Cidr {
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.net, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            (IpAddr::V4(_), IpAddr::V6(v6)) => v6
                .to_ipv4_mapped()
                .is_some_and(|v4| self.contains(IpAddr::V4(v4))),
            (IpAddr::V6(_), IpAddr::V4(_)) => false,
        }
    }
}

impl FromStr for Cidr {
    type Err = String;

    fn from_str(s: &str) -> Result<Cidr, String> {
        let (addr, prefix) = s.split_once('/').unwrap_or((s, ""));
        let net = IpAddr::from_str(addr.trim()).map_err(|e| format!("`{s}`: {e}"))?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let prefix = if prefix.is_empty() {
            max
        } else {
            prefix
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("`{s}`: the prefix length is not 0–{max}"))?
        };
        Ok(Cidr { net, prefix })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.net, self.prefix)
    }
}

impl Serialize for Cidr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Cidr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Cidr, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_deployed_plane_refuses_metadata_loopback_and_private_ranges() {
        let deployed = EgressPolicy::default().for_posture(true);
        let laptop = EgressPolicy::default().for_posture(false);
        let cases = [
            ("169.254.169.254", false),
            ("127.0.0.1", false),
            ("127.1.2.3", false),
            ("10.1.2.3", false),
            ("172.16.0.1", false),
            ("172.32.0.1", true),
            ("192.168.1.1", false),
            ("100.64.0.1", false),
            ("0.0.0.0", false),
            ("8.8.8.8", true),
            ("::1", false),
            ("::", false),
            ("fe80::1", false),
            ("fd12::1", false),
            ("::ffff:169.254.169.254", false),
            ("64:ff9b::a9fe:a9fe", false),
            ("2606:4700::1111", true),
            ("::ffff:8.8.8.8", true),
        ];
        for (addr, allowed) in cases {
            assert_eq!(deployed.check_ip(ip(addr)).is_ok(), allowed, "{addr}");
            assert!(laptop.check_ip(ip(addr)).is_ok(), "{addr}");
            assert_eq!(deployed.check_host(addr).is_ok(), allowed, "{addr}");
        }
        assert!(deployed.check_host("[::1]").is_err());
        let e = deployed.check_ip(ip("169.254.169.254")).unwrap_err();
        assert!(e.to_string().contains("link-local"), "{e}");
    }

    #[test]
    fn allowed_cidrs_open_ranges_and_allowed_hosts_close_names() {
        let policy = EgressPolicy {
            private_networks: PrivateNetworks::Deny,
            allowed_hosts: vec!["mcp.internal".into(), "*.example.com".into()],
            allowed_cidrs: vec!["10.0.3.0/24".parse().unwrap(), "127.0.0.2".parse().unwrap()],
            ..EgressPolicy::default()
        };
        assert!(policy.check_ip(ip("10.0.3.9")).is_ok());
        assert!(policy.check_ip(ip("10.0.4.9")).is_err());
        assert!(policy.check_ip(ip("127.0.0.2")).is_ok());
        assert!(policy.check_ip(ip("127.0.0.1")).is_err());
        assert_eq!(policy.check_host("MCP.internal."), Ok(HostVerdict::Vouched));
        assert_eq!(policy.check_host("a.example.com"), Ok(HostVerdict::Vouched));
        assert!(policy.check_host("example.com").is_err());
        assert!(policy.check_host("badexample.com").is_err());
        assert!(policy.check_host("evil.test").is_err());
        assert!("10.0.0.0/33".parse::<Cidr>().is_err());
        assert!("nope/8".parse::<Cidr>().is_err());
        assert!("0.0.0.0/0".parse::<Cidr>().unwrap().contains(ip("1.2.3.4")));
        assert_eq!(
            EgressPolicy::default().check_host("anything.test"),
            Ok(HostVerdict::CheckAddresses)
        );
    }
}
