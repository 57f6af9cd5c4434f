//! Shared pieces of the interop tests: which brokers and independent
//! clients this run has, the records both sides write, and how a record
//! read back is compared with the one written.
//!
//! Independent clients run through `scripts/interop/kafka_tool.py`
//! (confluent-kafka = librdkafka, and kafka-python), with the Python that
//! `scripts/pyenv.sh` sets up (`$WEIR_PYTHON`). A missing client or broker
//! prints "skipped: ..." and passes, unless `WEIR_EXPECT_BROKER=1`: then it
//! fails, so CI is never silently green.

pub mod base64;
pub mod kafka_tool;
pub mod records;

use std::path::PathBuf;

use weir_client::admin::{Admin, NewTopic};
use weir_client::config::ClientConfig;
use weir_testkit::Cluster;

/// The codecs every direction is checked with, by their Kafka names.
pub const CODECS: [&str; 5] = ["none", "gzip", "snappy", "lz4", "zstd"];

fn expect_broker() -> bool {
    std::env::var("WEIR_EXPECT_BROKER").as_deref() == Ok("1")
}

/// Prints why `test` is skipped, or fails it when CI expected everything.
fn skip(test: &str, why: &str) {
    assert!(!expect_broker(), "{test}: WEIR_EXPECT_BROKER=1 but {why}");
    println!("skipped: {test}: {why}");
}

fn non_empty_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// The independent clients: a Python with confluent-kafka and kafka-python,
/// and the kafka_tool.py script that drives them.
#[derive(Debug, Clone)]
pub struct Tools {
    /// `$WEIR_PYTHON`.
    pub python: PathBuf,
    /// `$WEIR_KAFKA_TOOL`, else the copy in this checkout.
    pub kafka_tool: PathBuf,
}

/// The independent clients, or `None` after printing why `test` is skipped.
pub fn tools_or_skip(test: &str) -> Option<Tools> {
    let Some(python) = non_empty_var("WEIR_PYTHON") else {
        skip(
            test,
            "WEIR_PYTHON is unset (scripts/pyenv.sh prints a Python with confluent-kafka and kafka-python)",
        );
        return None;
    };
    // The script is part of this checkout, so it needs no variable of its own.
    let kafka_tool = non_empty_var("WEIR_KAFKA_TOOL").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/interop/kafka_tool.py"),
        PathBuf::from,
    );
    Some(Tools {
        python: PathBuf::from(python),
        kafka_tool,
    })
}

/// A broker the records travel through.
pub enum Broker {
    /// The broker at `$KAFKA_BOOTSTRAP` (tansu under scripts/test.sh).
    External {
        /// `bootstrap.servers`.
        bootstrap: String,
        /// `$WEIR_BROKER_KIND`, or "external" when unset.
        kind: String,
    },
    /// An in-process weir-testkit cluster over TCP, so librdkafka and
    /// kafka-python reach it like any broker.
    Testkit(Cluster),
}

impl Broker {
    /// The broker at `$KAFKA_BOOTSTRAP`, or `None` after printing why `test`
    /// is skipped.
    pub fn external_or_skip(test: &str) -> Option<Broker> {
        let Some(bootstrap) = non_empty_var("KAFKA_BOOTSTRAP") else {
            skip(
                test,
                "KAFKA_BOOTSTRAP is unset (scripts/test.sh starts tansu and sets it)",
            );
            return None;
        };
        let kind = non_empty_var("WEIR_BROKER_KIND").unwrap_or_else(|| "external".to_owned());
        Some(Broker::External { bootstrap, kind })
    }

    /// A three-broker weir-testkit cluster, so the partitions of a topic
    /// have different leaders.
    pub async fn testkit() -> Broker {
        let cluster = Cluster::builder().brokers(3).build().await.unwrap();
        Broker::Testkit(cluster)
    }

    /// `bootstrap.servers` for every client.
    pub fn bootstrap(&self) -> String {
        match self {
            Broker::External { bootstrap, .. } => bootstrap.clone(),
            Broker::Testkit(cluster) => cluster.bootstrap(),
        }
    }

    /// The name results are reported under.
    pub fn label(&self) -> String {
        match self {
            Broker::External { kind, .. } => kind.clone(),
            Broker::Testkit(_) => "weir-testkit".to_owned(),
        }
    }

    /// Creates a fresh topic named after `what`, unique to this run (tansu
    /// outlives a test run), with `partitions` partitions.
    pub async fn fresh_topic(&self, what: &str, partitions: i32) -> String {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let topic = format!("interop-{what}-{}-{nanos}", std::process::id());
        let config =
            ClientConfig::from_properties(&[("bootstrap.servers", &self.bootstrap())]).unwrap();
        let admin = Admin::connect(config).await.unwrap();
        admin
            .create_topic(NewTopic::new(topic.clone(), partitions))
            .await
            .unwrap_or_else(|e| panic!("[{}] creating {topic}: {e}", self.label()));
        topic
    }
}
