//! How an operation's answer reaches an asyncio loop without a runtime thread entering the
//! interpreter: the runtime thread queues the answer on the loop's [`Completions`] and, if the queue
//! was idle, writes one byte to a socket the loop watches (`loop.add_reader`); the loop's own thread
//! then drains the queue, holding the GIL it already has, and resolves the futures. Several answers
//! that arrive together cost the loop one wake-up, and no runtime thread ever takes the GIL (or makes
//! and frees an interpreter thread state for it, which cost more than the rest of the handoff).

use std::cell::RefCell;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixDatagram;
use std::sync::{Arc, Mutex, MutexGuard};

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyWeakrefMethods, PyWeakrefReference};

use crate::bridge::ToPy;
use crate::failure::Failure;

/// An answer turned into a Python object on the loop's thread.
pub trait Answer: Send {
    fn into_py(self: Box<Self>, py: Python<'_>) -> PyResult<Py<PyAny>>;
}

impl<T: ToPy> Answer for T {
    fn into_py(self: Box<Self>, py: Python<'_>) -> PyResult<Py<PyAny>> {
        (*self).to_py(py)
    }
}

/// One finished operation: the future it resolves and its answer or failure.
struct Done {
    future: Py<PyAny>,
    out: Result<Box<dyn Answer>, Failure>,
}

#[derive(Default)]
struct Queue {
    done: Vec<Done>,
    /// A wake-up byte is on its way and the loop has not drained since: no second one is needed.
    signalled: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    /// The loop watches `rx`; runtime threads write to `tx`. Datagram sockets: a write to a peer
    /// that is gone fails with an error, never a SIGPIPE.
    rx: UnixDatagram,
    tx: UnixDatagram,
}

fn lock(m: &Mutex<Queue>) -> MutexGuard<'_, Queue> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The answers waiting for one event loop (`turnstile._aio` makes one per loop and watches it).
#[pyclass(module = "turnstile._native", frozen)]
pub struct Completions {
    shared: Arc<Shared>,
}

#[pymethods]
impl Completions {
    #[new]
    fn new() -> PyResult<Self> {
        let (rx, tx) = UnixDatagram::pair()?;
        rx.set_nonblocking(true)?;
        tx.set_nonblocking(true)?;
        Ok(Completions {
            shared: Arc::new(Shared {
                queue: Mutex::new(Queue::default()),
                rx,
                tx,
            }),
        })
    }

    /// The descriptor the loop watches for reading.
    fn fileno(&self) -> i32 {
        self.shared.rx.as_raw_fd()
    }

    /// Resolves every queued future (the loop calls this when the descriptor is readable). A future
    /// cancelled meanwhile is left as it is: the decision was made all the same.
    fn drain(&self, py: Python<'_>) {
        let mut byte = [0u8; 16];
        // Emptied before the queue is taken, so a byte written after this belongs to an answer
        // queued after it, which the next call drains.
        while self.shared.rx.recv(&mut byte).is_ok() {}
        let done = {
            let mut q = lock(&self.shared.queue);
            q.signalled = false;
            std::mem::take(&mut q.done)
        };
        for d in done {
            resolve(py, d);
        }
    }
}

fn resolve(py: Python<'_>, d: Done) {
    let future = d.future.bind(py);
    if future
        .call_method0(intern!(py, "done"))
        .and_then(|v| v.is_truthy())
        .unwrap_or(true)
    {
        return;
    }
    let error = match d.out.map(|v| v.into_py(py)) {
        Ok(Ok(v)) => {
            let _ = future.call_method1(intern!(py, "set_result"), (v,));
            return;
        }
        Ok(Err(e)) => e,
        Err(f) => f.into_pyerr(py),
    };
    let _ = future.call_method1(intern!(py, "set_exception"), (error.into_value(py),));
}

/// Where a runtime thread hands one operation's answer: a clone of the loop's queue.
pub struct Sender {
    shared: Arc<Shared>,
    future: Py<PyAny>,
}

impl Sender {
    /// Queues the answer and wakes the loop if it is not already about to drain.
    pub fn send(self, out: Result<Box<dyn Answer>, Failure>) {
        let wake = {
            let mut q = lock(&self.shared.queue);
            q.done.push(Done {
                future: self.future,
                out,
            });
            !std::mem::replace(&mut q.signalled, true)
        };
        if wake {
            // Fails only when the loop's side is gone (nobody is waiting) or a byte is already
            // queued (the loop wakes anyway).
            let _ = self.shared.tx.send(&[1]);
        }
    }
}

/// `asyncio.get_running_loop` and `turnstile._aio.completions`, looked up once per interpreter.
struct Lookups {
    running_loop: Py<PyAny>,
    completions: Py<PyAny>,
}

static LOOKUPS: PyOnceLock<Lookups> = PyOnceLock::new();

thread_local! {
    /// The loop this thread last used and its completions: a thread runs one loop at a time, so
    /// nearly every call finds its loop here without a dictionary lookup.
    static LAST: RefCell<Option<(Py<PyWeakrefReference>, Py<Completions>)>> = const { RefCell::new(None) };
}

/// A new future of the running loop, and where to send its answer.
pub fn future(py: Python<'_>) -> PyResult<(Bound<'_, PyAny>, Sender)> {
    let l = LOOKUPS.get_or_try_init(py, || {
        Ok::<_, PyErr>(Lookups {
            running_loop: py.import("asyncio")?.getattr("get_running_loop")?.unbind(),
            completions: py
                .import("turnstile._aio")?
                .getattr("completions")?
                .unbind(),
        })
    })?;
    let lp = l.running_loop.bind(py).call0()?;
    let cached = LAST.with(|last| {
        last.borrow().as_ref().and_then(|(w, c)| {
            w.bind(py)
                .upgrade()
                .filter(|seen| seen.is(&lp))
                .map(|_| c.clone_ref(py))
        })
    });
    let comp = match cached {
        Some(c) => c,
        None => {
            let c: Py<Completions> = l.completions.bind(py).call1((&lp,))?.extract()?;
            let w = PyWeakrefReference::new(&lp)?.unbind();
            LAST.with(|last| *last.borrow_mut() = Some((w, c.clone_ref(py))));
            c
        }
    };
    let future = lp.call_method0(intern!(py, "create_future"))?;
    let sender = Sender {
        shared: comp.get().shared.clone(),
        future: future.clone().unbind(),
    };
    Ok((future, sender))
}
