//! The worker's contracts, tested from outside the crate. One test binary:
//! each links all of DataFusion.

mod codec_roundtrip;
mod control_contract;
