//! How a Rust future meets Python: blocking (the GIL released while it runs on the process's
//! runtime) or as an asyncio future (spawned on the runtime, resolved on the caller's event loop
//! with `call_soon_threadsafe`). Panics are caught here and never unwind into Python.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList};

use crate::core::{core, Core};
use crate::failure::Failure;

/// Set by the interpreter's `atexit` hook ([`before_exit`]): from then on no runtime thread enters the
/// interpreter, which is about to finalize (a thread attaching during finalization aborts the process:
/// "PyGILState_Release: thread state must be current").
static CLOSING: AtomicBool = AtomicBool::new(false);
/// Runtime threads that passed the [`CLOSING`] check and have not left the interpreter yet.
static ATTACHING: AtomicUsize = AtomicUsize::new(0);
/// How long the exit hook waits for them (each holds the GIL for microseconds).
const EXIT_WAIT: Duration = Duration::from_secs(2);

/// Runs `f` in the interpreter from a runtime thread, unless it is shutting down (then `f` is
/// dropped: its future had nobody left to wait for it; its Python references are released by
/// PyO3's deferred pool, never by this thread).
fn from_runtime(f: impl FnOnce(Python<'_>)) {
    // Counted before the check, so the exit hook, which sets the flag first, waits for every thread
    // that saw it unset.
    ATTACHING.fetch_add(1, SeqCst);
    if !CLOSING.load(SeqCst) {
        Python::attach(f);
    }
    ATTACHING.fetch_sub(1, SeqCst);
}

/// Registered with `atexit` by the package: stops runtime threads from entering the interpreter and
/// waits (the GIL released) for those already on their way in.
#[pyfunction]
pub fn before_exit(py: Python<'_>) {
    CLOSING.store(true, SeqCst);
    py.detach(|| {
        let deadline = Instant::now() + EXIT_WAIT;
        while ATTACHING.load(SeqCst) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
}

/// What an operation returns, made a Python object once the GIL is held again.
pub trait ToPy: Send + 'static {
    fn to_py(self, py: Python<'_>) -> PyResult<Py<PyAny>>;
}

impl ToPy for () {
    fn to_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(py.None())
    }
}

impl ToPy for usize {
    fn to_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(self.into_pyobject(py)?.into_any().unbind())
    }
}

/// A serialisable record (an outcome, a state), as the dict its JSON form describes.
pub struct Json(pub serde_json::Value);

impl Json {
    pub fn of(v: &impl serde::Serialize) -> Result<Json, Failure> {
        serde_json::to_value(v)
            .map(Json)
            .map_err(|e| Failure::Store(format!("formatting a result: {e}")))
    }
}

impl ToPy for Json {
    fn to_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        json_to_py(py, &self.0)
    }
}

fn json_to_py(py: Python<'_>, v: &serde_json::Value) -> PyResult<Py<PyAny>> {
    use serde_json::Value as V;
    Ok(match v {
        V::Null => py.None(),
        V::Bool(b) => b.into_pyobject(py)?.to_owned().into_any().unbind(),
        V::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => u.into_pyobject(py)?.into_any().unbind(),
            (None, Some(i)) => i.into_pyobject(py)?.into_any().unbind(),
            _ => n
                .as_f64()
                .unwrap_or(f64::NAN)
                .into_pyobject(py)?
                .into_any()
                .unbind(),
        },
        V::String(s) => s.into_pyobject(py)?.into_any().unbind(),
        V::Array(a) => {
            let list = PyList::empty(py);
            for item in a {
                list.append(json_to_py(py, item)?)?;
            }
            list.into_any().unbind()
        }
        V::Object(m) => {
            let dict = PyDict::new(py);
            for (k, item) in m {
                dict.set_item(k, json_to_py(py, item)?)?;
            }
            dict.into_any().unbind()
        }
    })
}

fn panic_message(p: Box<dyn std::any::Any + Send>) -> Failure {
    let text = p
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into());
    Failure::Panic(text)
}

/// `turnstile._aio`'s two functions, looked up once per interpreter.
struct Aio {
    new_future: Py<PyAny>,
    resolve: Py<PyAny>,
}

static AIO: PyOnceLock<Aio> = PyOnceLock::new();

fn aio(py: Python<'_>) -> PyResult<&'static Aio> {
    AIO.get_or_try_init(py, || {
        let m = py.import("turnstile._aio")?;
        Ok(Aio {
            new_future: m.getattr("new_future")?.unbind(),
            resolve: m.getattr("resolve")?.unbind(),
        })
    })
}

/// Runs `op` (given this process's core) to completion with the GIL released.
pub fn block<T, F, Fut>(py: Python<'_>, op: F) -> PyResult<Py<PyAny>>
where
    T: ToPy,
    F: FnOnce(Arc<Core>) -> Fut + Send,
    Fut: Future<Output = Result<T, Failure>> + Send,
{
    let out = py.detach(|| {
        let core = core()?;
        let rt = core.rt;
        match rt.block_on(AssertUnwindSafe(op(core)).catch_unwind()) {
            Ok(out) => out,
            Err(p) => Err(panic_message(p)),
        }
    });
    match out {
        Ok(v) => v.to_py(py),
        Err(f) => Err(f.into_pyerr(py)),
    }
}

/// Starts `op` on the runtime and returns an asyncio future of the running loop that it resolves.
/// Cancelling that future does not stop the operation: a decision already sent is still made.
pub fn spawn<'py, T, F, Fut>(py: Python<'py>, op: F) -> PyResult<Bound<'py, PyAny>>
where
    T: ToPy,
    F: FnOnce(Arc<Core>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, Failure>> + Send + 'static,
{
    let aio = aio(py)?;
    let fut = aio.new_future.bind(py).call0()?;
    let core = match crate::core::current() {
        Some(core) => core,
        None => py.detach(core).map_err(|f| f.into_pyerr(py))?,
    };
    let target = fut.clone().unbind();
    let rt = core.rt;
    rt.spawn(async move {
        let out = match AssertUnwindSafe(op(core)).catch_unwind().await {
            Ok(out) => out,
            Err(p) => Err(panic_message(p)),
        };
        from_runtime(|py| {
            let (ok, value) = match out.map(|v| v.to_py(py)) {
                Ok(Ok(v)) => (true, v),
                Ok(Err(e)) => (false, e.into_value(py).into_any()),
                Err(f) => (false, f.into_pyerr(py).into_value(py).into_any()),
            };
            // The loop may be closed by now; nobody is waiting then.
            if let Ok(aio) = self::aio(py) {
                let _ = aio.resolve.bind(py).call1((target, ok, value));
            }
        });
    });
    Ok(fut)
}
