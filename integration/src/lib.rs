//! Integration tests against a real broker (see tests/).

pub mod eos;
