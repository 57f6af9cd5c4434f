//! A command that needs a broker and gets none says so in one line.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;

#[test]
fn a_broker_command_without_brokers_names_both_ways_to_give_them() {
    for args in [
        &["groups", "list"][..],
        &["topics", "list"],
        &["offsets", "-t", "t"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(args)
            .env_remove("KAFKA_BOOTSTRAP")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert_eq!(
            stderr.trim_end(),
            "weir: error: no brokers: pass -b HOST:PORT or set KAFKA_BOOTSTRAP",
            "{args:?}"
        );
    }
}
