//! The small `Serde` trait behind the typed store layer, and its implementations
//! for strings, bytes and integers.
//!
//! Integers encode big-endian, signed ones with the sign bit flipped, so that the
//! byte order fjall sorts by is the numeric order: range scans over typed integer
//! keys then come back in numeric order.

use bytes::Bytes;

/// Converts a type to and from the bytes kept in a store.
///
/// [`Serde::NAME`] is recorded in the store when it is created; opening it later
/// with a serde of another name fails with
/// [`StoreError::SerdeMismatch`](crate::StoreError::SerdeMismatch) rather than
/// decoding garbage.
pub trait Serde: Sized {
    /// A stable name for the encoding (recorded in the store's metadata).
    const NAME: &'static str;

    /// Appends the encoding of `value` to `out`.
    ///
    /// # Errors
    ///
    /// A message if the value cannot be encoded (only serde-based encodings can fail).
    fn encode(value: &Self, out: &mut Vec<u8>) -> Result<(), String>;

    /// Decodes a value, or says why the bytes are not one.
    ///
    /// # Errors
    ///
    /// A message describing the malformed input.
    fn decode(bytes: &[u8]) -> Result<Self, String>;

    /// The encoding as a fresh vector.
    ///
    /// # Errors
    ///
    /// As [`Serde::encode`].
    fn to_vec(value: &Self) -> Result<Vec<u8>, String> {
        let mut out = Vec::new();
        Self::encode(value, &mut out)?;
        Ok(out)
    }
}

impl Serde for String {
    const NAME: &'static str = "utf8";

    fn encode(value: &Self, out: &mut Vec<u8>) -> Result<(), String> {
        out.extend_from_slice(value.as_bytes());
        Ok(())
    }

    fn decode(bytes: &[u8]) -> Result<Self, String> {
        String::from_utf8(bytes.to_vec()).map_err(|e| e.to_string())
    }
}

impl Serde for Vec<u8> {
    const NAME: &'static str = "bytes";

    fn encode(value: &Self, out: &mut Vec<u8>) -> Result<(), String> {
        out.extend_from_slice(value);
        Ok(())
    }

    fn decode(bytes: &[u8]) -> Result<Self, String> {
        Ok(bytes.to_vec())
    }
}

impl Serde for Bytes {
    const NAME: &'static str = "bytes";

    fn encode(value: &Self, out: &mut Vec<u8>) -> Result<(), String> {
        out.extend_from_slice(value);
        Ok(())
    }

    fn decode(bytes: &[u8]) -> Result<Self, String> {
        Ok(Bytes::copy_from_slice(bytes))
    }
}

macro_rules! unsigned_serde {
    ($t:ty, $name:literal) => {
        impl Serde for $t {
            const NAME: &'static str = $name;

            fn encode(value: &Self, out: &mut Vec<u8>) -> Result<(), String> {
                out.extend_from_slice(&value.to_be_bytes());
                Ok(())
            }

            fn decode(bytes: &[u8]) -> Result<Self, String> {
                let array = bytes.try_into().map_err(|_| {
                    format!("expected {} bytes, got {}", size_of::<$t>(), bytes.len())
                })?;
                Ok(<$t>::from_be_bytes(array))
            }
        }
    };
}

macro_rules! signed_serde {
    ($t:ty, $u:ty, $name:literal) => {
        impl Serde for $t {
            const NAME: &'static str = $name;

            fn encode(value: &Self, out: &mut Vec<u8>) -> Result<(), String> {
                // Flipping the sign bit maps MIN..=MAX onto 0..=MAX of the unsigned
                // type in order, so byte order equals numeric order.
                let flipped = (*value as $u) ^ (1 << (<$u>::BITS - 1));
                out.extend_from_slice(&flipped.to_be_bytes());
                Ok(())
            }

            fn decode(bytes: &[u8]) -> Result<Self, String> {
                let array = bytes.try_into().map_err(|_| {
                    format!("expected {} bytes, got {}", size_of::<$t>(), bytes.len())
                })?;
                let flipped = <$u>::from_be_bytes(array) ^ (1 << (<$u>::BITS - 1));
                Ok(flipped as $t)
            }
        }
    };
}

unsigned_serde!(u8, "u8-be");
unsigned_serde!(u16, "u16-be");
unsigned_serde!(u32, "u32-be");
unsigned_serde!(u64, "u64-be");
signed_serde!(i32, u32, "i32-ordered");
signed_serde!(i64, u64, "i64-ordered");

/// Any `serde` type, stored as JSON (feature `serde`).
#[cfg(feature = "serde")]
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Json<T>(pub T);

#[cfg(feature = "serde")]
impl<T: serde::Serialize + serde::de::DeserializeOwned> Serde for Json<T> {
    const NAME: &'static str = "json";

    fn encode(value: &Self, out: &mut Vec<u8>) -> Result<(), String> {
        serde_json::to_writer(&mut *out, &value.0).map_err(|e| e.to_string())
    }

    fn decode(bytes: &[u8]) -> Result<Self, String> {
        serde_json::from_slice(bytes)
            .map(Json)
            .map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signed_integers_sort_numerically_as_bytes() {
        let values = [i64::MIN, -5_000_000_000, -1, 0, 1, 7, i64::MAX];
        let encoded: Vec<Vec<u8>> = values.iter().map(|v| i64::to_vec(v).unwrap()).collect();
        let mut sorted = encoded.clone();
        sorted.sort();
        assert_eq!(encoded, sorted);
        for (v, e) in values.iter().zip(&encoded) {
            assert_eq!(i64::decode(e).unwrap(), *v);
        }
        assert_eq!(i32::decode(&i32::to_vec(&-42).unwrap()).unwrap(), -42);
    }

    #[test]
    fn wrong_width_and_bad_utf8_are_errors() {
        assert!(u64::decode(&[1, 2, 3]).is_err());
        assert!(i32::decode(&[0; 8]).is_err());
        assert!(String::decode(&[0xff, 0xfe]).is_err());
    }
}
