//! Requests held back and delivered late: the proxy keeps a covered request instead of forwarding
//! it, and forwards it only when the test says so ([`crate::FaultProxy::deliver`]). Its client
//! meanwhile waits; if it gives up first (its timeout), the request is still delivered later,
//! after the client's resends and after other clients' requests — the "timed out but still in
//! flight" case, where a write lands after the writes that followed it. Nothing is random: which
//! covered requests are held is the policy's list, and the test chooses when each lands.

use std::sync::Mutex;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, Uri};
use http_body_util::Full;
use tokio::sync::{oneshot, watch};

/// Why a held request could not be delivered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeliverError {
    #[error("no request {0} is held (requests are numbered from 0 in the order they were held)")]
    NotHeld(usize),
    #[error("held request {0} was already delivered")]
    AlreadyDelivered(usize),
    #[error("the upstream did not answer held request {index}: {detail}")]
    Upstream { index: usize, detail: String },
}

/// What delivering a held request came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    /// The upstream's HTTP status (200: applied, 400: e.g. its condition failed when it landed).
    pub status: u16,
    /// The upstream's answer body (DynamoDB's JSON).
    pub body: Bytes,
    /// Whether its client was still waiting for the answer (false: it had given up, so the
    /// request landed after the client stopped waiting for it).
    pub client_waiting: bool,
}

/// One held request: what is needed to forward it, and where its client waits.
struct Held {
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
    answer: Option<oneshot::Sender<Response<Full<Bytes>>>>,
    delivered: bool,
}

/// The requests held since the proxy started, in the order they were held (a new policy does not
/// forget them: a test may switch policies before it delivers).
pub(crate) struct Late {
    held: Mutex<Vec<Held>>,
    count: watch::Sender<usize>,
}

impl Default for Late {
    fn default() -> Self {
        Late {
            held: Mutex::new(Vec::new()),
            count: watch::channel(0).0,
        }
    }
}

/// The request to forward and the channel its answer goes back on.
pub(crate) struct Taken {
    pub parts: http::request::Parts,
    pub body: Bytes,
    pub answer: Option<oneshot::Sender<Response<Full<Bytes>>>>,
}

impl Late {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Held>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Holds a request; the receiver gets its answer once it is delivered (never, if it is not).
    pub(crate) fn hold(
        &self,
        parts: &http::request::Parts,
        body: Bytes,
    ) -> oneshot::Receiver<Response<Full<Bytes>>> {
        let (tx, rx) = oneshot::channel();
        let n = {
            let mut held = self.lock();
            held.push(Held {
                method: parts.method.clone(),
                uri: parts.uri.clone(),
                headers: parts.headers.clone(),
                body,
                answer: Some(tx),
                delivered: false,
            });
            held.len()
        };
        self.count.send_replace(n);
        rx
    }

    /// Waits until at least `n` requests have been held (since the proxy started).
    pub(crate) async fn wait(&self, n: usize) {
        let mut rx = self.count.subscribe();
        // The sender lives as long as `self`, so this ends only when the count is reached.
        let _ = rx.wait_for(|c| *c >= n).await;
    }

    /// Takes request `index` out for delivery (it can be delivered once).
    pub(crate) fn take(&self, index: usize) -> Result<Taken, DeliverError> {
        let mut held = self.lock();
        let h = held.get_mut(index).ok_or(DeliverError::NotHeld(index))?;
        if h.delivered {
            return Err(DeliverError::AlreadyDelivered(index));
        }
        h.delivered = true;
        let mut req = Request::new(());
        *req.method_mut() = h.method.clone();
        *req.uri_mut() = h.uri.clone();
        *req.headers_mut() = h.headers.clone();
        let (parts, ()) = req.into_parts();
        Ok(Taken {
            parts,
            body: h.body.clone(),
            answer: h.answer.take(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts() -> http::request::Parts {
        Request::post("/").body(()).unwrap().into_parts().0
    }

    #[tokio::test]
    async fn held_requests_are_numbered_in_order_and_delivered_once() {
        let late = Late::default();
        let _a = late.hold(&parts(), Bytes::from_static(b"a"));
        let _b = late.hold(&parts(), Bytes::from_static(b"b"));
        late.wait(2).await;
        assert_eq!(late.take(1).unwrap().body, Bytes::from_static(b"b"));
        assert_eq!(late.take(1).err(), Some(DeliverError::AlreadyDelivered(1)));
        assert_eq!(late.take(2).err(), Some(DeliverError::NotHeld(2)));
        assert_eq!(late.take(0).unwrap().body, Bytes::from_static(b"a"));
    }
}
