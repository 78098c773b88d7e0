//! The user agent every DynamoDB request carries, built once per process.
//!
//! The SDK's own `UserAgentInterceptor` rebuilds the same header on every request (it reads
//! `AWS_EXECUTION_ENV`, formats seven fields and collects per-request feature codes): ~20k
//! instructions, 6 % of a whole `UpdateItem` (decision 0806). The [`Meter`](super::meter)
//! turns that interceptor off for each request through the SDK's own switch
//! (`DisableInterceptor`, [`disable_sdk_user_agent`]) and sets this header instead: the same
//! fields (SDK, service and version, OS, Rust version, execution environment) plus
//! `app/turnstile`, so CloudTrail's data events tell Turnstile's calls apart. It leaves out the
//! per-request feature codes (`m/...`), which only feed AWS's usage statistics.

use std::sync::OnceLock;

use aws_runtime::user_agent::{ApiMetadata, AwsUserAgent, UserAgentInterceptor};
use aws_smithy_runtime_api::client::interceptors::{disable_interceptor, DisableInterceptor};
use aws_types::app_name::AppName;
use aws_types::os_shim_internal::Env;

/// The application name in the header (`app/turnstile`).
pub const APP_NAME: &str = "turnstile";

/// The header value, computed on first use. Sent as both `user-agent` and `x-amz-user-agent`, as
/// the SDK does.
pub fn header() -> &'static str {
    static UA: OnceLock<String> = OnceLock::new();
    UA.get_or_init(|| {
        let ua = build(Env::real());
        // `AWS_EXECUTION_ENV` is copied as it is: a value a header cannot carry is left out
        // rather than failing every request.
        if http::HeaderValue::from_str(&ua).is_ok() {
            ua
        } else {
            build(Env::from_slice(&[]))
        }
    })
}

fn build(env: Env) -> String {
    let api = ApiMetadata::new("dynamodb", aws_sdk_dynamodb::meta::PKG_VERSION);
    let mut ua = AwsUserAgent::new_from_environment(env, api);
    if let Ok(app) = AppName::new(APP_NAME) {
        ua.set_app_name(app);
    }
    ua.aws_ua_header()
}

/// What the [`Meter`](super::meter) puts in each request's config bag so the SDK skips its own
/// user-agent interceptor for that request.
pub fn disable_sdk_user_agent() -> DisableInterceptor<UserAgentInterceptor> {
    disable_interceptor::<UserAgentInterceptor>(
        "Turnstile sets a user agent built once (dynamo::user_agent)",
    )
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Write};
    use std::net::TcpListener;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use aws_sdk_dynamodb::Client;
    use aws_smithy_runtime_api::box_error::BoxError;
    use aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextRef;
    use aws_smithy_runtime_api::client::interceptors::Intercept;
    use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
    use aws_smithy_types::config_bag::ConfigBag;

    use super::*;
    use crate::dynamo::local_client;

    /// Whether the SDK's user-agent interceptor ran: it leaves its `AwsUserAgent` in the bag.
    #[derive(Debug, Clone, Default)]
    struct Probe(Arc<AtomicBool>);

    impl Intercept for Probe {
        fn name(&self) -> &'static str {
            "UserAgentProbe"
        }

        fn read_before_transmit(
            &self,
            _context: &BeforeTransmitInterceptorContextRef<'_>,
            _runtime_components: &RuntimeComponents,
            cfg: &mut ConfigBag,
        ) -> Result<(), BoxError> {
            self.0
                .store(cfg.load::<AwsUserAgent>().is_some(), Ordering::SeqCst);
            Ok(())
        }
    }

    /// The header lines of the one request a DynamoDB client sends to a socket that answers `{}`,
    /// and whether the SDK's own user-agent interceptor ran for it.
    fn headers_of_one_request() -> (Vec<(String, String)>, bool) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
        let url = format!("http://{}", listener.local_addr().expect("its address"));
        let server = std::thread::spawn(move || {
            let (stream, _) = listener.accept().expect("one connection");
            let mut reader = BufReader::new(stream.try_clone().expect("a second handle"));
            let mut headers = Vec::new();
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).expect("a header line");
                let line = line.trim_end();
                if line.is_empty() {
                    break;
                }
                if let Some((k, v)) = line.split_once(": ") {
                    let k = k.to_ascii_lowercase();
                    if k == "content-length" {
                        length = v.parse().expect("a length");
                    }
                    headers.push((k, v.to_string()));
                }
            }
            let mut body = vec![0u8; length];
            std::io::Read::read_exact(&mut reader, &mut body).expect("the body");
            let mut stream = stream;
            stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/x-amz-json-1.0\r\ncontent-length: 2\r\n\r\n{}")
                .expect("the answer");
            headers
        });
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let probe = Probe::default();
        let config = local_client(&url, None)
            .config()
            .to_builder()
            .interceptor(probe.clone())
            .build();
        runtime
            .block_on(Client::from_conf(config).list_tables().send())
            .expect("ListTables answers");
        let headers = server.join().expect("the server thread");
        (headers, probe.0.load(Ordering::SeqCst))
    }

    #[test]
    fn each_request_carries_one_user_agent_built_once_with_turnstiles_name() {
        let (headers, sdk_interceptor_ran) = headers_of_one_request();
        assert!(
            !sdk_interceptor_ran,
            "the SDK's user-agent interceptor is off"
        );
        for name in ["user-agent", "x-amz-user-agent"] {
            let values: Vec<_> = headers.iter().filter(|(k, _)| k == name).collect();
            assert_eq!(values.len(), 1, "{name}: {headers:?}");
            assert_eq!(values[0].1, header());
        }
        let ua = header();
        assert!(ua.starts_with("aws-sdk-rust/"), "{ua}");
        assert!(ua.contains("api/dynamodb/"), "{ua}");
        assert!(ua.ends_with("app/turnstile"), "{ua}");
        assert!(std::ptr::eq(ua, header()), "built once");
    }

    #[test]
    fn an_execution_environment_a_header_cannot_carry_is_left_out() {
        let lambda = build(Env::from_slice(&[("AWS_EXECUTION_ENV", "AWS_Lambda_rust")]));
        assert!(lambda.contains("exec-env/AWS_Lambda_rust"), "{lambda}");
        let bad = build(Env::from_slice(&[("AWS_EXECUTION_ENV", "a\nb")]));
        assert!(http::HeaderValue::from_str(&bad).is_err(), "{bad}");
        assert!(http::HeaderValue::from_str(&build(Env::from_slice(&[]))).is_ok());
    }
}
