//! A loopback server in front of an upstream, running on its own task until dropped: what the
//! fault proxy and the replay stub share.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use tokio::net::TcpListener;
use tokio::sync::watch;

pub(crate) struct Served<S> {
    name: &'static str,
    upstream: String,
    addr: SocketAddr,
    pub(crate) shared: Arc<S>,
    shutdown: watch::Sender<bool>,
}

impl<S: Send + Sync + 'static> Served<S> {
    /// Binds `listen` and serves `shared` with `handle` ([`crate::accept`]) until dropped;
    /// `upstream` is only shown by `Debug`.
    pub(crate) async fn bind<H, Fut, E>(
        name: &'static str,
        listen: SocketAddr,
        upstream: &str,
        shared: S,
        refuse: fn(&S) -> bool,
        handle: H,
    ) -> std::io::Result<Self>
    where
        H: Fn(Arc<S>, Request<Incoming>) -> Fut + Copy + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<Response<Full<Bytes>>, E>> + Send + 'static,
        E: Into<Box<dyn std::error::Error + Send + Sync>> + 'static,
    {
        let listener = TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(shared);
        let (shutdown, stop) = watch::channel(false);
        tokio::spawn(crate::accept(
            listener,
            shared.clone(),
            stop,
            refuse,
            handle,
        ));
        Ok(Served {
            name,
            upstream: upstream.trim_end_matches('/').to_string(),
            addr,
            shared,
            shutdown,
        })
    }
}

impl<S> Served<S> {
    /// The endpoint to give a DynamoDB client (`http://127.0.0.1:PORT`).
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl<S> std::fmt::Debug for Served<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(self.name)
            .field("addr", &self.addr)
            .field("upstream", &self.upstream)
            .finish()
    }
}

impl<S> Drop for Served<S> {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
    }
}
