//! Where a `$connect` request carries its credential. Browsers cannot set headers on a WebSocket
//! handshake, so there are two places: the subprotocol list (`new WebSocket(url, ["turnstile",
//! credential])`, sent as `Sec-WebSocket-Protocol: turnstile, <credential>`), which stays out of
//! URL logs, and the query string (`ticket=` for a connect ticket, taken only from tenants that
//! allow it; `token=` for an OIDC JWT).

use aws_lambda_events::apigw::ApiGatewayCustomAuthorizerRequestTypeRequest;
use aws_lambda_events::query_map::QueryMap;

use super::{QUERY_PARAM, SUBPROTOCOL, VERSION};

/// The query parameter an OIDC JWT may come in.
pub const JWT_QUERY_PARAM: &str = "token";
/// The handshake header that lists the client's subprotocols.
pub const PROTOCOL_HEADER: &str = "sec-websocket-protocol";

/// One credential, by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credential<'a> {
    Ticket(&'a str),
    Jwt(&'a str),
}

/// What a request presented.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Presented<'a> {
    pub credential: Option<Credential<'a>>,
    /// The credential came in the query string (and so sits in URL logs).
    pub in_query: bool,
    /// The client offered the `turnstile` subprotocol: `$connect` must answer it.
    pub subprotocol: bool,
}

/// A credential in the subprotocol list is a ticket when it has the ticket prefix, else a JWT.
fn classify(value: &str) -> Credential<'_> {
    if value.starts_with(VERSION) && value[VERSION.len()..].starts_with('.') {
        Credential::Ticket(value)
    } else {
        Credential::Jwt(value)
    }
}

/// The one value of `name`, refusing repeats (`?ticket=a&ticket=b` could be read two ways). API
/// Gateway gives `queryStringParameters` one value per name (the last one) and every value only
/// in `multiValueQueryStringParameters`, so both are read.
fn single<'q>(
    event: &'q ApiGatewayCustomAuthorizerRequestTypeRequest,
    name: &'static str,
) -> Result<Option<&'q str>, String> {
    let (one, all) = (
        &event.query_string_parameters,
        &event.multi_value_query_string_parameters,
    );
    let repeated = |q: &QueryMap| q.all(name).is_some_and(|v| v.len() > 1);
    if repeated(one) || repeated(all) {
        return Err(format!("the query names {name} more than once"));
    }
    Ok(one.first(name).or_else(|| all.first(name)))
}

/// Whether a handshake's headers offer the `turnstile` subprotocol (`$connect` answers it).
pub fn offers_subprotocol(headers: &http::HeaderMap) -> bool {
    headers
        .get_all(PROTOCOL_HEADER)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|list| list.split(',').any(|e| e.trim() == SUBPROTOCOL))
}

/// Reads the credential of an authorizer request. At most one may be given; a refusal's message
/// names the places, never the values.
pub fn presented(
    event: &ApiGatewayCustomAuthorizerRequestTypeRequest,
) -> Result<Presented<'_>, String> {
    let mut found: Vec<Credential<'_>> = Vec::new();
    if let Some(t) = single(event, QUERY_PARAM)? {
        found.push(Credential::Ticket(t));
    }
    if let Some(t) = single(event, JWT_QUERY_PARAM)? {
        found.push(Credential::Jwt(t));
    }
    let in_query = !found.is_empty();
    let mut subprotocol = false;
    for value in event.headers.get_all(PROTOCOL_HEADER) {
        let Ok(list) = value.to_str() else {
            return Err("the Sec-WebSocket-Protocol header is not text".into());
        };
        let entries: Vec<&str> = list
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .collect();
        if !entries.contains(&SUBPROTOCOL) {
            continue;
        }
        subprotocol = true;
        found.extend(
            entries
                .into_iter()
                .filter(|e| *e != SUBPROTOCOL)
                .map(classify),
        );
    }
    if found.len() > 1 {
        return Err(format!(
            "the request carries {} credentials (query {QUERY_PARAM}/{JWT_QUERY_PARAM} and \
             the subprotocol list); send exactly one",
            found.len()
        ));
    }
    Ok(Presented {
        credential: found.pop(),
        in_query,
        subprotocol,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use std::collections::HashMap;

    fn event(
        query: &[(&str, &str)],
        protocol: Option<&str>,
    ) -> ApiGatewayCustomAuthorizerRequestTypeRequest {
        let mut e = ApiGatewayCustomAuthorizerRequestTypeRequest::default();
        // As API Gateway sends a query: every value in the multi-value map, the last one of
        // each name in the single-value map.
        let mut all: HashMap<String, Vec<String>> = HashMap::new();
        let mut last: HashMap<String, String> = HashMap::new();
        for (k, v) in query {
            all.entry(k.to_string()).or_default().push(v.to_string());
            last.insert(k.to_string(), v.to_string());
        }
        e.multi_value_query_string_parameters = QueryMap::from(all);
        e.query_string_parameters = QueryMap::from(last);
        if let Some(p) = protocol {
            e.headers
                .insert("Sec-WebSocket-Protocol", HeaderValue::from_str(p).unwrap());
        }
        e
    }

    /// What `presented` reads, owned: the credential as `kind:value`, and the subprotocol flag.
    fn read(
        query: &[(&str, &str)],
        protocol: Option<&str>,
    ) -> Result<(Option<String>, bool), String> {
        let e = event(query, protocol);
        let p = presented(&e)?;
        let c = p.credential.map(|c| match c {
            Credential::Ticket(t) => format!("ticket:{t}"),
            Credential::Jwt(t) => format!("jwt:{t}"),
        });
        assert_eq!(
            p.in_query,
            c.is_some() && !p.subprotocol,
            "{query:?} {protocol:?}"
        );
        Ok((c, p.subprotocol))
    }

    #[test]
    fn a_credential_is_read_from_the_query_or_the_subprotocol_list() {
        let some = |s: &str| Some(s.to_string());
        assert_eq!(
            read(&[("ticket", "tst1.k.a.b")], None),
            Ok((some("ticket:tst1.k.a.b"), false))
        );
        assert_eq!(
            read(&[("token", "h.p.s")], None),
            Ok((some("jwt:h.p.s"), false))
        );
        assert_eq!(
            read(&[], Some("turnstile, tst1.k.a.b")),
            Ok((some("ticket:tst1.k.a.b"), true))
        );
        assert_eq!(
            read(&[], Some("turnstile,eyJ.eyJ.sig")),
            Ok((some("jwt:eyJ.eyJ.sig"), true))
        );
        // Another application's subprotocols are not ours to read.
        assert_eq!(read(&[], Some("graphql-ws, tst1.k.a.b")), Ok((None, false)));
        assert_eq!(read(&[("tenantId", "a")], None), Ok((None, false)));
    }

    #[test]
    fn two_credentials_or_a_repeated_parameter_are_refused_without_their_values() {
        let e = read(&[("ticket", "SECRET1")], Some("turnstile, SECRET2")).unwrap_err();
        assert!(!e.contains("SECRET"), "{e}");
        let e = read(&[("ticket", "SECRET1"), ("ticket", "SECRET2")], None).unwrap_err();
        assert!(e.contains("more than once") && !e.contains("SECRET"), "{e}");
        assert!(read(&[], Some("turnstile, a, b")).is_err());
    }

    #[test]
    fn a_repeat_seen_only_in_the_multi_value_query_is_refused() {
        let mut e = event(&[("ticket", "SECRET2")], None);
        let both = vec!["SECRET1".to_string(), "SECRET2".to_string()];
        e.multi_value_query_string_parameters =
            QueryMap::from(HashMap::from([("ticket".to_string(), both)]));
        let err = presented(&e).unwrap_err();
        assert!(
            err.contains("more than once") && !err.contains("SECRET"),
            "{err}"
        );
    }
}
