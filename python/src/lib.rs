//! `turnstile._native`: Turnstile's limiters for Python, calling `shared` (no limiter logic here).
//! The pure-Python package around it (`python/pysrc/turnstile/`) gives rate-limiter-py's interface and
//! the asyncio twins; docs/python.md describes both.

mod aio;
mod bridge;
mod core;
mod failure;
mod kv;
mod tokens;
mod twin;

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<tokens::TokenDecision>()?;
    m.add_class::<kv::KvLimiter>()?;
    m.add_class::<aio::Completions>()?;
    macro_rules! add {
        ($($f:path),* $(,)?) => { $( m.add_function(wrap_pyfunction!($f, m)?)?; )* };
    }
    add!(
        tokens::get_token,
        tokens::get_token_async,
        tokens::get_reservation,
        tokens::get_reservation_async,
        tokens::create_token,
        tokens::create_token_async,
        tokens::delete_reservation,
        tokens::delete_reservation_async,
        tokens::list_reservations,
        tokens::list_reservations_async,
        tokens::remove_by_resource_id,
        tokens::remove_by_resource_id_async,
        tokens::usage,
        tokens::usage_async,
        tokens::reset_usage,
        tokens::reset_usage_async,
        kv::kv_spend,
        kv::kv_spend_async,
        kv::kv_refund,
        kv::kv_refund_async,
        kv::kv_check,
        kv::kv_check_async,
        kv::kv_batch,
        kv::kv_batch_async,
        kv::kv_acquire_lease,
        kv::kv_acquire_lease_async,
        kv::kv_adjust_lease,
        kv::kv_adjust_lease_async,
        kv::kv_commit_lease,
        kv::kv_commit_lease_async,
        kv::kv_release_lease,
        kv::kv_release_lease_async,
        kv::kv_flush,
        kv::kv_flush_async,
        kv::kv_state,
        kv::kv_state_async,
    );
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
