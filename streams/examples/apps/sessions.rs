//! A session activity report, in the DSL: a user's actions less than five
//! minutes apart make one session; each session's final action count comes
//! out once it is over.
//!
//! ```text
//! input (key = user, value = action)
//!   -> group by user -> session windows (gap 5 min, grace 30 s)
//!   -> count (session store `activity-sessions`)
//!   -> suppress until each session closes
//!   -> output (key = the user, session end and start in Kafka Streams'
//!      session-windowed format, value = the count as a big-endian long)
//! ```

use std::time::Duration;

use weir_streams::Topology;
use weir_streams::dsl::{Materialized, SessionWindows, StreamsBuilder};

/// The inactivity gap that ends a session.
pub const GAP: Duration = Duration::from_secs(300);
/// How late an action may come and still count.
pub const GRACE: Duration = Duration::from_secs(30);

/// The topology, reading `input` and writing `output`.
pub fn topology(input: &str, output: &str) -> weir_streams::Result<Topology> {
    let builder = StreamsBuilder::new();
    builder
        .stream::<String, String>(input)
        .group_by_key()
        .windowed_by_session(SessionWindows::of_inactivity_gap_and_grace(GAP, GRACE))
        .materialized(Materialized::as_("activity-sessions"))
        .count()
        .suppress_until_window_closes()
        .to_stream()
        .to(output);
    builder.build()
}
