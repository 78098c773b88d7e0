//! A tenant's operating policy, next to its limits: whether refusals are enforced or only reported
//! (`enforcement`, shadow mode) and what its requests get when DynamoDB fails or runs out of time
//! (`onFailure`). Both are optional on the tenant row and in the authorizer context; absent means
//! the safe default (enforce, fail closed). See docs/operations.md and decision 1000.

use serde::{Deserialize, Serialize};

/// `enforcement`: `enforce` (default) refuses over a limit; `shadow` decides exactly the same,
/// logs and meters a would-refuse (`shadow_refused`), and lets the request through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Enforcement {
    #[default]
    Enforce,
    Shadow,
}

/// `onFailure`: `closed` (default) answers a DynamoDB failure or timeout with a 5xx; `open` lets the
/// request through unaccounted (metered `fail_open`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnFailure {
    #[default]
    Closed,
    Open,
}

/// `connectAuth`: what a `$connect` must present for this tenant (decision 2100). `ticket`
/// (default, also for rows written before the attribute existed): a connect ticket from the session
/// API; `jwt`: an OIDC token whose tenant claim is the tenant; `none`: nothing — anyone who knows a
/// session's id joins it (the AWS sample's behaviour, insecure, only when named).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ConnectAuth {
    #[default]
    Ticket,
    Jwt,
    None,
}

macro_rules! named {
    ($t:ident, $what:literal, $($v:ident => $s:literal),+) => {
        impl $t {
            /// The name stored on the tenant row and in the authorizer context.
            pub fn as_str(self) -> &'static str {
                match self { $($t::$v => $s),+ }
            }
        }
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
        impl std::str::FromStr for $t {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($s => Ok($t::$v),)+
                    other => Err(format!(concat!("{:?} is not ", $what), other)),
                }
            }
        }
    };
}

impl ConnectAuth {
    /// Whether a connection admitted with `used` meets this requirement: the same mode, or `none`
    /// (which asks nothing). `ticket` and `jwt` are not ordered: a connection that presented one
    /// never showed the other. The authorizer admits by it, and `$default` closes a connection
    /// admitted under a mode its tenant no longer accepts.
    pub fn admits(self, used: ConnectAuth) -> bool {
        self == used || self == ConnectAuth::None
    }
}

named!(Enforcement, "an enforcement (enforce or shadow)", Enforce => "enforce", Shadow => "shadow");
named!(OnFailure, "a failure policy (closed or open)", Closed => "closed", Open => "open");
named!(ConnectAuth, "a connect authentication (ticket, jwt or none)", Ticket => "ticket", Jwt => "jwt", None => "none");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_parse_their_names_and_refuse_others() {
        assert_eq!("shadow".parse(), Ok(Enforcement::Shadow));
        assert_eq!("enforce".parse(), Ok(Enforcement::Enforce));
        assert_eq!("open".parse(), Ok(OnFailure::Open));
        assert_eq!(OnFailure::default().to_string(), "closed");
        assert!("Shadow"
            .parse::<Enforcement>()
            .unwrap_err()
            .contains("enforce or shadow"));
        assert!("fail".parse::<OnFailure>().is_err());
        assert_eq!(ConnectAuth::default(), ConnectAuth::Ticket);
        assert_eq!("none".parse(), Ok(ConnectAuth::None));
        assert!("off".parse::<ConnectAuth>().is_err());
        use ConnectAuth::{Jwt, None as Open, Ticket};
        for (wanted, used, ok) in [
            (Open, Open, true),
            (Open, Ticket, true),
            (Ticket, Ticket, true),
            (Ticket, Open, false),
            (Ticket, Jwt, false),
            (Jwt, Ticket, false),
            (Jwt, Open, false),
        ] {
            assert_eq!(wanted.admits(used), ok, "{wanted} admits {used}");
        }
    }
}
