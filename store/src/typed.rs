//! The typed layer: key-value and window stores that encode keys and values
//! with a [`Serde`], whose names are recorded in and checked against the store.

use std::marker::PhantomData;
use std::ops::Bound;
use std::time::Duration;

use crate::codec::Serde;
use crate::error::{Result, StoreError};
use crate::kv::KeyValueStore;
use crate::task_store::TaskStore;
use crate::window::WindowStore;

/// A key-value store of `K` to `V`.
#[derive(Debug, Clone)]
pub struct TypedKeyValueStore<K, V> {
    raw: KeyValueStore,
    _types: PhantomData<fn() -> (K, V)>,
}

/// A window store of `K` to `V`.
#[derive(Debug, Clone)]
pub struct TypedWindowStore<K, V> {
    raw: WindowStore,
    _types: PhantomData<fn() -> (K, V)>,
}

impl TaskStore {
    /// Opens or creates a typed key-value store.
    ///
    /// # Errors
    ///
    /// [`StoreError::SerdeMismatch`] if the store was created with other serdes,
    /// plus the errors of [`TaskStore::key_value_store`].
    pub fn typed_key_value_store<K: Serde, V: Serde>(
        &self,
        name: &str,
    ) -> Result<TypedKeyValueStore<K, V>> {
        Ok(TypedKeyValueStore {
            raw: self.key_value_store_with_serdes(name, Some((K::NAME, V::NAME)))?,
            _types: PhantomData,
        })
    }

    /// Opens or creates a typed window store.
    ///
    /// # Errors
    ///
    /// [`StoreError::SerdeMismatch`] if the store was created with other serdes,
    /// plus the errors of [`TaskStore::window_store`].
    pub fn typed_window_store<K: Serde, V: Serde>(
        &self,
        name: &str,
        retention: Duration,
        segment: Duration,
    ) -> Result<TypedWindowStore<K, V>> {
        Ok(TypedWindowStore {
            raw: self.window_store_with_serdes(
                name,
                retention,
                segment,
                Some((K::NAME, V::NAME)),
            )?,
            _types: PhantomData,
        })
    }
}

fn encode<T: Serde>(store: &str, what: &'static str, value: &T) -> Result<Vec<u8>> {
    T::to_vec(value).map_err(|reason| StoreError::Decode {
        store: store.to_owned(),
        what,
        serde: T::NAME,
        reason: format!("encoding failed: {reason}"),
    })
}

fn decode<T: Serde>(store: &str, what: &'static str, bytes: &[u8]) -> Result<T> {
    T::decode(bytes).map_err(|reason| StoreError::Decode {
        store: store.to_owned(),
        what,
        serde: T::NAME,
        reason,
    })
}

impl<K: Serde, V: Serde> TypedKeyValueStore<K, V> {
    /// The byte-level store underneath.
    pub fn raw(&self) -> &KeyValueStore {
        &self.raw
    }

    /// The value of `key`.
    ///
    /// # Errors
    ///
    /// [`StoreError::Decode`] for bytes the value serde rejects, or read errors.
    pub fn get(&self, key: &K) -> Result<Option<V>> {
        let name = self.raw.name();
        let raw = self.raw.get(&encode(name, "key", key)?)?;
        raw.map(|v| decode(name, "value", &v)).transpose()
    }

    /// Stages `key` = `value`.
    ///
    /// # Errors
    ///
    /// [`StoreError::Decode`] if a serde-based encoding fails.
    pub fn put(&self, key: &K, value: &V) -> Result<()> {
        let name = self.raw.name();
        self.raw
            .put(&encode(name, "key", key)?, &encode(name, "value", value)?)
    }

    /// Stages the deletion of `key`.
    ///
    /// # Errors
    ///
    /// As [`TypedKeyValueStore::put`].
    pub fn delete(&self, key: &K) -> Result<()> {
        self.raw.delete(&encode(self.raw.name(), "key", key)?)
    }

    /// Entries with keys between the bounds, in the order of the encoded keys
    /// (numeric order for the integer serdes).
    ///
    /// # Errors
    ///
    /// Encoding, decoding or read errors.
    pub fn range(&self, from: Bound<&K>, to: Bound<&K>) -> Result<Vec<(K, V)>> {
        let name = self.raw.name();
        let enc = |b: Bound<&K>| -> Result<Bound<Vec<u8>>> {
            Ok(match b {
                Bound::Included(k) => Bound::Included(encode(name, "key", k)?),
                Bound::Excluded(k) => Bound::Excluded(encode(name, "key", k)?),
                Bound::Unbounded => Bound::Unbounded,
            })
        };
        let (from, to) = (enc(from)?, enc(to)?);
        self.raw
            .range(
                from.as_ref().map(Vec::as_slice),
                to.as_ref().map(Vec::as_slice),
            )?
            .map(|item| {
                let (k, v) = item?;
                Ok((decode(name, "key", &k)?, decode(name, "value", &v)?))
            })
            .collect()
    }
}

impl<K: Serde, V: Serde> TypedWindowStore<K, V> {
    /// The byte-level store underneath.
    pub fn raw(&self) -> &WindowStore {
        &self.raw
    }

    /// Stages `value` for (`key`, `window_start`); `false` if already expired.
    ///
    /// # Errors
    ///
    /// [`StoreError::Decode`] if a serde-based encoding fails.
    pub fn put(&self, key: &K, value: &V, window_start: i64) -> Result<bool> {
        let name = self.raw.name();
        self.raw.put(
            &encode(name, "key", key)?,
            &encode(name, "value", value)?,
            window_start,
        )
    }

    /// The windows of `key` starting in `[from, to]`, in time order.
    ///
    /// # Errors
    ///
    /// Encoding, decoding or read errors.
    pub fn fetch(&self, key: &K, from: i64, to: i64) -> Result<Vec<(i64, V)>> {
        let name = self.raw.name();
        self.raw
            .fetch(&encode(name, "key", key)?, from, to)?
            .into_iter()
            .map(|e| Ok((e.window_start, decode(name, "value", &e.value)?)))
            .collect()
    }

    /// All windows starting in `[from, to]`, in time order.
    ///
    /// # Errors
    ///
    /// Decoding or read errors.
    pub fn fetch_all(&self, from: i64, to: i64) -> Result<Vec<(i64, K, V)>> {
        let name = self.raw.name();
        self.raw
            .fetch_all(from, to)?
            .map(|e| {
                let e = e?;
                Ok((
                    e.window_start,
                    decode(name, "key", &e.key)?,
                    decode(name, "value", &e.value)?,
                ))
            })
            .collect()
    }
}
