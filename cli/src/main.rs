//! `weir`: a kcat-like command-line tool.
fn main() {}
