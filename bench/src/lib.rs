//! Turnstile's benchmark harness (`make bench`): the workload trait and registry
//! ([`workload`], **where new workloads plug in**), the runner ([`runner`]), the measured paths
//! ([`workloads`]), the cold-start harness ([`coldstart`]) and the rows the sample events need
//! ([`samples`]). The `turnstile-bench` binary drives them; bench/README.md explains the whole run.

pub mod clientcost;
pub mod coldstart;
pub mod error;
pub mod prime;
pub mod runner;
pub mod samples;
pub mod sim;
pub mod workload;
pub mod workloads;
