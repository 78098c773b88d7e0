//! Fetching the JWKS: OIDC discovery when no URL is configured, HTTPS only (plain HTTP for a
//! loopback host, i.e. tests), a time limit and a size limit. The hyper + rustls client the AWS SDK
//! already links, on the same aws-lc-rs provider, with the system's root certificates.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, Request, StatusCode};
use http_body_util::{BodyExt, Empty, Limited};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::{Client, ResponseFuture};
use hyper_util::rt::TokioExecutor;
use serde::Deserialize;

use super::config::{check_url, OidcConfig};
use super::quote::quoted;

/// One fetch (discovery and JWKS together) takes at most this long; callers wait for it.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(3);
/// A JWKS is a few KB; anything this large is not one.
const MAX_DOCUMENT: usize = 256 * 1024;

type Body = Empty<Bytes>;

/// Fetches the JWKS; holds the clients and the discovered JWKS URL between fetches.
pub(crate) struct Fetcher {
    issuer: String,
    /// Configured, or learnt from discovery (once per process: issuers do not move it).
    jwks_url: Option<String>,
    plain: Option<Client<HttpConnector, Body>>,
    /// Built at the first HTTPS fetch: reading the system's root certificates is I/O.
    tls: Option<Client<HttpsConnector<HttpConnector>, Body>>,
}

impl Fetcher {
    pub(crate) fn new(config: &OidcConfig) -> Self {
        Fetcher {
            issuer: config.issuer.clone(),
            jwks_url: config.jwks_url.clone(),
            plain: None,
            tls: None,
        }
    }

    /// The JWKS document's bytes, or why not (a message naming the URL, for logs and 500s).
    pub(crate) async fn jwks(&mut self) -> Result<Vec<u8>, String> {
        tokio::time::timeout(FETCH_TIMEOUT, self.fetch_jwks())
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {FETCH_TIMEOUT:?}")))
    }

    async fn fetch_jwks(&mut self) -> Result<Vec<u8>, String> {
        let url = match &self.jwks_url {
            Some(url) => url.clone(),
            None => {
                let url = self.discover().await?;
                self.jwks_url = Some(url.clone());
                url
            }
        };
        self.get(&url).await
    }

    /// `jwks_uri` from the issuer's OpenID configuration, which must name the same issuer.
    async fn discover(&mut self) -> Result<String, String> {
        #[derive(Deserialize)]
        struct Discovery {
            issuer: String,
            jwks_uri: String,
        }
        let url = format!(
            "{}/.well-known/openid-configuration",
            self.issuer.trim_end_matches('/')
        );
        let body = self.get(&url).await?;
        let doc: Discovery = serde_json::from_slice(&body)
            .map_err(|_| format!("{url}: not an OpenID configuration with a jwks_uri"))?;
        if doc.issuer != self.issuer {
            return Err(format!(
                "{url} is for issuer {:?}, not {:?}",
                quoted(&doc.issuer),
                self.issuer
            ));
        }
        check_url(&doc.jwks_uri)
            .map_err(|e| format!("{url}: jwks_uri {:?}: {e}", quoted(&doc.jwks_uri)))?;
        Ok(doc.jwks_uri)
    }

    async fn get(&mut self, url: &str) -> Result<Vec<u8>, String> {
        let uri = check_url(url).map_err(|e| format!("{url}: {e}"))?;
        let https = uri.scheme_str() == Some("https");
        let request = Request::get(uri)
            .header(header::ACCEPT, "application/json")
            .body(Body::new())
            .map_err(|e| format!("{url}: {e}"))?;
        let response = self
            .send(https, request)?
            .await
            .map_err(|e| format!("GET {url}: {}", chain(&e)))?;
        if response.status() != StatusCode::OK {
            return Err(format!("GET {url}: HTTP {}", response.status()));
        }
        let body = Limited::new(response.into_body(), MAX_DOCUMENT)
            .collect()
            .await
            .map_err(|e| format!("GET {url}: reading the body: {e}"))?;
        Ok(body.to_bytes().to_vec())
    }

    fn send(&mut self, https: bool, request: Request<Body>) -> Result<ResponseFuture, String> {
        // No idle connections: fetches are an hour apart, and a Lambda sandbox frozen in between
        // would find a pooled connection dead.
        let builder = || {
            let mut b = Client::builder(TokioExecutor::new());
            b.pool_max_idle_per_host(0);
            b
        };
        if !https {
            let client = self
                .plain
                .get_or_insert_with(|| builder().build(HttpConnector::new()));
            return Ok(client.request(request));
        }
        if self.tls.is_none() {
            let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
            let connector = HttpsConnectorBuilder::new()
                .with_provider_and_native_roots(provider)
                .map_err(|e| format!("no TLS roots: {e}"))?
                .https_only()
                .enable_http1()
                .build();
            self.tls = Some(builder().build(connector));
        }
        match &self.tls {
            Some(client) => Ok(client.request(request)),
            None => Err("no TLS client".into()),
        }
    }
}

/// An error and its sources on one line ("client error (Connect): tcp connect error: ...").
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn https_everywhere_http_only_on_loopback() {
        for ok in [
            "https://cognito-idp.eu-west-1.amazonaws.com/eu-west-1_abc",
            "https://idp.example.com:8443/keys?x=1",
            "http://127.0.0.1:8080/jwks",
            "http://127.0.0.9/jwks",
            "http://[::1]:9/jwks",
            "http://localhost/jwks",
        ] {
            assert!(check_url(ok).is_ok(), "{ok}");
        }
        for bad in [
            "http://idp.example.com/jwks",
            "http://10.0.0.1/jwks",
            "http://[::2]/jwks",
            "http://localhost.example.com/jwks",
            "ftp://127.0.0.1/jwks",
            "file:///etc/passwd",
            "/jwks",
            "idp.example.com",
            "https://",
            "",
        ] {
            assert!(check_url(bad).is_err(), "{bad}");
        }
    }
}
