//! One GCRA spend (or refund) as one conditional write, with no read first — usable as a single
//! `UpdateItem` or as one item of a `TransactWriteItems` (e.g. the WebSocket `$connect`
//! transaction), on any table: the caller names the key, the TAT attribute and the TTL attribute.
//!
//! A spend is in one of two cases, each an exact condition over the stored TAT (see
//! `docs/decisions/0601-gcra-single-conditional-write.md`):
//!
//! - **Idle**: `attribute_not_exists(tat) OR tat <= :now` → `SET tat = :now + :inc`
//!   (the bucket is full, so the spend is admitted whatever the cost, cost ≤ burst);
//! - **Draining**: `tat > :now AND tat <= :admitLimit` → `SET tat = tat + :inc`, where
//!   `admitLimit = gcra::admit_limit(rate, now, cost)`; concurrent writers serialise on the item,
//!   and each one's condition is re-evaluated against the TAT the previous one left, so exactly the
//!   admissible spends succeed.
//!
//! The case is guessed from a hint (the TAT last seen for the key). When the guess is wrong the
//! write fails, DynamoDB returns the old item (`ReturnValuesOnConditionCheckFailure::ALL_OLD`), and
//! [`SpendPlan::on_condition_failed`] decides from it: a denial (no further call) or a retry under
//! the right case (one more call, still no read).
//!
//! A refund can carry a [`RefundId`]: its write then also requires the bucket's `refundId` to be
//! smaller and sets it, so sending it again after a lost answer never refunds twice.

mod expr;
pub use expr::Expr;
/// Property tests (docs/testing.md): the stored item a failed condition returns is outside input.
#[cfg(test)]
mod fuzz_tests;
mod plan;

pub use plan::*;
