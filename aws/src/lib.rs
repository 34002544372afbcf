//! AWS backends for lambdafusion — the only crate that knows the AWS SDK.
pub mod contract;
