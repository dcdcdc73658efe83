//! Which caller a verified client certificate stands for: the first SAN URI of the form
//! `spiffe://<trust domain>/cell/<cell>/role/<role>` (docs/auth.md, "mTLS between services").
//! A certificate without one gives no caller (its connection is encrypted and its peer known to
//! the CA, but each request still needs a bearer credential). Owns the little DER reading this
//! needs (certificate → extensions → subjectAltName → URIs); the certificate has already been
//! verified by rustls, so this never decides trust, only the name.

use rustls::pki_types::CertificateDer;
use toolplane_auth::{Caller, CallerKind, Role};

/// `2.5.29.17`, subjectAltName.
const SUBJECT_ALT_NAME: &[u8] = &[0x55, 0x1d, 0x11];
const SEQUENCE: u8 = 0x30;
const OID: u8 = 0x06;
const OCTET_STRING: u8 = 0x04;
/// `[3] EXPLICIT Extensions` in a TBSCertificate.
const EXTENSIONS: u8 = 0xa3;
/// `uniformResourceIdentifier [6] IMPLICIT IA5String` in a GeneralName.
const URI_NAME: u8 = 0x86;

/// The caller of a verified end-entity certificate, when one of its SAN URIs names a cell and a
/// role.
pub fn caller_of(cert: &CertificateDer<'_>) -> Option<Caller> {
    san_uris(cert.as_ref())?
        .into_iter()
        .find_map(|uri| caller_of_uri(&uri))
}

/// `spiffe://<trust domain>/cell/<cell>/role/<role>` → an admin, agent or reader of `<cell>`,
/// principal the whole URI. The cell may itself hold `/`; the role is what follows the last
/// `/role/`.
pub fn caller_of_uri(uri: &str) -> Option<Caller> {
    let rest = uri.strip_prefix("spiffe://")?;
    let (domain, path) = rest.split_once('/')?;
    let (cell, role) = path.strip_prefix("cell/")?.rsplit_once("/role/")?;
    if domain.is_empty() || cell.is_empty() {
        return None;
    }
    let role: Role = role.parse().ok()?;
    Some(Caller {
        cell: cell.to_owned(),
        role,
        principal: uri.to_owned(),
        kind: CallerKind::Certificate,
    })
}

/// Every SAN URI of a DER certificate (none when it has no subjectAltName); `None` for bytes
/// that are not a certificate's shape.
fn san_uris(der: &[u8]) -> Option<Vec<String>> {
    let (tag, cert) = Der(der).next()?;
    if tag != SEQUENCE {
        return None;
    }
    let (tag, tbs) = Der(cert).next()?;
    if tag != SEQUENCE {
        return None;
    }
    let mut fields = Der(tbs);
    let extensions = loop {
        let (tag, content) = fields.next()?;
        if tag == EXTENSIONS {
            break content;
        }
    };
    let (tag, list) = Der(extensions).next()?;
    if tag != SEQUENCE {
        return None;
    }
    let mut list = Der(list);
    while let Some((tag, extension)) = list.next() {
        if tag != SEQUENCE {
            return None;
        }
        let mut parts = Der(extension);
        let (tag, oid) = parts.next()?;
        if tag != OID || oid != SUBJECT_ALT_NAME {
            continue;
        }
        // `critical BOOLEAN DEFAULT FALSE` may stand before the value.
        let value = loop {
            let (tag, content) = parts.next()?;
            if tag == OCTET_STRING {
                break content;
            }
        };
        let (tag, names) = Der(value).next()?;
        if tag != SEQUENCE {
            return None;
        }
        let mut uris = Vec::new();
        let mut names = Der(names);
        while let Some((tag, name)) = names.next() {
            if tag == URI_NAME
                && let Ok(uri) = std::str::from_utf8(name)
            {
                uris.push(uri.to_owned());
            }
        }
        return Some(uris);
    }
    Some(Vec::new())
}

/// A reader of DER elements with one-byte tags and definite lengths, each checked against what
/// is left; stops (returns `None`) at anything else.
struct Der<'a>(&'a [u8]);

impl<'a> Der<'a> {
    fn next(&mut self) -> Option<(u8, &'a [u8])> {
        let bytes = self.0;
        let tag = *bytes.first()?;
        if tag & 0x1f == 0x1f {
            return None;
        }
        let first = usize::from(*bytes.get(1)?);
        let (len, header) = if first < 0x80 {
            (first, 2)
        } else {
            let count = first & 0x7f;
            if count == 0 || count > 4 {
                return None;
            }
            let len_bytes = bytes.get(2..2 + count)?;
            let len = len_bytes
                .iter()
                .fold(0usize, |len, byte| (len << 8) | usize::from(*byte));
            (len, 2 + count)
        };
        let end = header.checked_add(len)?;
        let content = bytes.get(header..end)?;
        self.0 = bytes.get(end..)?;
        Some((tag, content))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert_with(sans: Vec<rcgen::SanType>) -> CertificateDer<'static> {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.subject_alt_names = sans;
        params.self_signed(&key).unwrap().der().clone()
    }

    fn uri(text: &str) -> rcgen::SanType {
        rcgen::SanType::URI(text.try_into().unwrap())
    }

    #[test]
    fn a_spiffe_uri_names_the_cell_and_role() {
        let cert = cert_with(vec![
            rcgen::SanType::DnsName("runtime.toolplane".try_into().unwrap()),
            uri("https://example.com/not/this"),
            uri("spiffe://plane.example/cell/team-a/role/admin"),
        ]);
        let caller = caller_of(&cert).unwrap();
        assert_eq!(caller.cell, "team-a");
        assert_eq!(caller.role, Role::Admin);
        assert_eq!(
            caller.principal,
            "spiffe://plane.example/cell/team-a/role/admin"
        );
        assert_eq!(caller.kind, CallerKind::Certificate);
    }

    #[test]
    fn a_certificate_without_such_a_uri_names_no_one() {
        assert_eq!(caller_of(&cert_with(Vec::new())), None);
        let dns_only = cert_with(vec![rcgen::SanType::DnsName(
            "localhost".try_into().unwrap(),
        )]);
        assert_eq!(caller_of(&dns_only), None);
        let bad_role = cert_with(vec![uri("spiffe://d/cell/a/role/root")]);
        assert_eq!(caller_of(&bad_role), None);
        assert_eq!(caller_of(&CertificateDer::from(vec![0x30, 0x85, 1])), None);
    }

    #[test]
    fn uris_are_read_strictly() {
        let cell_with_slash = caller_of_uri("spiffe://d/cell/b/x/role/agent").unwrap();
        assert_eq!(cell_with_slash.cell, "b/x");
        assert_eq!(cell_with_slash.role, Role::Agent);
        for bad in [
            "spiffe://d/cell//role/agent",
            "spiffe:///cell/a/role/agent",
            "spiffe://d/cells/a/role/agent",
            "spiffe://d/cell/a/role/",
            "https://d/cell/a/role/agent",
            "spiffe://d/cell/a",
        ] {
            assert_eq!(caller_of_uri(bad), None, "{bad}");
        }
    }
}
