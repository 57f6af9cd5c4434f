//! Connecting to the cluster and looking up a topic, shared by the commands.

use weir_client::admin::Admin;
use weir_client::cluster::TopicMetadata;
use weir_client::config::ClientConfig;

use crate::args::ConnectArgs;

/// Kafka-named properties as the `&str` pairs the configs take.
pub fn as_pairs(props: &[(String, String)]) -> Vec<(&str, &str)> {
    props
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

/// An admin client for the given brokers and `-X` properties, for the
/// commands whose client is the admin client: every `-X` key must be one of
/// its properties.
pub async fn admin(connect: &ConnectArgs) -> Result<Admin, String> {
    admin_with(connect, connect.properties()?).await
}

/// An admin client for a producing or consuming command's look-ups (the
/// topic, its partitions and offsets), with the `-X` properties every
/// client shares (brokers, security, timeouts). Call it after the command
/// built its own client's configuration from all of `-X`: that is where
/// an unknown key is reported, naming the command's client.
pub async fn lookup_admin(connect: &ConnectArgs) -> Result<Admin, String> {
    let mut props = connect.properties()?;
    props.retain(|(key, _)| ClientConfig::KEYS.contains(&key.as_str()));
    admin_with(connect, props).await
}

async fn admin_with(connect: &ConnectArgs, props: Vec<(String, String)>) -> Result<Admin, String> {
    let brokers = connect.brokers().map_err(|e| e.to_string())?;
    let config = ClientConfig::from_properties(&as_pairs(&props)).map_err(|e| e.to_string())?;
    Admin::connect(config)
        .await
        .map_err(|e| format!("cannot reach the cluster at {brokers}: {e}"))
}

/// The topic's metadata, or an "unknown topic" error.
pub async fn topic(admin: &Admin, name: &str) -> Result<TopicMetadata, String> {
    let topics = admin
        .describe_topics(&[name])
        .await
        .map_err(|e| format!("topic {name}: {e}"))?;
    match topics.into_iter().find(|t| t.name == name) {
        Some(t) if t.error.is_none() && !t.partitions.is_empty() => Ok(t),
        Some(t) => Err(format!(
            "unknown topic {name}{}",
            t.error.map(|e| format!(" ({e})")).unwrap_or_default()
        )),
        None => Err(format!("unknown topic {name}")),
    }
}
