//! Windowed stream-stream joins: both sides buffered in window stores.

use std::sync::Arc;
use std::time::Duration;

use crate::dsl::grouped::record_dropped;
use crate::dsl::stream::{KStream, StepProcessor};
use crate::dsl::window::{RawKey, ordered_time};
use crate::error::{ProcessError, SerdeError};
use crate::processor::{Processor, ProcessorContext};
use crate::record::Record;
use crate::serde::Serde;
use crate::state::{KvStoreRef, WindowStoreRef};

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// How far apart in time two records may be to join (Kafka Streams'
/// `JoinWindows`): a left record at `t` joins right records in
/// `[t - before, t + after]`; records later than `grace` behind stream time
/// are dropped.
///
/// ```
/// use std::time::Duration;
/// use weir_streams::dsl::JoinWindows;
/// let w = JoinWindows::of_time_difference_and_grace(Duration::from_secs(5), Duration::from_secs(1));
/// assert_eq!((w.before_ms(), w.after_ms(), w.grace_ms()), (5_000, 5_000, 1_000));
/// let w = w.after(Duration::from_secs(10));
/// assert_eq!(w.after_ms(), 10_000);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JoinWindows {
    before_ms: i64,
    after_ms: i64,
    grace_ms: i64,
}

impl JoinWindows {
    /// Records at most `difference` apart join; nothing late is accepted.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_streams::dsl::{JoinWindows, StreamsBuilder};
    /// # use weir_streams::testing::TopologyTestDriver;
    /// let builder = StreamsBuilder::new();
    /// let views = builder.stream::<String, String>("views");
    /// let clicks = builder.stream::<String, String>("clicks");
    /// let windows = JoinWindows::of_time_difference_with_no_grace(Duration::from_secs(10));
    /// views.join_windowed(&clicks, windows, |v, c| format!("{v}->{c}")).to("view-clicks");
    /// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "ads").unwrap();
    /// driver.pipe("views", &"ad1".to_string(), &"v1".to_string(), 0).unwrap();
    /// driver.pipe("views", &"ad2".to_string(), &"v2".to_string(), 15_000).unwrap();
    /// // 3 s after v1, but 12 s behind stream time (15 s): late, dropped.
    /// driver.pipe("clicks", &"ad1".to_string(), &"c".to_string(), 3_000).unwrap();
    /// assert!(driver.read_output::<String, String>("view-clicks").unwrap().is_empty());
    /// ```
    pub fn of_time_difference_with_no_grace(difference: Duration) -> Self {
        Self::of_time_difference_and_grace(difference, Duration::ZERO)
    }

    /// Records at most `difference` apart join; records up to `grace` behind
    /// stream time are still joined.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_streams::dsl::{JoinWindows, StreamsBuilder};
    /// # use weir_streams::testing::TopologyTestDriver;
    /// let builder = StreamsBuilder::new();
    /// let views = builder.stream::<String, String>("views");
    /// let clicks = builder.stream::<String, String>("clicks");
    /// let windows =
    ///     JoinWindows::of_time_difference_and_grace(Duration::from_secs(10), Duration::from_secs(5));
    /// views.join_windowed(&clicks, windows, |v, c| format!("{v}->{c}")).to("view-clicks");
    /// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "ads").unwrap();
    /// driver.pipe("views", &"ad1".to_string(), &"v1".to_string(), 0).unwrap();
    /// driver.pipe("views", &"ad2".to_string(), &"v2".to_string(), 15_000).unwrap();
    /// // Late, as without grace, but within the 5 s grace: still joined.
    /// driver.pipe("clicks", &"ad1".to_string(), &"c".to_string(), 3_000).unwrap();
    /// let out = driver.read_output::<String, String>("view-clicks").unwrap();
    /// assert_eq!(out.iter().map(|r| (r.value.as_str(), r.timestamp)).collect::<Vec<_>>(),
    ///     vec![("v1->c", 3_000)]);
    /// ```
    pub fn of_time_difference_and_grace(difference: Duration, grace: Duration) -> Self {
        JoinWindows {
            before_ms: ms(difference),
            after_ms: ms(difference),
            grace_ms: ms(grace),
        }
    }

    /// How far before a left record a right record may be.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_streams::dsl::{JoinWindows, StreamsBuilder};
    /// # use weir_streams::testing::TopologyTestDriver;
    /// let builder = StreamsBuilder::new();
    /// let views = builder.stream::<String, String>("views");
    /// let clicks = builder.stream::<String, String>("clicks");
    /// // Only clicks at most 10 s after the view, none before it.
    /// let windows = JoinWindows::of_time_difference_with_no_grace(Duration::from_secs(10))
    ///     .before(Duration::ZERO);
    /// views.join_windowed(&clicks, windows, |v, c| format!("{v}->{c}")).to("view-clicks");
    /// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "ads").unwrap();
    /// driver.pipe("clicks", &"ad1".to_string(), &"early".to_string(), 500).unwrap();
    /// driver.pipe("views", &"ad1".to_string(), &"v".to_string(), 1_000).unwrap();
    /// driver.pipe("clicks", &"ad1".to_string(), &"after".to_string(), 5_000).unwrap();
    /// let out = driver.read_output::<String, String>("view-clicks").unwrap();
    /// assert_eq!(out.iter().map(|r| r.value.as_str()).collect::<Vec<_>>(), vec!["v->after"]);
    /// ```
    pub fn before(mut self, before: Duration) -> Self {
        self.before_ms = ms(before);
        self
    }

    /// How far after a left record a right record may be.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_streams::dsl::{JoinWindows, StreamsBuilder};
    /// # use weir_streams::testing::TopologyTestDriver;
    /// let builder = StreamsBuilder::new();
    /// let shipments = builder.stream::<String, String>("shipments");
    /// let payments = builder.stream::<String, String>("payments");
    /// // Only payments made at most 10 s before the shipment, none after it.
    /// let windows = JoinWindows::of_time_difference_with_no_grace(Duration::from_secs(10))
    ///     .after(Duration::ZERO);
    /// shipments.join_windowed(&payments, windows, |s, p| format!("{s} paid by {p}")).to("paid");
    /// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "shop").unwrap();
    /// driver.pipe("payments", &"o1".to_string(), &"card".to_string(), 500).unwrap();
    /// driver.pipe("shipments", &"o1".to_string(), &"box".to_string(), 1_000).unwrap();
    /// driver.pipe("payments", &"o1".to_string(), &"cash".to_string(), 5_000).unwrap();
    /// let out = driver.read_output::<String, String>("paid").unwrap();
    /// assert_eq!(out.iter().map(|r| r.value.as_str()).collect::<Vec<_>>(), vec!["box paid by card"]);
    /// ```
    pub fn after(mut self, after: Duration) -> Self {
        self.after_ms = ms(after);
        self
    }

    /// The `before` bound in ms.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_streams::dsl::{JoinWindows, StreamsBuilder};
    /// let windows = JoinWindows::of_time_difference_with_no_grace(Duration::from_secs(10))
    ///     .before(Duration::from_secs(2));
    /// assert_eq!(windows.before_ms(), 2_000);
    /// let builder = StreamsBuilder::new();
    /// let left = builder.stream::<String, String>("left");
    /// left.join_windowed(&builder.stream::<String, String>("right"), windows, |l, r| l.clone() + r)
    ///     .to("joined");
    /// # builder.build().unwrap();
    /// ```
    pub fn before_ms(&self) -> i64 {
        self.before_ms
    }

    /// The `after` bound in ms.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_streams::dsl::{JoinWindows, StreamsBuilder};
    /// let windows = JoinWindows::of_time_difference_with_no_grace(Duration::from_secs(10))
    ///     .after(Duration::from_secs(30));
    /// assert_eq!((windows.before_ms(), windows.after_ms()), (10_000, 30_000));
    /// let builder = StreamsBuilder::new();
    /// let left = builder.stream::<String, String>("left");
    /// left.join_windowed(&builder.stream::<String, String>("right"), windows, |l, r| l.clone() + r)
    ///     .to("joined");
    /// # builder.build().unwrap();
    /// ```
    pub fn after_ms(&self) -> i64 {
        self.after_ms
    }

    /// The grace period in ms.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_streams::dsl::{JoinWindows, StreamsBuilder};
    /// let windows =
    ///     JoinWindows::of_time_difference_and_grace(Duration::from_secs(10), Duration::from_secs(1));
    /// assert_eq!(windows.grace_ms(), 1_000);
    /// assert_eq!(JoinWindows::of_time_difference_with_no_grace(Duration::from_secs(10)).grace_ms(), 0);
    /// let builder = StreamsBuilder::new();
    /// let left = builder.stream::<String, String>("left");
    /// left.join_windowed(&builder.stream::<String, String>("right"), windows, |l, r| l.clone() + r)
    ///     .to("joined");
    /// # builder.build().unwrap();
    /// ```
    pub fn grace_ms(&self) -> i64 {
        self.grace_ms
    }
}

/// The values buffered under one key and timestamp: a count, then each
/// value's length (u32, big-endian) and bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ValueList<V>(pub(crate) Vec<V>);

impl<V: Serde> Serde for ValueList<V> {
    const NAME: &'static str = "ValueList";

    fn serialize(&self) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        for v in &self.0 {
            let bytes = v.serialize().unwrap_or_default();
            out.extend_from_slice(&u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_be_bytes());
            out.extend_from_slice(&bytes);
        }
        Some(out)
    }

    fn deserialize(bytes: Option<&[u8]>) -> Result<Self, SerdeError> {
        let mut rest = bytes.ok_or_else(|| SerdeError::new(Self::NAME, "null"))?;
        let mut out = Vec::new();
        while !rest.is_empty() {
            let (len, tail) = rest
                .split_first_chunk::<4>()
                .ok_or_else(|| SerdeError::new(Self::NAME, "truncated length"))?;
            let len = usize::try_from(u32::from_be_bytes(*len)).unwrap_or(usize::MAX);
            if len > tail.len() {
                return Err(SerdeError::new(
                    Self::NAME,
                    format!("a value of {len} bytes with {} left", tail.len()),
                ));
            }
            let (value, tail) = tail.split_at(len);
            out.push(V::deserialize(Some(value))?);
            rest = tail;
        }
        Ok(ValueList(out))
    }
}

/// A record of either side, so one processor sees both (and keeps one
/// stream time for the join).
#[derive(Debug, Clone)]
enum Side<A, B> {
    Left(A),
    Right(B),
}

/// The join's result for a pair, or for a record with no partner (`None`
/// for the missing side); `None` if this kind of join emits nothing for it.
type Joiner<V1, V2, VR> = Arc<dyn Fn(Option<&V1>, Option<&V2>) -> Option<VR> + Send + Sync>;

struct StreamJoin<K, V1, V2, VR> {
    left: WindowStoreRef<K, ValueList<V1>>,
    right: WindowStoreRef<K, ValueList<V2>>,
    /// Records that have not joined yet, for left and outer joins: keyed by
    /// (timestamp, side, key), emitted with `None` for the other side once
    /// their window closes without a match (Kafka Streams' behaviour since
    /// 3.1, which avoids spurious left/outer results).
    unmatched: Option<KvStoreRef<RawKey, ValueList<Vec<u8>>>>,
    windows: JoinWindows,
    joiner: Joiner<V1, V2, VR>,
    left_outer: bool,
    right_outer: bool,
    observed: i64,
    name: Arc<str>,
}

const LEFT: u8 = 0;
const RIGHT: u8 = 1;

fn unmatched_key<K: Serde>(ts: i64, side: u8, key: &K) -> RawKey {
    let mut k = ordered_time(ts).to_vec();
    k.push(side);
    k.extend(key.serialize().unwrap_or_default());
    RawKey(k)
}

impl<K, V1, V2, VR> StreamJoin<K, V1, V2, VR>
where
    K: Serde + Clone,
    V1: Serde + Clone,
    V2: Serde + Clone,
    VR: Clone + Send + 'static,
{
    /// Emits, with `None` for the other side, every unmatched record whose
    /// window has closed.
    fn emit_expired(&self, ctx: &mut ProcessorContext<'_, K, VR>) -> Result<(), ProcessError> {
        let Some(unmatched) = &self.unmatched else {
            return Ok(());
        };
        let store = ctx.kv_store(unmatched)?;
        let w = self.windows;
        let horizon = self
            .observed
            .saturating_sub(w.grace_ms)
            .saturating_sub(w.after_ms.min(w.before_ms));
        let from = RawKey(ordered_time(i64::MIN).to_vec());
        let until = RawKey(ordered_time(horizon).to_vec());
        for (k, values) in store.range(&from, &until)? {
            let (ts, rest) = k.0.split_at(8.min(k.0.len()));
            let mut b = [0u8; 8];
            b.copy_from_slice(ts);
            let ts = i64::from_be_bytes(b) ^ i64::MIN;
            let Some((&side, key)) = rest.split_first() else {
                continue;
            };
            let reach = if side == LEFT {
                w.after_ms
            } else {
                w.before_ms
            };
            if ts.saturating_add(reach).saturating_add(w.grace_ms) >= self.observed {
                continue;
            }
            let key = K::deserialize(Some(key))?;
            for bytes in &values.0 {
                let value = if side == LEFT {
                    (self.joiner)(Some(&V1::deserialize(Some(bytes))?), None)
                } else {
                    (self.joiner)(None, Some(&V2::deserialize(Some(bytes))?))
                };
                if let Some(value) = value {
                    ctx.forward(Record::new(key.clone(), value, ts));
                }
            }
            store.delete(&k, ts)?;
        }
        Ok(())
    }
}

fn append<K: Serde, V: Serde + Clone>(
    store: &crate::state::WindowStore<K, ValueList<V>>,
    key: &K,
    value: &V,
    ts: i64,
) -> Result<(), ProcessError> {
    let mut list = store
        .fetch(key, ts, ts)?
        .pop()
        .map(|(_, l)| l)
        .unwrap_or(ValueList(Vec::new()));
    list.0.push(value.clone());
    store.put(key, &list, ts)?;
    Ok(())
}

fn remember_unmatched(
    store: &crate::state::KvStore<RawKey, ValueList<Vec<u8>>>,
    key: RawKey,
    value: Option<Vec<u8>>,
    ts: i64,
) -> Result<(), ProcessError> {
    let mut list = store.get(&key)?.unwrap_or(ValueList(Vec::new()));
    list.0.push(value.unwrap_or_default());
    store.put(&key, &list, ts)
}

impl<K, V1, V2, VR> Processor<K, Side<V1, V2>> for StreamJoin<K, V1, V2, VR>
where
    K: Serde + Clone,
    V1: Serde + Clone,
    V2: Serde + Clone,
    VR: Clone + Send + 'static,
{
    type KOut = K;
    type VOut = VR;

    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, K, VR>,
        record: Record<K, Side<V1, V2>>,
    ) -> Result<(), ProcessError> {
        let ts = record.timestamp;
        let w = self.windows;
        let (reach, side) = match &record.value {
            Side::Left(_) => (w.after_ms, LEFT),
            Side::Right(_) => (w.before_ms, RIGHT),
        };
        if ts < 0 || ts.saturating_add(reach).saturating_add(w.grace_ms) < self.observed {
            record_dropped(&self.name, "late", ts);
            return Ok(());
        }
        self.observed = self.observed.max(ts);
        let left = ctx.window_store(&self.left)?;
        let right = ctx.window_store(&self.right)?;
        let key = record.key;
        let mut matched = false;
        match record.value {
            Side::Left(v1) => {
                append(&left, &key, &v1, ts)?;
                let from = ts.saturating_sub(w.before_ms);
                let to = ts.saturating_add(w.after_ms);
                for (t2, list) in right.fetch(&key, from, to)? {
                    for v2 in &list.0 {
                        matched = true;
                        if let Some(value) = (self.joiner)(Some(&v1), Some(v2)) {
                            ctx.forward(Record::new(key.clone(), value, ts.max(t2)));
                        }
                    }
                    if let Some(u) = &self.unmatched {
                        ctx.kv_store(u)?
                            .delete(&unmatched_key(t2, RIGHT, &key), ts)?;
                    }
                }
                if !matched
                    && self.left_outer
                    && let Some(u) = &self.unmatched
                {
                    let store = ctx.kv_store(u)?;
                    remember_unmatched(&store, unmatched_key(ts, side, &key), v1.serialize(), ts)?;
                }
            }
            Side::Right(v2) => {
                append(&right, &key, &v2, ts)?;
                let from = ts.saturating_sub(w.after_ms);
                let to = ts.saturating_add(w.before_ms);
                for (t1, list) in left.fetch(&key, from, to)? {
                    for v1 in &list.0 {
                        matched = true;
                        if let Some(value) = (self.joiner)(Some(v1), Some(&v2)) {
                            ctx.forward(Record::new(key.clone(), value, ts.max(t1)));
                        }
                    }
                    if let Some(u) = &self.unmatched {
                        ctx.kv_store(u)?
                            .delete(&unmatched_key(t1, LEFT, &key), ts)?;
                    }
                }
                if !matched
                    && self.right_outer
                    && let Some(u) = &self.unmatched
                {
                    let store = ctx.kv_store(u)?;
                    remember_unmatched(&store, unmatched_key(ts, side, &key), v2.serialize(), ts)?;
                }
            }
        }
        self.emit_expired(ctx)
    }
}

impl<K, V> KStream<K, V>
where
    K: Serde + Clone,
    V: Serde + Clone,
{
    fn window_join<V2, VR>(
        &self,
        other: &KStream<K, V2>,
        windows: JoinWindows,
        kind: (&str, bool, bool),
        joiner: Joiner<V, V2, VR>,
    ) -> KStream<K, VR>
    where
        V2: Serde + Clone,
        VR: Clone + Send + 'static,
    {
        let (prefix, left_outer, right_outer) = kind;
        let shared = self.shared.clone();
        let name = shared.name_or(self.next_name.clone(), prefix);
        let (this_store, other_store, unmatched_store, this_side, other_side) =
            shared.with(|inner| {
                (
                    inner.name("KSTREAM-JOINTHIS-STORE"),
                    inner.name("KSTREAM-JOINOTHER-STORE"),
                    inner.name("KSTREAM-OUTERSHARED-JOIN-STORE"),
                    inner.name("KSTREAM-JOINTHIS"),
                    inner.name("KSTREAM-JOINOTHER"),
                )
            });
        let left_input = self.repartitioned_if_needed(&format!("{name}-left"));
        let right_input = other.repartitioned_if_needed(&format!("{name}-right"));
        let retention = Duration::from_millis(
            u64::try_from(
                windows
                    .before_ms
                    .saturating_add(windows.after_ms)
                    .saturating_add(windows.grace_ms)
                    // A partner exactly at the late boundary stays readable.
                    .saturating_add(1),
            )
            .unwrap_or(u64::MAX),
        );
        let node = shared.with(|inner| {
            let b = &mut inner.builder;
            let left = b.window_store::<K, ValueList<V>>(&this_store, retention);
            let right = b.window_store::<K, ValueList<V2>>(&other_store, retention);
            let unmatched = (left_outer || right_outer)
                .then(|| b.kv_store::<RawKey, ValueList<Vec<u8>>>(&unmatched_store));
            let tag_left = b.processor(
                &this_side,
                &[&left_input.node],
                || StepProcessor::<K, V, K, Side<V, V2>> {
                    step: Arc::new(|r: Record<K, V>, ctx| {
                        ctx.forward(Record {
                            key: r.key,
                            value: Side::Left(r.value),
                            timestamp: r.timestamp,
                            headers: r.headers,
                        });
                    }),
                },
                &[],
            );
            let tag_right = b.processor(
                &other_side,
                &[&right_input.node],
                || StepProcessor::<K, V2, K, Side<V, V2>> {
                    step: Arc::new(|r: Record<K, V2>, ctx| {
                        ctx.forward(Record {
                            key: r.key,
                            value: Side::Right(r.value),
                            timestamp: r.timestamp,
                            headers: r.headers,
                        });
                    }),
                },
                &[],
            );
            let mut stores: Vec<&dyn crate::state::StoreName> = vec![&left, &right];
            if let Some(u) = &unmatched {
                stores.push(u);
            }
            let (l, r, u) = (left.clone(), right.clone(), unmatched.clone());
            let label: Arc<str> = Arc::from(name.as_str());
            b.processor(
                &name,
                &[&tag_left, &tag_right],
                move || StreamJoin {
                    left: l.clone(),
                    right: r.clone(),
                    unmatched: u.clone(),
                    windows,
                    joiner: Arc::clone(&joiner),
                    left_outer,
                    right_outer,
                    observed: i64::MIN,
                    name: Arc::clone(&label),
                },
                &stores,
            )
        });
        KStream::new(shared, node, false)
    }

    /// Joins with another stream: each pair of records of one key at most
    /// the window apart gives `joiner(left, right)`, with the later of their
    /// timestamps. Both streams must be co-partitioned (they are
    /// repartitioned first if their keys changed).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_streams::dsl::{JoinWindows, StreamsBuilder};
    /// # use weir_streams::testing::TopologyTestDriver;
    /// let builder = StreamsBuilder::new();
    /// let views = builder.stream::<String, String>("views");
    /// let clicks = builder.stream::<String, String>("clicks");
    /// views
    ///     .join_windowed(&clicks, JoinWindows::of_time_difference_with_no_grace(Duration::from_secs(10)),
    ///         |view, click| format!("{view}->{click}"))
    ///     .to("view-clicks");
    /// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "ads").unwrap();
    /// driver.pipe("views", &"ad1".to_string(), &"v".to_string(), 1_000).unwrap();
    /// driver.pipe("clicks", &"ad1".to_string(), &"c".to_string(), 5_000).unwrap();
    /// driver.pipe("clicks", &"ad1".to_string(), &"late-c".to_string(), 30_000).unwrap();
    /// let out = driver.read_output::<String, String>("view-clicks").unwrap();
    /// assert_eq!(out.iter().map(|r| (r.value.as_str(), r.timestamp)).collect::<Vec<_>>(),
    ///     vec![("v->c", 5_000)]);
    /// ```
    pub fn join_windowed<V2, VR>(
        &self,
        other: &KStream<K, V2>,
        windows: JoinWindows,
        joiner: impl Fn(&V, &V2) -> VR + Send + Sync + 'static,
    ) -> KStream<K, VR>
    where
        V2: Serde + Clone,
        VR: Clone + Send + 'static,
    {
        let joiner: Joiner<V, V2, VR> = Arc::new(move |l, r| Some(joiner(l?, r?)));
        self.window_join(other, windows, ("KSTREAM-JOIN", false, false), joiner)
    }

    /// As [`join_windowed`](Self::join_windowed), and a left record that
    /// joined nothing by the time its window closed comes out once with
    /// `None` for the right side.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_streams::dsl::{JoinWindows, StreamsBuilder};
    /// # use weir_streams::testing::TopologyTestDriver;
    /// let builder = StreamsBuilder::new();
    /// let views = builder.stream::<String, String>("views");
    /// let clicks = builder.stream::<String, String>("clicks");
    /// views
    ///     .left_join_windowed(&clicks, JoinWindows::of_time_difference_with_no_grace(Duration::from_secs(10)),
    ///         |view, click| format!("{view}->{}", click.map_or("-", String::as_str)))
    ///     .to("view-clicks");
    /// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "ads").unwrap();
    /// driver.pipe("views", &"ad1".to_string(), &"v1".to_string(), 1_000).unwrap();
    /// driver.pipe("views", &"ad2".to_string(), &"v2".to_string(), 2_000).unwrap();
    /// driver.pipe("clicks", &"ad1".to_string(), &"c".to_string(), 5_000).unwrap();
    /// // Stream time 20 s closes v2's window: it comes out unjoined.
    /// driver.pipe("views", &"ad3".to_string(), &"v3".to_string(), 20_000).unwrap();
    /// let out = driver.read_output::<String, String>("view-clicks").unwrap();
    /// assert_eq!(out.iter().map(|r| (r.key.as_str(), r.value.as_str())).collect::<Vec<_>>(),
    ///     vec![("ad1", "v1->c"), ("ad2", "v2->-")]);
    /// ```
    pub fn left_join_windowed<V2, VR>(
        &self,
        other: &KStream<K, V2>,
        windows: JoinWindows,
        joiner: impl Fn(&V, Option<&V2>) -> VR + Send + Sync + 'static,
    ) -> KStream<K, VR>
    where
        V2: Serde + Clone,
        VR: Clone + Send + 'static,
    {
        let joiner: Joiner<V, V2, VR> = Arc::new(move |l, r| Some(joiner(l?, r)));
        self.window_join(other, windows, ("KSTREAM-LEFTJOIN", true, false), joiner)
    }

    /// As [`left_join_windowed`](Self::left_join_windowed) for both sides:
    /// a record of either side that joined nothing comes out once its window
    /// closed, with `None` for the other side.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_streams::dsl::{JoinWindows, StreamsBuilder};
    /// # use weir_streams::testing::TopologyTestDriver;
    /// let builder = StreamsBuilder::new();
    /// let views = builder.stream::<String, String>("views");
    /// let clicks = builder.stream::<String, String>("clicks");
    /// views
    ///     .outer_join_windowed(&clicks, JoinWindows::of_time_difference_with_no_grace(Duration::from_secs(10)),
    ///         |view, click| format!("{}->{}", view.map_or("-", String::as_str), click.map_or("-", String::as_str)))
    ///     .to("view-clicks");
    /// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "ads").unwrap();
    /// driver.pipe("views", &"ad1".to_string(), &"v1".to_string(), 1_000).unwrap();
    /// driver.pipe("clicks", &"ad2".to_string(), &"c2".to_string(), 2_000).unwrap();
    /// // Stream time 20 s closes both windows: each record comes out unjoined.
    /// driver.pipe("views", &"ad3".to_string(), &"v3".to_string(), 20_000).unwrap();
    /// let out = driver.read_output::<String, String>("view-clicks").unwrap();
    /// assert_eq!(out.iter().map(|r| (r.key.as_str(), r.value.as_str(), r.timestamp)).collect::<Vec<_>>(),
    ///     vec![("ad1", "v1->-", 1_000), ("ad2", "-->c2", 2_000)]);
    /// ```
    pub fn outer_join_windowed<V2, VR>(
        &self,
        other: &KStream<K, V2>,
        windows: JoinWindows,
        joiner: impl Fn(Option<&V>, Option<&V2>) -> VR + Send + Sync + 'static,
    ) -> KStream<K, VR>
    where
        V2: Serde + Clone,
        VR: Clone + Send + 'static,
    {
        self.window_join(
            other,
            windows,
            ("KSTREAM-OUTERJOIN", true, true),
            Arc::new(move |l, r| Some(joiner(l, r))),
        )
    }
}
