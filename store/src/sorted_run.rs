//! Buffers changelog records in one arena and turns them into a key-sorted,
//! de-duplicated run for bulk ingestion.

/// Where one record lives in the arena.
#[derive(Debug, Clone, Copy)]
struct Slot {
    start: usize,
    key_len: u32,
    /// `u32::MAX` marks a tombstone (values that long are rejected earlier).
    value_len: u32,
}

const TOMBSTONE: u32 = u32::MAX;

/// Records in arrival order, keys and values packed in one allocation so a run
/// of millions of records costs two vectors, not millions of small ones.
#[derive(Debug, Default)]
pub(crate) struct RunBuilder {
    data: Vec<u8>,
    slots: Vec<Slot>,
}

impl RunBuilder {
    pub(crate) fn push(&mut self, key: &[u8], value: Option<&[u8]>) {
        let start = self.data.len();
        self.data.extend_from_slice(key);
        let value_len = match value {
            Some(v) => {
                self.data.extend_from_slice(v);
                // Callers reject keys over 64 KiB and values of 4 GiB or more.
                u32::try_from(v.len()).unwrap_or(TOMBSTONE - 1)
            }
            None => TOMBSTONE,
        };
        self.slots.push(Slot {
            start,
            key_len: u32::try_from(key.len()).unwrap_or(u32::MAX),
            value_len,
        });
    }

    pub(crate) fn data_bytes(&self) -> usize {
        self.data.len()
    }

    /// Sorts by key, keeping only the last record of each key (changelog order
    /// means the last one is the current value).
    pub(crate) fn seal(self) -> SortedRun {
        let Self { data, mut slots } = self;
        let key = |s: &Slot| &data[s.start..s.start + s.key_len as usize];
        // Stable, so equal keys stay in arrival order and the last is the newest.
        slots.sort_by(|a, b| key(a).cmp(key(b)));
        let mut deduped: Vec<Slot> = Vec::with_capacity(slots.len());
        for slot in slots {
            match deduped.last_mut() {
                Some(last) if key(last) == key(&slot) => *last = slot,
                _ => deduped.push(slot),
            }
        }
        SortedRun {
            data,
            slots: deduped,
        }
    }
}

/// Strictly ascending keys with their latest value or tombstone.
#[derive(Debug)]
pub(crate) struct SortedRun {
    data: Vec<u8>,
    slots: Vec<Slot>,
}

impl SortedRun {
    pub(crate) fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&[u8], Option<&[u8]>)> + '_ {
        self.slots.iter().map(|s| {
            let key_end = s.start + s.key_len as usize;
            let key = self.data.get(s.start..key_end).unwrap_or_default();
            let value = (s.value_len != TOMBSTONE).then(|| {
                self.data
                    .get(key_end..key_end + s.value_len as usize)
                    .unwrap_or_default()
            });
            (key, value)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seal_sorts_and_keeps_the_last_write_per_key() {
        let mut b = RunBuilder::default();
        b.push(b"b", Some(b"1"));
        b.push(b"a", Some(b"2"));
        b.push(b"b", None);
        b.push(b"c", Some(b"3"));
        b.push(b"a", Some(b"4"));
        let run = b.seal();
        let got: Vec<_> = run
            .iter()
            .map(|(k, v)| (k.to_vec(), v.map(<[u8]>::to_vec)))
            .collect();
        assert_eq!(
            got,
            vec![
                (b"a".to_vec(), Some(b"4".to_vec())),
                (b"b".to_vec(), None),
                (b"c".to_vec(), Some(b"3".to_vec())),
            ]
        );
    }
}
