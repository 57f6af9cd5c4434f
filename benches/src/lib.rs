//! Benchmarks for Weir (see benches/).
