//! Helpers shared by the integration tests.

#![allow(clippy::expect_used)]

use std::path::Path;

/// A temporary directory on tmpfs when there is one: these tests are about
/// logic and process crashes, not disks, and reopening a store costs several
/// fsyncs that are slow on a loaded VM.
#[allow(dead_code)] // not every test file uses every helper
pub fn tempdir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        tempfile::tempdir_in(shm).expect("tmpfs tempdir")
    } else {
        tempfile::tempdir().expect("tempdir")
    }
}
