//! Page views per user per minute, in the DSL: hopping windows of one
//! minute every 20 seconds, five seconds of grace, and only each window's
//! final count (`suppress`).
//!
//! ```text
//! input (key = user, value = page)
//!   -> group by user -> hopping windows (1 min, every 20 s, grace 5 s)
//!   -> count (window store `views-per-minute`)
//!   -> suppress until each window closes
//!   -> output (key = the user and window start in Kafka Streams' windowed
//!      format, value = the count as a big-endian long)
//! ```

use std::time::Duration;

use weir_streams::Topology;
use weir_streams::dsl::{Materialized, StreamsBuilder, TimeWindows};

/// The window size.
pub const SIZE: Duration = Duration::from_secs(60);
/// A new window starts this often.
pub const ADVANCE: Duration = Duration::from_secs(20);
/// How late a view may come and still count.
pub const GRACE: Duration = Duration::from_secs(5);

/// The topology, reading `input` and writing `output`.
pub fn topology(input: &str, output: &str) -> weir_streams::Result<Topology> {
    let builder = StreamsBuilder::new();
    builder
        .stream::<String, String>(input)
        .group_by_key()
        .windowed_by(TimeWindows::of_size_and_grace(SIZE, GRACE).advance_by(ADVANCE))
        .materialized(Materialized::as_("views-per-minute"))
        .count()
        .suppress_until_window_closes()
        .to_stream()
        .to(output);
    builder.build()
}
