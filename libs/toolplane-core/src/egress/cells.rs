//! Per-cell egress: a cell's own settings over the service's default policy (docs/egress.md,
//! "Per cell"). Each key a cell sets replaces the default's value for that cell, so a cell's
//! policy reads whole from its own section and the default's entries plus the cell's own;
//! a key it does not set is the default's. Decides nothing about addresses itself: the result
//! is an ordinary [`EgressPolicy`].

use serde::{Deserialize, Serialize};

use super::{Cidr, EgressPolicy, PrivateNetworks};

/// One cell's egress settings (`[egress.cells.<cell>]`); every key is optional.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CellEgress {
    /// Replaces the default's `private_networks` for this cell.
    pub private_networks: Option<PrivateNetworks>,
    /// Replaces the default's `allowed_hosts` for this cell (list the default's names again to
    /// keep them).
    pub allowed_hosts: Option<Vec<String>>,
    /// Added to the default's `allowed_cidrs` for this cell.
    pub allowed_cidrs: Vec<Cidr>,
}

impl EgressPolicy {
    /// The policy that governs URLs named in `cell`: the default with the cell's own settings
    /// over it; the default for a cell without settings. The result has no per-cell settings.
    #[must_use]
    pub fn for_cell(&self, cell: &str) -> EgressPolicy {
        let mut policy = EgressPolicy {
            private_networks: self.private_networks,
            allowed_hosts: self.allowed_hosts.clone(),
            allowed_cidrs: self.allowed_cidrs.clone(),
            cells: Default::default(),
        };
        if let Some(own) = self.cells.get(cell) {
            if let Some(private) = own.private_networks {
                policy.private_networks = private;
            }
            if let Some(hosts) = &own.allowed_hosts {
                policy.allowed_hosts = hosts.clone();
            }
            policy
                .allowed_cidrs
                .extend(own.allowed_cidrs.iter().copied());
        }
        policy
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::net::IpAddr;

    use super::*;
    use crate::egress::EgressDenied;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// A deployed default that reaches one public API, and cell `a` that also reaches its own
    /// internal model host and range.
    fn policy() -> EgressPolicy {
        serde_json::from_value(serde_json::json!({
            "private_networks": "deny",
            "allowed_hosts": ["api.example.com"],
            "cells": {
                "a": {
                    "allowed_hosts": ["api.example.com", "llm.a.internal"],
                    "allowed_cidrs": ["10.0.3.0/24"]
                },
                "lab": {"private_networks": "allow"}
            }
        }))
        .unwrap()
    }

    #[test]
    fn a_cell_reaches_what_its_own_settings_allow_and_no_other_cell_does() {
        let policy = policy();
        let a = policy.for_cell("a");
        let b = policy.for_cell("b");
        assert!(a.check_host("llm.a.internal").is_ok());
        assert_eq!(
            b.check_host("llm.a.internal"),
            Err(EgressDenied::HostNotAllowed("llm.a.internal".into()))
        );
        assert!(a.check_ip(ip("10.0.3.7")).is_ok());
        assert!(b.check_ip(ip("10.0.3.7")).is_err());
        // Both keep the default's public API (cell `a` lists it again).
        assert!(a.check_host("api.example.com").is_ok());
        assert!(b.check_host("api.example.com").is_ok());
        // A key a cell does not set is the default's.
        assert!(a.check_ip(ip("169.254.169.254")).is_err());
        let lab = policy.for_cell("lab");
        assert!(lab.check_ip(ip("169.254.169.254")).is_ok());
        assert!(lab.check_host("llm.a.internal").is_err());
    }

    #[test]
    fn posture_decides_auto_in_every_cell() {
        let policy: EgressPolicy = serde_json::from_value(serde_json::json!({
            "cells": {"a": {"private_networks": "auto"}}
        }))
        .unwrap();
        let deployed = policy.clone().for_posture(true);
        assert!(deployed.for_cell("a").denies_private());
        assert!(deployed.for_cell("b").denies_private());
        let laptop = policy.for_posture(false);
        assert!(!laptop.for_cell("a").denies_private());
    }

    #[test]
    fn unknown_keys_in_a_cell_are_refused() {
        let typo = serde_json::json!({"cells": {"a": {"allowed_host": ["x"]}}});
        assert!(serde_json::from_value::<EgressPolicy>(typo).is_err());
    }
}
