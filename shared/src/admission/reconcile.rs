//! Reconciler (to come).
