//! A minimal HTTP/1.1 client for tests of the local stack: one request per connection, so what is
//! asserted is exactly what a client on the wire sees.

use std::collections::HashMap;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    /// Lower-cased names.
    pub headers: HashMap<String, String>,
    pub body: String,
}

impl Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// Sends `method url` (an `http://host:port/path?query` URL) with an optional body.
pub async fn request(method: &str, url: &str, body: Option<&str>) -> std::io::Result<Reply> {
    request_with(method, url, &[], body).await
}

/// [`request`] with extra request headers.
pub async fn request_with(
    method: &str,
    url: &str,
    extra_headers: &[(&str, &str)],
    body: Option<&str>,
) -> std::io::Result<Reply> {
    let mut headers = vec![("Content-Type", "application/json")];
    headers.extend_from_slice(extra_headers);
    request_exact(method, url, &headers, body).await
}

/// Sends `method url` with exactly these headers besides `Host`, `User-Agent`, `Content-Length`
/// and `Connection` (no `Content-Type` unless given): what a browser or `curl -d` sends.
pub async fn request_exact(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> std::io::Result<Reply> {
    let rest = url.strip_prefix("http://").unwrap_or(url);
    let (host, path) = rest
        .split_once('/')
        .map_or((rest, "/".to_string()), |(h, p)| (h, format!("/{p}")));
    let mut stream = TcpStream::connect(host).await?;
    let body = body.unwrap_or("");
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: turnstile-tests\r\nContent-Length: {}\r\n{}Connection: close\r\n\r\n{body}",
        body.len(),
        headers
            .iter()
            .map(|(k, v)| format!("{k}: {v}\r\n"))
            .collect::<String>()
    );
    stream.write_all(req.as_bytes()).await?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let headers: HashMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let body = if headers
        .get("transfer-encoding")
        .is_some_and(|v| v.contains("chunked"))
    {
        dechunk(rest)
    } else {
        rest.to_string()
    };
    Ok(Reply {
        status,
        headers,
        body,
    })
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}
