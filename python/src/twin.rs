//! `twin!`: one operation, two Python functions — `name` (blocking, GIL released) and
//! `name_async` (an asyncio future) — with the same arguments, checked by PyO3 before any call.

macro_rules! twin {
    (
        $(#[$doc:meta])*
        $name:ident, $aname:ident, $sig:tt,
        ($($arg:ident : $ty:ty),* $(,)?),
        |$core:ident| $body:block
    ) => {
        $(#[$doc])*
        #[pyo3::pyfunction]
        #[pyo3(signature = $sig)]
        #[allow(clippy::too_many_arguments)]
        pub fn $name(
            py: pyo3::Python<'_>,
            $($arg: $ty),*
        ) -> pyo3::PyResult<pyo3::Py<pyo3::PyAny>> {
            $crate::bridge::block(py, move |$core| async move $body)
        }

        $(#[$doc])*
        #[pyo3::pyfunction]
        #[pyo3(signature = $sig)]
        #[allow(clippy::too_many_arguments)]
        pub fn $aname<'py>(
            py: pyo3::Python<'py>,
            $($arg: $ty),*
        ) -> pyo3::PyResult<pyo3::Bound<'py, pyo3::PyAny>> {
            $crate::bridge::spawn(py, move |$core| async move $body)
        }
    };
}

pub(crate) use twin;
