//! KIP-227 incremental fetch sessions.
//!
//! A full fetch with session id 0 and epoch 0 opens a session that
//! remembers the partitions and their fetch positions. Later requests carry
//! the session id and the next epoch, and list only the partitions that
//! changed (plus a forgotten list); the response lists only partitions with
//! new data or changed watermarks.

use indexmap::IndexMap;

/// Kafka's `max.incremental.fetch.session.cache.slots` default.
pub const MAX_SESSIONS: usize = 1000;

/// What a session remembers about one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionPartition {
    /// Where the next fetch of this partition starts.
    pub fetch_offset: i64,
    /// The partition's byte limit.
    pub max_bytes: i32,
    /// The leader epoch the client believes in (-1: unchecked).
    pub current_leader_epoch: i32,
    /// High watermark, last stable offset and log start offset as last
    /// sent, so that an incremental response can leave out unchanged ones.
    pub last_sent: Option<(i64, i64, i64)>,
}

/// One session.
#[derive(Debug, Clone)]
pub struct FetchSession {
    /// The id given to the client.
    pub id: i32,
    /// The epoch the next request must carry.
    pub next_epoch: i32,
    /// The partitions, in the order the client added them.
    pub partitions: IndexMap<(String, i32), SessionPartition>,
}

/// All open sessions.
#[derive(Debug, Default)]
pub struct FetchSessions {
    sessions: IndexMap<i32, FetchSession>,
    last_id: i32,
}

impl FetchSessions {
    /// Opens a new session with the next epoch 1.
    pub fn open(&mut self, partitions: IndexMap<(String, i32), SessionPartition>) -> i32 {
        if self.sessions.len() >= MAX_SESSIONS {
            // Evict the oldest; its client gets FETCH_SESSION_ID_NOT_FOUND and starts over.
            self.sessions.shift_remove_index(0);
        }
        self.last_id = if self.last_id == i32::MAX {
            1
        } else {
            self.last_id + 1
        };
        let id = self.last_id;
        self.sessions.insert(
            id,
            FetchSession {
                id,
                next_epoch: 1,
                partitions,
            },
        );
        id
    }

    /// A session by id.
    pub fn get_mut(&mut self, id: i32) -> Option<&mut FetchSession> {
        self.sessions.get_mut(&id)
    }

    /// Closes a session.
    pub fn close(&mut self, id: i32) -> Option<FetchSession> {
        self.sessions.shift_remove(&id)
    }

    /// Number of open sessions.
    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    /// Whether no session is open.
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// Forgets every partition of a deleted topic.
    pub fn forget_topic(&mut self, topic: &str) {
        for s in self.sessions.values_mut() {
            s.partitions.retain(|(t, _), _| t != topic);
        }
    }
}

/// The epoch after `epoch`, wrapping to 1 like Kafka's `FetchMetadata.nextEpoch`.
pub fn next_epoch(epoch: i32) -> i32 {
    if epoch == i32::MAX { 1 } else { epoch + 1 }
}
