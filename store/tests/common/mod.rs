//! Helpers shared by the integration tests.

use std::path::Path;

/// A temporary directory on tmpfs when there is one: these tests are about
/// logic and process crashes, not disks, and reopening a store costs several
/// fsyncs that are slow on a loaded VM.
pub fn tempdir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        tempfile::tempdir_in(shm).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    }
}
