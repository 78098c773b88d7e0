//! The tenant setting that picks how the per-minute connection limits are enforced (a
//! tenant row attribute, carried in the authorizer context).

/// How a per-window limit (the per-minute connection limits) is enforced, chosen per tenant.
/// `Fixed` is the AWS WebSocket sample's minute window (one counter per `floor(epoch/60)`), which
/// lets up to twice the limit through across a window boundary; `Gcra` is a bucket of
/// `Rate::per_minute(limit)` spent with a [`SpendPlan`](crate::gcra_write::SpendPlan), which never
/// does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WindowAlgorithm {
    #[default]
    Fixed,
    Gcra,
}

impl WindowAlgorithm {
    /// The name stored on the tenant row and in the authorizer context.
    pub fn as_str(self) -> &'static str {
        match self {
            WindowAlgorithm::Fixed => "fixed",
            WindowAlgorithm::Gcra => "gcra",
        }
    }
}

impl std::fmt::Display for WindowAlgorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for WindowAlgorithm {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "fixed" => Ok(WindowAlgorithm::Fixed),
            "gcra" => Ok(WindowAlgorithm::Gcra),
            other => Err(format!(
                "{other:?} is not a window algorithm (fixed or gcra)"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_algorithms_parse() {
        assert_eq!(
            "gcra".parse::<WindowAlgorithm>().unwrap(),
            WindowAlgorithm::Gcra
        );
        assert_eq!(
            "fixed".parse::<WindowAlgorithm>().unwrap(),
            WindowAlgorithm::Fixed
        );
        assert_eq!(WindowAlgorithm::default(), WindowAlgorithm::Fixed);
        assert!("sliding".parse::<WindowAlgorithm>().is_err());
    }
}
