//! Record serdes: how keys and values of topics and stores become bytes.
//!
//! The encodings are Kafka's own, so a Java or librdkafka application reading
//! the same topics agrees: strings are UTF-8 (`Serdes.String()`), integers are
//! big-endian two's complement (`Serdes.Integer()`, `Serdes.Long()`), doubles
//! are IEEE 754 big-endian (`Serdes.Double()`), and `()` is a null or ignored
//! key. These are distinct from weir-store's internal order-preserving key
//! encoding: the runtime writes these bytes to topics and stores alike, so a
//! changelog record is exactly the store's bytes.
//!
//! ```
//! use weir_streams::serde::Serde;
//! assert_eq!(42i64.serialize(), Some(vec![0, 0, 0, 0, 0, 0, 0, 42]));
//! assert_eq!(i64::deserialize(Some(&[0, 0, 0, 0, 0, 0, 1, 0])).unwrap(), 256);
//! assert_eq!(<()>::deserialize(None).unwrap(), ());
//! assert!(String::deserialize(Some(&[0xff])).is_err());
//! ```

use crate::error::SerdeError;

/// A type that can be written to and read from a Kafka record's key or value.
///
/// `None` is Kafka's null (a tombstone when it is a value).
pub trait Serde: Sized + Send + 'static {
    /// The serde's name in errors and in `Topology::describe()`.
    const NAME: &'static str;

    /// The bytes of `self`, or `None` for null.
    fn serialize(&self) -> Option<Vec<u8>>;

    /// Reads a value from the bytes (or null).
    ///
    /// # Errors
    ///
    /// [`SerdeError`] when the bytes are not this type's encoding, or when the
    /// type has no null and the record's field is null.
    fn deserialize(bytes: Option<&[u8]>) -> Result<Self, SerdeError>;
}

fn present<'a>(name: &'static str, bytes: Option<&'a [u8]>) -> Result<&'a [u8], SerdeError> {
    bytes.ok_or_else(|| SerdeError::new(name, "null where a value was expected"))
}

fn fixed<const N: usize>(name: &'static str, bytes: Option<&[u8]>) -> Result<[u8; N], SerdeError> {
    let bytes = present(name, bytes)?;
    bytes
        .try_into()
        .map_err(|_| SerdeError::new(name, format!("{} bytes, expected {N}", bytes.len())))
}

impl Serde for String {
    const NAME: &'static str = "String";

    fn serialize(&self) -> Option<Vec<u8>> {
        Some(self.as_bytes().to_vec())
    }

    fn deserialize(bytes: Option<&[u8]>) -> Result<Self, SerdeError> {
        let bytes = present(Self::NAME, bytes)?;
        String::from_utf8(bytes.to_vec())
            .map_err(|e| SerdeError::new(Self::NAME, format!("not UTF-8: {e}")))
    }
}

impl Serde for Vec<u8> {
    const NAME: &'static str = "Bytes";

    fn serialize(&self) -> Option<Vec<u8>> {
        Some(self.clone())
    }

    fn deserialize(bytes: Option<&[u8]>) -> Result<Self, SerdeError> {
        Ok(present(Self::NAME, bytes)?.to_vec())
    }
}

impl Serde for bytes::Bytes {
    const NAME: &'static str = "Bytes";

    fn serialize(&self) -> Option<Vec<u8>> {
        Some(self.to_vec())
    }

    fn deserialize(bytes: Option<&[u8]>) -> Result<Self, SerdeError> {
        Ok(bytes::Bytes::copy_from_slice(present(Self::NAME, bytes)?))
    }
}

/// A null key or value, or one the application ignores: serializes to null and
/// reads anything.
impl Serde for () {
    const NAME: &'static str = "Void";

    fn serialize(&self) -> Option<Vec<u8>> {
        None
    }

    fn deserialize(_bytes: Option<&[u8]>) -> Result<Self, SerdeError> {
        Ok(())
    }
}

/// A nullable value: `None` is Kafka's null (a tombstone in a table).
impl<T: Serde> Serde for Option<T> {
    const NAME: &'static str = T::NAME;

    fn serialize(&self) -> Option<Vec<u8>> {
        self.as_ref().and_then(Serde::serialize)
    }

    fn deserialize(bytes: Option<&[u8]>) -> Result<Self, SerdeError> {
        bytes.map(|b| T::deserialize(Some(b))).transpose()
    }
}

macro_rules! big_endian {
    ($($t:ty => $name:literal),* $(,)?) => {$(
        #[doc = concat!("Big-endian, as Kafka's `", $name, "` serde.")]
        impl Serde for $t {
            const NAME: &'static str = $name;

            fn serialize(&self) -> Option<Vec<u8>> {
                Some(self.to_be_bytes().to_vec())
            }

            fn deserialize(bytes: Option<&[u8]>) -> Result<Self, SerdeError> {
                Ok(<$t>::from_be_bytes(fixed(Self::NAME, bytes)?))
            }
        }
    )*};
}

big_endian! {
    i16 => "Short",
    i32 => "Integer",
    i64 => "Long",
    u16 => "UnsignedShort",
    u32 => "UnsignedInteger",
    u64 => "UnsignedLong",
    f32 => "Float",
    f64 => "Double",
}

/// A value encoded as JSON through serde (Kafka Streams users' usual
/// `JsonSerde`).
///
/// ```
/// use weir_streams::serde::{Json, Serde};
/// #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
/// struct Order { id: u32 }
/// let bytes = Json(Order { id: 7 }).serialize().unwrap();
/// assert_eq!(bytes, br#"{"id":7}"#);
/// assert_eq!(Json::<Order>::deserialize(Some(&bytes)).unwrap().0, Order { id: 7 });
/// ```
#[cfg(feature = "json")]
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Json<T>(pub T);

#[cfg(feature = "json")]
impl<T> Serde for Json<T>
where
    T: serde::Serialize + serde::de::DeserializeOwned + Send + 'static,
{
    const NAME: &'static str = "Json";

    fn serialize(&self) -> Option<Vec<u8>> {
        // Serializing a value of a derived Serialize type into a Vec cannot
        // fail except for maps with non-string keys; those become null rather
        // than a panic, and the reader sees a null (an error if not nullable).
        serde_json::to_vec(&self.0).ok()
    }

    fn deserialize(bytes: Option<&[u8]>) -> Result<Self, SerdeError> {
        let bytes = present(Self::NAME, bytes)?;
        serde_json::from_slice(bytes)
            .map(Json)
            .map_err(|e| SerdeError::new(Self::NAME, e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<T: Serde + PartialEq + std::fmt::Debug>(v: T) {
        let bytes = v.serialize();
        assert_eq!(T::deserialize(bytes.as_deref()).unwrap(), v);
    }

    #[test]
    fn integers_are_javas_big_endian_encodings() {
        // Java: Serdes.Long().serializer().serialize("t", -2L) = ff ff ff ff ff ff ff fe
        assert_eq!(
            (-2i64).serialize().unwrap(),
            vec![0xff; 7].into_iter().chain([0xfe]).collect::<Vec<_>>()
        );
        assert_eq!(1i32.serialize().unwrap(), vec![0, 0, 0, 1]);
        assert_eq!(
            1.0f64.serialize().unwrap(),
            vec![0x3f, 0xf0, 0, 0, 0, 0, 0, 0]
        );
        round_trip(i64::MIN);
        round_trip(u64::MAX);
        round_trip(-7i16);
    }

    #[test]
    fn wrong_lengths_and_nulls_are_errors_not_panics() {
        assert!(i64::deserialize(Some(&[1, 2, 3])).is_err());
        assert!(i32::deserialize(None).is_err());
        assert!(String::deserialize(None).is_err());
        assert_eq!(Option::<String>::deserialize(None).unwrap(), None);
        assert_eq!(
            Option::<i32>::deserialize(Some(&[0, 0, 0, 9])).unwrap(),
            Some(9)
        );
    }

    #[test]
    fn strings_and_bytes_round_trip() {
        round_trip(String::from("héllo"));
        round_trip(vec![0u8, 255, 3]);
        round_trip(Some(String::from("x")));
        round_trip(Option::<String>::None);
    }
}
