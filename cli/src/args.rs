//! The command line, as clap types.

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::groups_cmd::GroupsCommand;
use crate::store_cmd::StoreCommand;

/// weir: produce, consume and inspect Kafka topics and Weir state stores.
#[derive(Debug, Parser)]
#[command(name = "weir", version, about)]
pub struct Cli {
    /// The cluster: `-b` and `-X` are global, so they are accepted before
    /// the subcommand name or anywhere after it.
    #[command(flatten)]
    pub connect: ConnectArgs,
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
    Groups {
        /// The groups command.
        #[command(subcommand)]
        command: GroupsCommand,
    },
    /// Inspect a running weir-streams application from the broker: its
    /// members, tasks, input lag and changelogs.
    App {
        /// The app command.
        #[command(subcommand)]
        command: crate::app_cmd::AppCommand,
    },
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
///
/// Both arguments are global: `weir -b H groups describe G`,
/// `weir groups -b H describe G` and `weir groups describe -b H G` are the
/// same command. Commands that need no broker (`store`, `demo`) ignore them.
#[derive(Debug, Clone, Default, Args)]
pub struct ConnectArgs {
    /// Bootstrap brokers, HOST:PORT[,HOST:PORT…].
    #[arg(short = 'b', long = "brokers", env = "KAFKA_BOOTSTRAP", global = true)]
    pub brokers: Option<String>,
    /// Extra client properties, Kafka-named: -X linger.ms=5 (repeatable).
    #[arg(short = 'X', value_name = "KEY=VALUE", global = true)]
    pub properties: Vec<String>,
}

/// What is wrong with the connection arguments.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectError {
    /// Neither `-b` nor `$KAFKA_BOOTSTRAP` was given to a command that needs a broker.
    #[error("no brokers: pass -b HOST:PORT or set KAFKA_BOOTSTRAP")]
    NoBrokers,
    /// A `-X` argument without `=`.
    #[error("-X {0}: expected KEY=VALUE")]
    BadProperty(String),
}

impl ConnectArgs {
    /// The bootstrap brokers.
    ///
    /// # Errors
    /// [`ConnectError::NoBrokers`] when neither `-b` nor `$KAFKA_BOOTSTRAP` is set.
    pub fn brokers(&self) -> Result<&str, ConnectError> {
        self.brokers
            .as_deref()
            .filter(|b| !b.trim().is_empty())
            .ok_or(ConnectError::NoBrokers)
    }

    /// The properties as key/value pairs, bootstrap.servers first.
    ///
    /// # Errors
    /// The message of a [`ConnectError`]: no brokers, or a `-X` without `=`.
    pub fn properties(&self) -> Result<Vec<(String, String)>, String> {
        self.try_properties().map_err(|e| e.to_string())
    }

    /// [`ConnectArgs::properties`] with the typed error.
    ///
    /// # Errors
    /// [`ConnectError::NoBrokers`] or [`ConnectError::BadProperty`].
    pub fn try_properties(&self) -> Result<Vec<(String, String)>, ConnectError> {
        let mut props = vec![("bootstrap.servers".to_owned(), self.brokers()?.to_owned())];
        props.push(("client.id".to_owned(), "weir-cli".to_owned()));
        for p in &self.properties {
            let (k, v) = p
                .split_once('=')
                .ok_or_else(|| ConnectError::BadProperty(p.clone()))?;
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
    List,
    /// Create a topic.
    Create {
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
        /// The topic name.
        name: String,
    },
    /// Show a topic's partitions, leaders and configs.
    Describe {
        /// The topic name.
        name: String,
    },
}

/// `weir offsets TOPIC` (or `-t TOPIC`).
#[derive(Debug, Args)]
pub struct OffsetsArgs {
    /// The topic.
    #[arg(
        value_name = "TOPIC",
        required_unless_present = "topic_flag",
        conflicts_with = "topic_flag"
    )]
    pub topic: Option<String>,
    /// The topic, as the other commands take it.
    #[arg(short = 't', long = "topic", value_name = "TOPIC")]
    pub topic_flag: Option<String>,
}

impl OffsetsArgs {
    /// The topic, however it was given (clap requires one of the two).
    pub fn topic(&self) -> &str {
        self.topic
            .as_deref()
            .or(self.topic_flag.as_deref())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::*;

    fn parse(line: &str) -> Cli {
        Cli::try_parse_from(line.split_whitespace()).unwrap_or_else(|e| panic!("{line}: {e}"))
    }

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn brokers_and_properties_are_accepted_before_or_after_any_subcommand_name() {
        for line in [
            "weir -b h:1 -X a=1 groups describe g",
            "weir groups -b h:1 -X a=1 describe g",
            "weir groups describe -b h:1 -X a=1 g",
            "weir groups describe g -X a=1 --brokers h:1",
        ] {
            let cli = parse(line);
            assert_eq!(cli.connect.brokers.as_deref(), Some("h:1"), "{line}");
            assert_eq!(cli.connect.properties, ["a=1"], "{line}");
            assert!(
                matches!(&cli.command, Command::Groups { command: GroupsCommand::Describe { groups } } if groups == &["g"]),
                "{line}: {:?}",
                cli.command
            );
        }
        for line in [
            "weir -b h:1 topics create t -p 2",
            "weir topics -b h:1 create t -p 2",
            "weir topics create -b h:1 t -p 2",
            "weir -b h:1 produce -t t",
            "weir consume -t t -b h:1",
            "weir offsets -b h:1 -t t",
            "weir offsets -b h:1 t",
            "weir -b h:1 groups list",
            "weir groups list -b h:1",
        ] {
            assert_eq!(
                parse(line).connect.brokers.as_deref(),
                Some("h:1"),
                "{line}"
            );
        }
    }

    #[test]
    fn store_and_demo_need_no_brokers() {
        assert!(matches!(
            parse("weir store offsets /x").command,
            Command::Store { .. }
        ));
        assert!(matches!(parse("weir demo").command, Command::Demo(_)));
    }

    #[test]
    fn missing_brokers_and_bad_properties_are_typed_errors() {
        let none = ConnectArgs::default();
        assert_eq!(none.try_properties(), Err(ConnectError::NoBrokers));
        assert_eq!(
            none.properties().unwrap_err(),
            "no brokers: pass -b HOST:PORT or set KAFKA_BOOTSTRAP"
        );
        let bad = ConnectArgs {
            brokers: Some("h:1".into()),
            properties: vec!["linger.ms".into()],
        };
        assert_eq!(
            bad.try_properties(),
            Err(ConnectError::BadProperty("linger.ms".into()))
        );
        let good = ConnectArgs {
            brokers: Some("h:1".into()),
            properties: vec!["linger.ms = 5".into()],
        };
        let props = good.try_properties().unwrap();
        assert_eq!(props[0], ("bootstrap.servers".into(), "h:1".into()));
        assert!(props.contains(&("linger.ms".into(), "5".into())));
    }
}
