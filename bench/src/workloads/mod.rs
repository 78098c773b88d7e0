//! One module per measured Turnstile path. See [`crate::workload`] for how to add one.

pub mod floor;
pub mod local_stack;
