//! Choosing a partition for a record.
//!
//! Keyed records go where the Java client sends them: `murmur2(key)`, made
//! positive by clearing the sign bit, modulo the partition count. Weir,
//! Java and librdkafka's `murmur2_random` partitioner then agree on which
//! partition holds a key, which is what co-partitioned joins rely on.
//!
//! Records without a key stick to one partition per topic until a batch for
//! it is complete (KIP-480), so they fill whole batches instead of spreading
//! one record per partition.

use std::collections::HashMap;

use rand::Rng;

/// The seed Kafka's `Utils.murmur2` starts from.
const SEED: u32 = 0x9747_b28c;
const M: u32 = 0x5bd1_e995;
const R: u32 = 24;

/// MurmurHash2 exactly as Kafka's Java `Utils.murmur2` computes it.
///
/// The arithmetic is 32-bit wrapping throughout; the trailing bytes are
/// mixed in little-endian order and the result is returned as Java's signed
/// `int`.
pub fn murmur2(data: &[u8]) -> i32 {
    // Java keeps `length` as an int; keys longer than that can't be sent.
    let len = data.len() as u32;
    let mut h: u32 = SEED ^ len;
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    // The Java switch falls through from case 3 to case 1.
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if let Some(&first) = tail.first() {
        h ^= u32::from(first);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// Kafka's `Utils.toPositive`: clears the sign bit (not `abs`, which would
/// overflow on `i32::MIN` and give other partitions).
pub fn to_positive(n: i32) -> i32 {
    n & 0x7fff_ffff
}

/// The partition Java's default partitioner picks for `key` among
/// `partitions` (which must be positive; 0 gives partition 0).
pub fn partition_for_key(key: &[u8], partitions: i32) -> i32 {
    if partitions <= 0 {
        return 0;
    }
    to_positive(murmur2(key)) % partitions
}

/// The sticky partition of each topic, for records without a key (KIP-480).
#[derive(Debug, Default)]
pub struct StickyPartitioner {
    current: HashMap<String, i32>,
}

impl StickyPartitioner {
    /// An empty partitioner: each topic picks its first partition at random.
    pub fn new() -> Self {
        Self::default()
    }

    /// The partition a key-less record for `topic` goes to now.
    ///
    /// `available` lists partitions with a leader; when it is empty any of
    /// `0..partitions` may be picked, as in the Java client.
    pub fn partition(&mut self, topic: &str, partitions: i32, available: &[i32]) -> i32 {
        match self.current.get(topic) {
            Some(&p) if p < partitions && (available.is_empty() || available.contains(&p)) => p,
            _ => self.next(topic, partitions, available, None),
        }
    }

    /// Called when the batch for `topic`'s sticky partition `previous` is
    /// complete: moves on to another partition, so that key-less load
    /// spreads batch by batch. Does nothing if the sticky partition already
    /// moved (another record completed that batch first).
    pub fn on_new_batch(&mut self, topic: &str, partitions: i32, available: &[i32], previous: i32) {
        if self.current.get(topic) == Some(&previous) {
            self.next(topic, partitions, available, Some(previous));
        }
    }

    fn next(
        &mut self,
        topic: &str,
        partitions: i32,
        available: &[i32],
        previous: Option<i32>,
    ) -> i32 {
        let mut rng = rand::rng();
        let candidates: Vec<i32> = if available.is_empty() {
            (0..partitions.max(1)).collect()
        } else {
            available.to_vec()
        };
        let others: Vec<i32> = candidates
            .iter()
            .copied()
            .filter(|&p| Some(p) != previous)
            .collect();
        let pool = if others.is_empty() {
            &candidates
        } else {
            &others
        };
        let choice = pool
            .get(rng.random_range(0..pool.len()))
            .copied()
            .unwrap_or(0);
        self.current.insert(topic.to_owned(), choice);
        choice
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vectors of `UtilsTest.testMurmur2` in the Java client.
    #[test]
    fn murmur2_matches_the_java_clients_test_vectors() {
        let cases: [(&[u8], i32); 6] = [
            (b"21", -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
            (b"abc", 479_470_107),
        ];
        for (key, expected) in cases {
            assert_eq!(
                murmur2(key),
                expected,
                "murmur2({:?})",
                String::from_utf8_lossy(key)
            );
        }
    }

    #[test]
    fn keyed_partition_is_the_positive_hash_modulo_the_count() {
        // -973932308 & 0x7fffffff = 1173551340.
        assert_eq!(to_positive(-973_932_308), 1_173_551_340);
        assert_eq!(partition_for_key(b"21", 7), 1_173_551_340 % 7);
        assert_eq!(partition_for_key(b"abc", 10), 479_470_107 % 10);
        // abs() would be wrong here: Java clears the sign bit instead.
        assert_eq!(to_positive(i32::MIN), 0);
        assert_eq!(to_positive(-1), i32::MAX);
        for p in 1..50 {
            let part = partition_for_key(b"foobar", p);
            assert!((0..p).contains(&part));
        }
    }

    #[test]
    fn sticky_partition_holds_until_a_batch_completes() {
        let mut sticky = StickyPartitioner::new();
        let first = sticky.partition("t", 4, &[]);
        for _ in 0..100 {
            assert_eq!(sticky.partition("t", 4, &[]), first);
        }
        sticky.on_new_batch("t", 4, &[], first);
        let second = sticky.partition("t", 4, &[]);
        assert_ne!(second, first, "a new batch moves to another partition");
        // A stale notification for the old partition changes nothing.
        sticky.on_new_batch("t", 4, &[], first);
        assert_eq!(sticky.partition("t", 4, &[]), second);
    }

    #[test]
    fn sticky_partition_prefers_available_partitions() {
        let mut sticky = StickyPartitioner::new();
        for _ in 0..50 {
            let p = sticky.partition("t", 6, &[2, 5]);
            assert!(p == 2 || p == 5, "{p}");
            sticky.on_new_batch("t", 6, &[2, 5], p);
        }
        // With one partition there is nowhere else to go.
        let mut single = StickyPartitioner::new();
        assert_eq!(single.partition("one", 1, &[]), 0);
        single.on_new_batch("one", 1, &[], 0);
        assert_eq!(single.partition("one", 1, &[]), 0);
    }
}
