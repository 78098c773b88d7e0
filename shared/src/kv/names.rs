//! Limit names and their id formats (as in Boulder's `ratelimits`). Names are declared by the
//! deployment in the limits file, each with a number (interned into bucket keys) and the format its
//! ids must have. Every id, from the file or from a request, goes through [`IdFormat::canonical`],
//! so `2001:0db8::1` and `2001:db8::1`, or `a.com,b.com` and `b.com,a.com`, name the same bucket.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use ipnet::Ipv6Net;
use serde::Serialize;

/// Longest accepted id, in bytes. DynamoDB partition keys are at most 2,048 bytes; this leaves room
/// for the name number and keeps items small.
pub const MAX_ID_LEN: usize = 1024;

/// Longest accepted limit name.
pub const MAX_NAME_LEN: usize = 64;

/// How the ids of a limit name look.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum IdFormat {
    /// An IPv4 or IPv6 address; stored in its canonical text form.
    #[serde(rename = "ipAddress")]
    IpAddress,
    /// An IPv6 network with exactly a /48 mask, given by its network address.
    #[serde(rename = "ipv6RangeCIDR")]
    Ipv6RangeCidr,
    /// A registration (account) id: a positive integer.
    #[serde(rename = "regId")]
    RegId,
    /// `regId:domain`.
    #[serde(rename = "regId:domain")]
    RegIdDomain,
    /// `regId:fqdnSet`: comma-separated domains, order-insensitive (stored sorted, de-duplicated).
    #[serde(rename = "regId:fqdnSet")]
    RegIdFqdnSet,
    /// Any non-empty string of printable characters.
    #[serde(rename = "string")]
    String,
}

impl IdFormat {
    pub const ALL: [IdFormat; 6] = [
        IdFormat::IpAddress,
        IdFormat::Ipv6RangeCidr,
        IdFormat::RegId,
        IdFormat::RegIdDomain,
        IdFormat::RegIdFqdnSet,
        IdFormat::String,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            IdFormat::IpAddress => "ipAddress",
            IdFormat::Ipv6RangeCidr => "ipv6RangeCIDR",
            IdFormat::RegId => "regId",
            IdFormat::RegIdDomain => "regId:domain",
            IdFormat::RegIdFqdnSet => "regId:fqdnSet",
            IdFormat::String => "string",
        }
    }

    /// Checks `raw` against the format and returns its canonical form (the one bucket keys use), or
    /// the reason it does not match.
    pub fn canonical(self, raw: &str) -> Result<String, String> {
        if raw.is_empty() {
            return Err("the id is empty".into());
        }
        if raw.len() > MAX_ID_LEN {
            return Err(format!(
                "the id is {} bytes long; the limit is {MAX_ID_LEN}",
                raw.len()
            ));
        }
        match self {
            IdFormat::IpAddress => IpAddr::from_str(raw)
                .map(|ip| ip.to_string())
                .map_err(|_| format!("{raw:?} is not an IPv4 or IPv6 address")),
            IdFormat::Ipv6RangeCidr => {
                let net = Ipv6Net::from_str(raw)
                    .map_err(|_| format!("{raw:?} is not an IPv6 range in CIDR notation"))?;
                if net.prefix_len() != 48 {
                    return Err(format!(
                        "{raw:?} has a /{} mask; ipv6RangeCIDR ids must be exactly /48",
                        net.prefix_len()
                    ));
                }
                if net.addr() != net.network() {
                    return Err(format!(
                        "{raw:?} is not the network address of its /48 (that is {})",
                        net.trunc()
                    ));
                }
                Ok(net.to_string())
            }
            IdFormat::RegId => reg_id(raw),
            IdFormat::RegIdDomain => {
                let (reg, domain) = raw
                    .split_once(':')
                    .ok_or_else(|| format!("{raw:?} is not of the form regId:domain"))?;
                Ok(format!("{}:{}", reg_id(reg)?, domain_name(domain)?))
            }
            IdFormat::RegIdFqdnSet => {
                let (reg, set) = raw
                    .split_once(':')
                    .ok_or_else(|| format!("{raw:?} is not of the form regId:fqdnSet"))?;
                let mut domains = set
                    .split(',')
                    .map(domain_name)
                    .collect::<Result<Vec<_>, _>>()?;
                domains.sort();
                domains.dedup();
                Ok(format!("{}:{}", reg_id(reg)?, domains.join(",")))
            }
            IdFormat::String => {
                if let Some(c) = raw.chars().find(|c| c.is_control()) {
                    return Err(format!("the id contains the control character {c:?}"));
                }
                Ok(raw.to_string())
            }
        }
    }
}

impl fmt::Display for IdFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for IdFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        IdFormat::ALL
            .into_iter()
            .find(|f| f.as_str() == s)
            .ok_or_else(|| {
                let known: Vec<_> = IdFormat::ALL.iter().map(|f| f.as_str()).collect();
                format!("unknown id format {s:?}; known: {}", known.join(", "))
            })
    }
}

/// A registration id: decimal digits, no sign, no leading zero, not zero, fits in an i64 (as
/// Boulder's).
fn reg_id(raw: &str) -> Result<String, String> {
    let ok = !raw.is_empty()
        && raw.bytes().all(|b| b.is_ascii_digit())
        && !raw.starts_with('0')
        && raw.parse::<i64>().is_ok();
    if ok {
        Ok(raw.to_string())
    } else {
        Err(format!(
            "{raw:?} is not a registration id (a positive integer)"
        ))
    }
}

/// A DNS name: dot-separated labels of letters, digits and inner hyphens, 1-63 bytes each, 253 in
/// all; lower-cased. A leading `*.` (a wildcard certificate name) is kept.
fn domain_name(raw: &str) -> Result<String, String> {
    let lower = raw.to_ascii_lowercase();
    let body = lower.strip_prefix("*.").unwrap_or(&lower);
    let label_ok = |l: &str| {
        (1..=63).contains(&l.len())
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if body.is_empty() || lower.len() > 253 || !body.split('.').all(label_ok) {
        return Err(format!("{raw:?} is not a domain name"));
    }
    Ok(lower)
}

/// Checks a limit name: 1-64 letters, digits or `_`, starting with a letter (a `:` would make
/// `Name:id` ambiguous).
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a limit name (1-{MAX_NAME_LEN} letters, digits or '_', starting with a letter)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_addresses_are_canonicalised() {
        let f = IdFormat::IpAddress;
        assert_eq!(f.canonical("10.0.0.1").unwrap(), "10.0.0.1");
        assert_eq!(
            f.canonical("2001:0db8:0000:0000:0000:ff00:0042:8329")
                .unwrap(),
            "2001:db8::ff00:42:8329"
        );
        assert!(f.canonical("10.0.0.256").is_err());
        assert!(f.canonical("example.com").is_err());
        assert!(f.canonical("").is_err());
    }

    #[test]
    fn ipv6_ranges_must_be_exactly_a_48() {
        let f = IdFormat::Ipv6RangeCidr;
        assert_eq!(f.canonical("2001:0db8:0000::/48").unwrap(), "2001:db8::/48");
        assert!(f.canonical("2001:db8::/64").unwrap_err().contains("/64"));
        assert!(f
            .canonical("2001:db8:0:1::/48")
            .unwrap_err()
            .contains("network address"));
        assert!(f.canonical("10.0.0.0/8").is_err());
        assert!(f.canonical("2001:db8::").is_err());
    }

    #[test]
    fn registration_ids_and_domains() {
        assert_eq!(IdFormat::RegId.canonical("12345678").unwrap(), "12345678");
        for bad in ["0", "012", "-1", "1.5", "abc", "99999999999999999999"] {
            assert!(IdFormat::RegId.canonical(bad).is_err(), "{bad}");
        }
        assert_eq!(
            IdFormat::RegIdDomain
                .canonical("12345678:Example.COM")
                .unwrap(),
            "12345678:example.com"
        );
        assert!(IdFormat::RegIdDomain.canonical("12345678").is_err());
        assert!(IdFormat::RegIdDomain.canonical("x:example.com").is_err());
        assert!(IdFormat::RegIdDomain.canonical("1:exa mple.com").is_err());
        assert!(IdFormat::RegIdDomain.canonical("1:-bad.com").is_err());
    }

    #[test]
    fn fqdn_sets_are_order_insensitive() {
        let f = IdFormat::RegIdFqdnSet;
        let a = f.canonical("12345678:example.org,example.com").unwrap();
        let b = f.canonical("12345678:example.com,EXAMPLE.org").unwrap();
        assert_eq!(a, "12345678:example.com,example.org");
        assert_eq!(a, b);
        assert_eq!(f.canonical("1:b.com,a.com,b.com").unwrap(), "1:a.com,b.com");
        assert!(f.canonical("1:a.com,,b.com").is_err());
    }

    #[test]
    fn free_form_strings_and_names() {
        assert_eq!(
            IdFormat::String.canonical("tenant acme/eu").unwrap(),
            "tenant acme/eu"
        );
        assert!(IdFormat::String.canonical("a\nb").is_err());
        assert!(IdFormat::String.canonical(&"x".repeat(2000)).is_err());
        assert!(check_name("NewOrdersPerAccount").is_ok());
        assert!(check_name("").is_err());
        assert!(check_name("Has:Colon").is_err());
        assert!(check_name("1Leading").is_err());
        assert_eq!(
            "regId:fqdnSet".parse::<IdFormat>().unwrap(),
            IdFormat::RegIdFqdnSet
        );
        assert!("ip".parse::<IdFormat>().is_err());
    }
}

/// Property tests (docs/testing.md): ids from requests and the limits file.
#[cfg(test)]
mod fuzz_tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(crate::fuzz::config(1))]

        /// `fuzz_id_formats`: any text in any format is accepted in a canonical form that is a
        /// fixed point (canonicalising it again changes nothing) and fits the length limit, or is
        /// refused with a reason.
        #[test]
        fn fuzz_id_formats(
            raw in prop_oneof![
                crate::fuzz::text(),
                "[0-9]{1,12}:[a-zA-Z0-9.,-]{0,40}",
                "[0-9a-fA-F:.]{2,45}(/[0-9]{1,3})?",
            ],
            format in proptest::sample::select(&IdFormat::ALL),
        ) {
            match format.canonical(&raw) {
                Ok(c) => {
                    prop_assert!(!c.is_empty() && c.len() <= MAX_ID_LEN, "{:?}", c);
                    prop_assert_eq!(format.canonical(&c), Ok(c.clone()));
                }
                Err(reason) => prop_assert!(!reason.is_empty()),
            }
            let _ = raw.parse::<IdFormat>();
            let _ = check_name(&raw);
        }
    }
}
