//! Window definitions and windowed keys.

use std::time::Duration;

use crate::error::SerdeError;
use crate::serde::Serde;

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Tumbling or hopping time windows: `[start, start + size)` for every
/// `start` that is a multiple of `advance` (Kafka Streams' `TimeWindows`).
///
/// ```
/// use std::time::Duration;
/// use weir_streams::dsl::TimeWindows;
/// let tumbling = TimeWindows::of_size_with_no_grace(Duration::from_secs(60));
/// let hopping = TimeWindows::of_size_and_grace(Duration::from_secs(300), Duration::from_secs(10))
///     .advance_by(Duration::from_secs(60));
/// assert_eq!(tumbling.windows_for(61_000), vec![(60_000, 120_000)]);
/// assert_eq!(hopping.windows_for(61_000), vec![(0, 300_000), (60_000, 360_000)]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeWindows {
    pub(crate) size_ms: i64,
    pub(crate) advance_ms: i64,
    pub(crate) grace_ms: i64,
}

impl TimeWindows {
    /// Tumbling windows of `size`; a record later than its window's end is
    /// dropped.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_streams::dsl::TimeWindows;
    /// let w = TimeWindows::of_size_with_no_grace(Duration::from_secs(60));
    /// assert_eq!((w.size_ms(), w.grace_ms()), (60_000, 0));
    /// assert_eq!(w.windows_for(59_999), vec![(0, 60_000)]);
    /// ```
    pub fn of_size_with_no_grace(size: Duration) -> Self {
        Self::of_size_and_grace(size, Duration::ZERO)
    }

    /// Tumbling windows of `size` that accept records up to `grace` after
    /// their end (in stream time).
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_streams::dsl::TimeWindows;
    /// let w = TimeWindows::of_size_and_grace(Duration::from_secs(60), Duration::from_secs(5));
    /// assert_eq!((w.size_ms(), w.grace_ms()), (60_000, 5_000));
    /// // Still tumbling: one window per record.
    /// assert_eq!(w.windows_for(60_000), vec![(60_000, 120_000)]);
    /// ```
    pub fn of_size_and_grace(size: Duration, grace: Duration) -> Self {
        let size_ms = ms(size).max(1);
        TimeWindows {
            size_ms,
            advance_ms: size_ms,
            grace_ms: ms(grace),
        }
    }

    /// Hopping windows: a new window every `advance` (at most the size).
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_streams::dsl::TimeWindows;
    /// let w = TimeWindows::of_size_with_no_grace(Duration::from_secs(10))
    ///     .advance_by(Duration::from_secs(5));
    /// assert_eq!(w.windows_for(12_000), vec![(5_000, 15_000), (10_000, 20_000)]);
    /// // An advance longer than the size is clamped to it (tumbling).
    /// let t = TimeWindows::of_size_with_no_grace(Duration::from_secs(10))
    ///     .advance_by(Duration::from_secs(60));
    /// assert_eq!(t.windows_for(12_000), vec![(10_000, 20_000)]);
    /// ```
    pub fn advance_by(mut self, advance: Duration) -> Self {
        self.advance_ms = ms(advance).clamp(1, self.size_ms);
        self
    }

    /// The windows `(start, end)` that contain `timestamp`, oldest first.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_streams::dsl::TimeWindows;
    /// let w = TimeWindows::of_size_with_no_grace(Duration::from_millis(300))
    ///     .advance_by(Duration::from_millis(100));
    /// // No window starts before 0.
    /// assert_eq!(w.windows_for(50), vec![(0, 300)]);
    /// assert_eq!(w.windows_for(250), vec![(0, 300), (100, 400), (200, 500)]);
    /// ```
    pub fn windows_for(&self, timestamp: i64) -> Vec<(i64, i64)> {
        let mut start =
            (timestamp - self.size_ms + self.advance_ms).max(0) / self.advance_ms * self.advance_ms;
        let mut out = Vec::new();
        while start <= timestamp {
            out.push((start, start.saturating_add(self.size_ms)));
            start += self.advance_ms;
        }
        out
    }

    /// The window size in ms.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_streams::dsl::TimeWindows;
    /// assert_eq!(TimeWindows::of_size_with_no_grace(Duration::from_secs(2)).size_ms(), 2_000);
    /// ```
    pub fn size_ms(&self) -> i64 {
        self.size_ms
    }

    /// The grace period in ms.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_streams::dsl::TimeWindows;
    /// let w = TimeWindows::of_size_and_grace(Duration::from_secs(60), Duration::from_millis(1500));
    /// assert_eq!(w.grace_ms(), 1_500);
    /// ```
    pub fn grace_ms(&self) -> i64 {
        self.grace_ms
    }
}

/// Session windows: records of a key less than `gap` apart fall in one
/// session (Kafka Streams' `SessionWindows`).
///
/// ```
/// use std::time::Duration;
/// use weir_streams::dsl::SessionWindows;
/// let sessions = SessionWindows::of_inactivity_gap_and_grace(
///     Duration::from_secs(300),
///     Duration::from_secs(30),
/// );
/// assert_eq!(sessions.gap_ms(), 300_000);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionWindows {
    pub(crate) gap_ms: i64,
    pub(crate) grace_ms: i64,
}

impl SessionWindows {
    /// Sessions closed by `gap` of inactivity; late records are dropped.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_streams::dsl::SessionWindows;
    /// let s = SessionWindows::of_inactivity_gap_with_no_grace(Duration::from_secs(30));
    /// assert_eq!((s.gap_ms(), s.grace_ms()), (30_000, 0));
    /// ```
    pub fn of_inactivity_gap_with_no_grace(gap: Duration) -> Self {
        Self::of_inactivity_gap_and_grace(gap, Duration::ZERO)
    }

    /// Sessions closed by `gap` of inactivity, accepting records up to
    /// `grace` after a session's end (in stream time).
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_streams::dsl::SessionWindows;
    /// let s = SessionWindows::of_inactivity_gap_and_grace(Duration::from_secs(30), Duration::from_secs(2));
    /// assert_eq!((s.gap_ms(), s.grace_ms()), (30_000, 2_000));
    /// ```
    pub fn of_inactivity_gap_and_grace(gap: Duration, grace: Duration) -> Self {
        SessionWindows {
            gap_ms: ms(gap).max(1),
            grace_ms: ms(grace),
        }
    }

    /// The inactivity gap in ms.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_streams::dsl::SessionWindows;
    /// // A zero gap is raised to 1 ms.
    /// assert_eq!(SessionWindows::of_inactivity_gap_with_no_grace(Duration::ZERO).gap_ms(), 1);
    /// ```
    pub fn gap_ms(&self) -> i64 {
        self.gap_ms
    }

    /// The grace period in ms.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_streams::dsl::SessionWindows;
    /// let s = SessionWindows::of_inactivity_gap_and_grace(Duration::from_secs(1), Duration::from_millis(250));
    /// assert_eq!(s.grace_ms(), 250);
    /// ```
    pub fn grace_ms(&self) -> i64 {
        self.grace_ms
    }
}

/// A window: `[start, end)` for time windows, `[start, end]` (the first and
/// last record's timestamps) for sessions.
///
/// ```
/// use weir_streams::dsl::Window;
/// let a = Window { start: 0, end: 60_000 };
/// let b = Window { start: 60_000, end: 120_000 };
/// // Windows order by start, then end.
/// assert!(a < b);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Window {
    /// The window's start, ms.
    pub start: i64,
    /// The window's end, ms; `i64::MAX` when read back from a topic that does
    /// not carry it (a time-windowed key holds only its start).
    pub end: i64,
}

/// A key of a windowed aggregation: the record key and its window.
///
/// Written to topics in Kafka Streams' format, so Java consumers with
/// `WindowedSerdes` read it: the key's bytes, then the window start as 8
/// big-endian bytes for time windows; for session windows
/// ([`Windowed::session`]), the end and then the start. A time-windowed key
/// read back has no end (`i64::MAX`), as Java's deserializer without a
/// window size.
///
/// ```
/// use weir_streams::dsl::{Window, Windowed};
/// use weir_streams::serde::Serde;
/// let w = Windowed::new("user".to_string(), Window { start: 60_000, end: 120_000 });
/// let bytes = w.serialize().unwrap();
/// assert_eq!(&bytes[..4], b"user");
/// assert_eq!(&bytes[4..], &60_000i64.to_be_bytes());
/// let back = Windowed::<String>::deserialize(Some(&bytes)).unwrap();
/// assert_eq!((back.key.as_str(), back.window.start), ("user", 60_000));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Windowed<K> {
    /// The record key.
    pub key: K,
    /// The window.
    pub window: Window,
}

impl<K> Windowed<K> {
    /// A time-windowed key.
    ///
    /// ```
    /// use weir_streams::dsl::{Window, Windowed};
    /// let w = Windowed::new(42i64, Window { start: 0, end: 1_000 });
    /// assert_eq!((w.key, w.window.end), (42, 1_000));
    /// ```
    pub fn new(key: K, window: Window) -> Self {
        Windowed { key, window }
    }
}

/// A session-windowed key: as [`Windowed`], written as the key's bytes, the
/// session's end and its start (Kafka Streams' session key format).
///
/// ```
/// use weir_streams::dsl::{SessionWindowed, Window};
/// use weir_streams::serde::Serde;
/// let s = SessionWindowed::new(7i32, Window { start: 10, end: 25 });
/// let bytes = s.serialize().unwrap();
/// assert_eq!(bytes.len(), 4 + 16);
/// assert_eq!(SessionWindowed::<i32>::deserialize(Some(&bytes)).unwrap(), s);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SessionWindowed<K> {
    /// The record key.
    pub key: K,
    /// The session: its first and last record's timestamps.
    pub window: Window,
}

impl<K> SessionWindowed<K> {
    /// A session-windowed key.
    ///
    /// ```
    /// use weir_streams::dsl::{SessionWindowed, Window};
    /// let s = SessionWindowed::new("u1".to_string(), Window { start: 5, end: 9 });
    /// assert_eq!((s.key.as_str(), s.window.start, s.window.end), ("u1", 5, 9));
    /// ```
    pub fn new(key: K, window: Window) -> Self {
        SessionWindowed { key, window }
    }
}

fn split_tail<'a, const N: usize>(
    name: &'static str,
    bytes: Option<&'a [u8]>,
) -> Result<(&'a [u8], [i64; N]), SerdeError> {
    let bytes = bytes.ok_or_else(|| SerdeError::new(name, "null where a key was expected"))?;
    let tail = 8 * N;
    if bytes.len() < tail {
        return Err(SerdeError::new(
            name,
            format!("{} bytes, at least {tail} expected", bytes.len()),
        ));
    }
    let (key, rest) = bytes.split_at(bytes.len() - tail);
    let mut out = [0i64; N];
    for (i, chunk) in rest.chunks_exact(8).enumerate() {
        let mut b = [0u8; 8];
        b.copy_from_slice(chunk);
        if let Some(slot) = out.get_mut(i) {
            *slot = i64::from_be_bytes(b);
        }
    }
    Ok((key, out))
}

impl<K: Serde> Serde for Windowed<K> {
    const NAME: &'static str = "TimeWindowed";

    fn serialize(&self) -> Option<Vec<u8>> {
        let mut out = self.key.serialize()?;
        out.extend_from_slice(&self.window.start.to_be_bytes());
        Some(out)
    }

    fn deserialize(bytes: Option<&[u8]>) -> Result<Self, SerdeError> {
        let (key, [start]) = split_tail::<1>(Self::NAME, bytes)?;
        Ok(Windowed {
            key: K::deserialize(Some(key))?,
            window: Window {
                start,
                end: i64::MAX,
            },
        })
    }
}

impl<K: Serde> Serde for SessionWindowed<K> {
    const NAME: &'static str = "SessionWindowed";

    fn serialize(&self) -> Option<Vec<u8>> {
        let mut out = self.key.serialize()?;
        out.extend_from_slice(&self.window.end.to_be_bytes());
        out.extend_from_slice(&self.window.start.to_be_bytes());
        Some(out)
    }

    fn deserialize(bytes: Option<&[u8]>) -> Result<Self, SerdeError> {
        let (key, [end, start]) = split_tail::<2>(Self::NAME, bytes)?;
        Ok(SessionWindowed {
            key: K::deserialize(Some(key))?,
            window: Window { start, end },
        })
    }
}

/// A windowed key type: what `suppress` needs to know of it.
///
/// ```
/// use weir_streams::dsl::{SessionWindowed, Window, Windowed, WindowedKey};
/// let t = Windowed::new(1i32, Window { start: 0, end: i64::MAX });
/// // A time-windowed key read back from a topic regains its end.
/// assert_eq!(t.with_end(60_000).window_end(), 60_000);
/// // A session key carries its own end.
/// let s = SessionWindowed::new(1i32, Window { start: 0, end: 10 });
/// assert_eq!(s.with_end(99).window_end(), 10);
/// ```
pub trait WindowedKey: Serde + Clone {
    /// The window's end, ms: a window is final once stream time passes its
    /// end plus the grace period.
    fn window_end(&self) -> i64;
    /// The key read back from its bytes, with the window end it was
    /// buffered under (a time-windowed key's bytes carry only the start).
    fn with_end(self, end: i64) -> Self;
}

impl<K: Serde + Clone> WindowedKey for Windowed<K> {
    fn window_end(&self) -> i64 {
        self.window.end
    }
    fn with_end(mut self, end: i64) -> Self {
        self.window.end = end;
        self
    }
}

impl<K: Serde + Clone> WindowedKey for SessionWindowed<K> {
    fn window_end(&self) -> i64 {
        self.window.end
    }
    fn with_end(self, _end: i64) -> Self {
        self
    }
}

/// A value with an `i64` in front (a session's start, a buffered record's
/// timestamp): 8 big-endian bytes, then the value's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Prefixed<V> {
    pub(crate) n: i64,
    pub(crate) value: V,
}

impl<V: Serde> Serde for Prefixed<V> {
    const NAME: &'static str = "Prefixed";

    fn serialize(&self) -> Option<Vec<u8>> {
        let mut out = self.n.to_be_bytes().to_vec();
        // A value with no bytes (null) is stored as nothing after the
        // prefix; `V` decides whether that reads back.
        if let Some(v) = self.value.serialize() {
            out.extend_from_slice(&v);
        }
        Some(out)
    }

    fn deserialize(bytes: Option<&[u8]>) -> Result<Self, SerdeError> {
        let bytes = bytes.ok_or_else(|| SerdeError::new(Self::NAME, "null"))?;
        if bytes.len() < 8 {
            return Err(SerdeError::new(
                Self::NAME,
                format!("{} bytes, at least 8 expected", bytes.len()),
            ));
        }
        let (head, rest) = bytes.split_at(8);
        let mut b = [0u8; 8];
        b.copy_from_slice(head);
        Ok(Prefixed {
            n: i64::from_be_bytes(b),
            value: V::deserialize(Some(rest))?,
        })
    }
}

/// Raw bytes as a store key (the suppression buffer's composite keys).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct RawKey(pub(crate) Vec<u8>);

impl Serde for RawKey {
    const NAME: &'static str = "Bytes";

    fn serialize(&self) -> Option<Vec<u8>> {
        Some(self.0.clone())
    }

    fn deserialize(bytes: Option<&[u8]>) -> Result<Self, SerdeError> {
        bytes
            .map(|b| RawKey(b.to_vec()))
            .ok_or_else(|| SerdeError::new(Self::NAME, "null"))
    }
}

/// `t` as 8 bytes that sort as the numbers do (sign bit flipped).
pub(crate) fn ordered_time(t: i64) -> [u8; 8] {
    (t ^ i64::MIN).to_be_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hopping_windows_cover_each_timestamp_size_over_advance_times() {
        let w = TimeWindows::of_size_with_no_grace(Duration::from_millis(10))
            .advance_by(Duration::from_millis(5));
        assert_eq!(w.windows_for(12), vec![(5, 15), (10, 20)]);
        assert_eq!(w.windows_for(0), vec![(0, 10)]);
        assert_eq!(w.windows_for(4), vec![(0, 10)]);
        let t = TimeWindows::of_size_with_no_grace(Duration::from_millis(10));
        assert_eq!(t.windows_for(19), vec![(10, 20)]);
    }

    #[test]
    fn windowed_keys_have_kafkas_layout_and_reject_short_bytes() {
        let s = SessionWindowed::new("k".to_string(), Window { start: 1, end: 2 });
        let b = s.serialize().unwrap();
        assert_eq!(&b[1..9], &2i64.to_be_bytes());
        assert_eq!(&b[9..], &1i64.to_be_bytes());
        assert!(Windowed::<String>::deserialize(Some(&[1, 2, 3])).is_err());
        assert!(SessionWindowed::<String>::deserialize(Some(&[0; 15])).is_err());
        assert!(Windowed::<String>::deserialize(None).is_err());
    }

    #[test]
    fn ordered_time_sorts_negative_before_positive() {
        assert!(ordered_time(-5) < ordered_time(0));
        assert!(ordered_time(0) < ordered_time(7));
        assert!(ordered_time(i64::MIN) < ordered_time(i64::MAX));
    }
}
