//! Orders enriched with their customer's name, in the DSL: a stream-table
//! join.
//!
//! ```text
//! customers (key = customer id, value = name; null deletes)
//!   -> table, materialized in `customers` (queryable)
//! orders (key = customer id, value = "order-id,amount")
//!   -> join with customers on the key (orders of unknown customers dropped)
//!   -> output (key = customer id, value = "order-id,name,amount")
//! ```

use weir_streams::Topology;
use weir_streams::dsl::{Materialized, StreamsBuilder};

/// The customers table's store.
pub const STORE: &str = "customers";

/// The topology: `customers` and `orders` in, `output` out.
pub fn topology(customers: &str, orders: &str, output: &str) -> weir_streams::Result<Topology> {
    let builder = StreamsBuilder::new();
    let names = builder.table::<String, String>(customers, Materialized::as_(STORE));
    builder
        .stream::<String, String>(orders)
        .join(&names, |order, name| match order.split_once(',') {
            Some((id, amount)) => format!("{id},{name},{amount}"),
            None => format!("{order},{name},?"),
        })
        .to(output);
    builder.build()
}
