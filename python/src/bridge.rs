//! How a Rust future meets Python: blocking (the GIL released while it runs on the process's
//! runtime) or as an asyncio future (spawned on the runtime, its answer handed to the caller's event
//! loop by [`crate::aio`], so no runtime thread enters the interpreter). Panics are caught here and
//! never unwind into Python.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::core::{core, Core};
use crate::failure::Failure;

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
    let (fut, sender) = crate::aio::future(py)?;
    let core = match crate::core::current() {
        Some(core) => core,
        None => py.detach(core).map_err(|f| f.into_pyerr(py))?,
    };
    let rt = core.rt;
    rt.spawn(async move {
        let out = match AssertUnwindSafe(op(core)).catch_unwind().await {
            Ok(out) => out,
            Err(p) => Err(panic_message(p)),
        };
        sender.send(out.map(|v| Box::new(v) as Box<dyn crate::aio::Answer>));
    });
    Ok(fut)
}
