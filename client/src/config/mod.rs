//! Configuration: typed builders, and construction from Kafka-named
//! properties (`bootstrap.servers`, `linger.ms`, …).
//!
//! Every configuration type parses its properties with the helpers here, so
//! that an unknown key or an invalid value is always an error that names the
//! key and says what is accepted:
//!
//! ```
//! use weir_client::config::ClientConfig;
//!
//! let config = ClientConfig::from_properties(&[
//!     ("bootstrap.servers", "127.0.0.1:9092,127.0.0.1:9093"),
//!     ("client.id", "my-app"),
//! ])?;
//! assert_eq!(config.bootstrap_servers.len(), 2);
//!
//! let err = ClientConfig::from_properties(&[("bootstrap.server", "x:1")]).unwrap_err();
//! assert!(err.to_string().contains("bootstrap.server"));
//! # Ok::<(), weir_client::ClientError>(())
//! ```

pub mod common;
pub mod consumer;
pub mod producer;

use std::str::FromStr;
use std::time::Duration;

pub use common::{ClientConfig, ClientConfigBuilder, SecurityProtocol};

use crate::{ClientError, Result};

/// The error for a key `client`'s configuration does not accept (`client`
/// as a user would name it: `producer`, `consumer`, `admin client`);
/// `accepted` lists the keys that would have been.
pub fn unknown_property(key: &str, client: &'static str, accepted: &[&str]) -> ClientError {
    ClientError::UnknownProperty {
        key: key.to_owned(),
        client,
        accepted: accepted.join(", "),
    }
}

/// The error for a value that cannot be used for `key`.
pub fn invalid_property(key: &str, value: &str, expected: impl Into<String>) -> ClientError {
    ClientError::InvalidProperty {
        key: key.to_owned(),
        value: value.to_owned(),
        expected: expected.into(),
    }
}

/// Parses `true` or `false` (as Kafka does, case-insensitively).
///
/// # Errors
/// [`ClientError::InvalidProperty`] naming the key.
pub fn parse_bool(key: &str, value: &str) -> Result<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(invalid_property(key, value, "true or false")),
    }
}

/// Parses a number in `min..=max`.
///
/// # Errors
/// [`ClientError::InvalidProperty`] naming the key and the range.
pub fn parse_number<T>(key: &str, value: &str, min: T, max: T) -> Result<T>
where
    T: FromStr + PartialOrd + std::fmt::Display + Copy,
{
    let expected = || format!("an integer from {min} to {max}");
    let n: T = value
        .trim()
        .parse()
        .map_err(|_| invalid_property(key, value, expected()))?;
    if n < min || n > max {
        return Err(invalid_property(key, value, expected()));
    }
    Ok(n)
}

/// Parses a non-negative number of milliseconds (`*.ms` properties).
///
/// # Errors
/// [`ClientError::InvalidProperty`] naming the key.
pub fn parse_millis(key: &str, value: &str) -> Result<Duration> {
    parse_number::<u64>(key, value, 0, i64::MAX as u64).map(Duration::from_millis)
}

/// Parses one of a fixed set of names (case-insensitively), e.g.
/// `parse_choice("acks", v, &[("all", Acks::All), ("-1", Acks::All), …])`.
///
/// # Errors
/// [`ClientError::InvalidProperty`] naming the key and listing the choices.
pub fn parse_choice<T: Copy>(key: &str, value: &str, choices: &[(&str, T)]) -> Result<T> {
    let wanted = value.trim();
    choices
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(wanted))
        .map(|(_, v)| *v)
        .ok_or_else(|| {
            let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
            invalid_property(key, value, format!("one of: {}", names.join(", ")))
        })
}

/// Parses a comma-separated list, trimming blanks and dropping empty items.
pub fn parse_list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers_name_the_key_and_what_is_accepted() {
        assert!(parse_bool("enable.idempotence", "TRUE").unwrap());
        let e = parse_bool("enable.idempotence", "yes")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("enable.idempotence") && e.contains("true or false"),
            "{e}"
        );

        assert_eq!(
            parse_number::<i32>("batch.size", " 16384", 0, i32::MAX).unwrap(),
            16384
        );
        let e = parse_number::<i32>("batch.size", "-1", 0, 10)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("batch.size") && e.contains("from 0 to 10"),
            "{e}"
        );

        assert_eq!(
            parse_millis("linger.ms", "5").unwrap(),
            Duration::from_millis(5)
        );
        assert!(parse_millis("linger.ms", "5s").is_err());

        assert_eq!(
            parse_choice("acks", "ALL", &[("all", -1), ("1", 1)]).unwrap(),
            -1
        );
        let e = parse_choice("acks", "2", &[("all", -1), ("1", 1)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("acks") && e.contains("one of: all, 1"), "{e}");

        assert_eq!(parse_list(" a:1, ,b:2 "), vec!["a:1", "b:2"]);
        let e = unknown_property("lingr.ms", "producer", &["linger.ms"]).to_string();
        assert_eq!(
            e,
            "unknown property `lingr.ms`: not among the producer's properties (linger.ms)"
        );
    }
}
