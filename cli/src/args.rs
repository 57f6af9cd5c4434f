//! The command line, as clap types.

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::groups_cmd::GroupsCommand;
use crate::store_cmd::StoreCommand;

/// weir: produce, consume and inspect Kafka topics and Weir state stores.
#[derive(Debug, Parser)]
#[command(name = "weir", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Read lines from stdin and produce each as one record.
    Produce(ProduceArgs),
    /// Print records of a topic.
    Consume(ConsumeArgs),
    /// List, create, delete or describe topics.
    Topics {
        /// The topics command.
        #[command(subcommand)]
        command: TopicsCommand,
    },
    /// Print the earliest and latest offset of each partition of a topic.
    Offsets(OffsetsArgs),
    /// Run a stateful word count on an embedded cluster (no setup needed).
    Demo(crate::demo::DemoArgs),
    /// List consumer groups, or describe their members, assignments and lag.
    Groups(GroupsArgs),
    /// Inspect a Weir state store directory (no broker needed).
    Store {
        /// The store command.
        #[command(subcommand)]
        command: StoreCommand,
    },
    /// Load-test a topic: produce or consume at full speed (or a capped rate)
    /// and report throughput and latency percentiles.
    Perf {
        /// The perf command.
        #[command(subcommand)]
        command: crate::perf::PerfCommand,
    },
}

/// Where the cluster is, and extra client properties.
#[derive(Debug, Clone, Args)]
pub struct ConnectArgs {
    /// Bootstrap brokers, HOST:PORT[,HOST:PORT…].
    #[arg(short = 'b', long = "brokers", env = "KAFKA_BOOTSTRAP")]
    pub brokers: String,
    /// Extra client properties, Kafka-named: -X linger.ms=5 (repeatable).
    #[arg(short = 'X', value_name = "KEY=VALUE")]
    pub properties: Vec<String>,
}

impl ConnectArgs {
    /// The properties as key/value pairs, bootstrap.servers first.
    pub fn properties(&self) -> Result<Vec<(String, String)>, String> {
        let mut props = vec![("bootstrap.servers".to_owned(), self.brokers.clone())];
        props.push(("client.id".to_owned(), "weir-cli".to_owned()));
        for p in &self.properties {
            let (k, v) = p
                .split_once('=')
                .ok_or_else(|| format!("-X {p}: expected KEY=VALUE"))?;
            props.push((k.trim().to_owned(), v.trim().to_owned()));
        }
        Ok(props)
    }
}

/// Compression codecs.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Codec {
    /// No compression.
    None,
    /// gzip.
    Gzip,
    /// snappy.
    Snappy,
    /// lz4.
    Lz4,
    /// zstd.
    Zstd,
}

/// `weir produce`.
#[derive(Debug, Args)]
pub struct ProduceArgs {
    /// The cluster.
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The topic.
    #[arg(short = 't', long)]
    pub topic: String,
    /// Split each line into key and value at the first SEP.
    #[arg(short = 'k', long = "key-delimiter", value_name = "SEP")]
    pub key_delimiter: Option<String>,
    /// Compression codec.
    #[arg(short = 'z', long = "compression", value_enum, default_value = "none")]
    pub codec: Codec,
    /// Produce to this partition instead of the partitioner's choice.
    #[arg(short = 'p', long)]
    pub partition: Option<i32>,
    /// Send all of stdin in one transaction with this transactional.id, then commit it.
    #[arg(long)]
    pub transactional_id: Option<String>,
    /// With --transactional-id: abort the transaction instead of committing it.
    #[arg(long, requires = "transactional_id")]
    pub abort: bool,
}

/// Isolation levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Isolation {
    /// Every record, including those of open and aborted transactions.
    #[value(name = "read_uncommitted")]
    ReadUncommitted,
    /// Only records of committed transactions.
    #[value(name = "read_committed")]
    ReadCommitted,
}

/// `weir consume`.
#[derive(Debug, Args)]
pub struct ConsumeArgs {
    /// The cluster.
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The topic.
    #[arg(short = 't', long)]
    pub topic: String,
    /// Only this partition (default: all).
    #[arg(short = 'p', long)]
    pub partition: Option<i32>,
    /// Start at the log start instead of the end (in a group: where the
    /// group has no committed offset).
    #[arg(long)]
    pub from_beginning: bool,
    /// Consume as a member of this consumer group, committing offsets as it goes.
    #[arg(short = 'G', long, conflicts_with_all = ["partition", "exit_at_end"])]
    pub group: Option<String>,
    /// With --group: a static member id (group.instance.id).
    #[arg(long, requires = "group")]
    pub instance_id: Option<String>,
    /// Exit after this many records.
    #[arg(short = 'c', long)]
    pub count: Option<u64>,
    /// Exit once every partition has been read to the end offset it had at start.
    #[arg(short = 'e', long = "exit-at-end")]
    pub exit_at_end: bool,
    /// Isolation level.
    #[arg(long, value_enum, default_value = "read_uncommitted")]
    pub isolation: Isolation,
    /// Output format: %t topic, %p partition, %o offset, %k key, %v value,
    /// %T timestamp (ms), %h headers, %% a percent sign; \t, \n and \\ escapes.
    /// A newline is added if the format has none.
    #[arg(short = 'f', long, default_value = "%v")]
    pub format: String,
}

/// `weir topics …`.
#[derive(Debug, Subcommand)]
pub enum TopicsCommand {
    /// List topics with their partition counts.
    List {
        /// The cluster.
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// Create a topic.
    Create {
        /// The cluster.
        #[command(flatten)]
        connect: ConnectArgs,
        /// The topic name.
        name: String,
        /// Partitions.
        #[arg(short = 'p', long, default_value_t = 1)]
        partitions: i32,
        /// Replication factor.
        #[arg(short = 'r', long, default_value_t = 1)]
        replication_factor: i16,
        /// Topic configs: -c cleanup.policy=compact (repeatable).
        #[arg(short = 'c', long = "config", value_name = "KEY=VALUE")]
        configs: Vec<String>,
    },
    /// Delete a topic.
    Delete {
        /// The cluster.
        #[command(flatten)]
        connect: ConnectArgs,
        /// The topic name.
        name: String,
    },
    /// Show a topic's partitions, leaders and configs.
    Describe {
        /// The cluster.
        #[command(flatten)]
        connect: ConnectArgs,
        /// The topic name.
        name: String,
    },
}

/// `weir groups …`.
#[derive(Debug, Args)]
pub struct GroupsArgs {
    /// The cluster.
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The groups command.
    #[command(subcommand)]
    pub command: GroupsCommand,
}

/// `weir offsets`.
#[derive(Debug, Args)]
pub struct OffsetsArgs {
    /// The cluster.
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The topic.
    #[arg(short = 't', long)]
    pub topic: String,
}
