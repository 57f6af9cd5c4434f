//! The application's topics: the user's inputs must exist, internal topics
//! (changelogs, repartition topics) are created, or checked when they exist.

use std::collections::BTreeMap;

use weir_client::admin::{Admin, ConfigResource, NewTopic};
use weir_client::kerror::codes;

use crate::error::{Result, StreamsError};
use crate::topology::Topology;

fn topic_error(topic: &str, reason: impl Into<String>) -> StreamsError {
    StreamsError::Topic {
        topic: topic.to_owned(),
        reason: reason.into(),
    }
}

/// Partition counts of the topics that exist among `topics` (missing ones left out).
async fn partition_counts(admin: &Admin, topics: &[String]) -> Result<BTreeMap<String, i32>> {
    let mut counts = BTreeMap::new();
    // One at a time: a missing topic fails the whole Metadata request.
    for topic in topics {
        let described = match admin.describe_topics(&[topic.as_str()]).await {
            Ok(d) => d,
            Err(weir_client::ClientError::Server { code, .. })
                if code.code == codes::UNKNOWN_TOPIC_OR_PARTITION =>
            {
                continue;
            }
            Err(e) => return Err(StreamsError::client(format!("describing topic {topic}"), e)),
        };
        for t in described {
            match t.error {
                None => {
                    counts.insert(
                        t.name,
                        i32::try_from(t.partitions.len()).unwrap_or(i32::MAX),
                    );
                }
                Some(code) if code.code == codes::UNKNOWN_TOPIC_OR_PARTITION => {}
                Some(code) => return Err(topic_error(&t.name, format!("metadata error {code}"))),
            }
        }
    }
    Ok(counts)
}

/// Checks the input topics, creates or checks the internal topics, and
/// returns the partition count of every subtopology.
///
/// # Errors
///
/// A missing input topic, inputs of one subtopology that are not
/// co-partitioned, an internal topic that exists with another partition count
/// or cleanup policy, or a client error.
pub(crate) async fn prepare(
    admin: &Admin,
    topology: &Topology,
    application_id: &str,
) -> Result<BTreeMap<u32, i32>> {
    let external = topology.external_source_topics();
    let existing = partition_counts(admin, &external).await?;
    if let Some(missing) = external.iter().find(|t| !existing.contains_key(*t)) {
        return Err(topic_error(missing, "source topic does not exist"));
    }
    let counts = topology.partition_counts(&existing)?;
    let internal = topology.internal_topics(application_id, &counts);
    let names: Vec<String> = internal.iter().map(|t| t.name.clone()).collect();
    let present = partition_counts(admin, &names).await?;
    let mut to_create = Vec::new();
    for topic in &internal {
        match present.get(&topic.name) {
            Some(&n) if n != topic.partitions => {
                return Err(topic_error(
                    &topic.name,
                    format!(
                        "exists with {n} partitions, but the application needs {} (the input's \
                         partition count); delete it or restore the input's partitions",
                        topic.partitions
                    ),
                ));
            }
            Some(_) => check_policy(admin, &topic.name, &topic.configs).await?,
            None => {
                let mut new = NewTopic::new(topic.name.clone(), topic.partitions);
                for (k, v) in &topic.configs {
                    new = new.config(k.clone(), v.clone());
                }
                to_create.push(new);
            }
        }
    }
    if !to_create.is_empty() {
        let results = admin
            .create_topics(&to_create)
            .await
            .map_err(|e| StreamsError::client("creating internal topics", e))?;
        for (name, result) in results {
            match result {
                Ok(()) => tracing::info!(topic = %name, "created internal topic"),
                // Another instance created it at the same moment.
                Err(weir_client::ClientError::Server { code, .. })
                    if code.code == codes::TOPIC_ALREADY_EXISTS => {}
                Err(e) => return Err(StreamsError::client(format!("creating topic {name}"), e)),
            }
        }
    }
    Ok(counts)
}

/// An existing changelog must keep its cleanup policy: a changelog that is
/// deleted by time instead of compacted silently loses state.
async fn check_policy(admin: &Admin, topic: &str, wanted: &[(String, String)]) -> Result<()> {
    let Some((_, policy)) = wanted.iter().find(|(k, _)| k == "cleanup.policy") else {
        return Ok(());
    };
    let entries = admin
        .describe_configs(&ConfigResource::Topic(topic.to_owned()))
        .await
        .map_err(|e| StreamsError::client(format!("describing the configs of {topic}"), e))?;
    let actual = entries
        .iter()
        .find(|e| e.name == "cleanup.policy")
        .and_then(|e| e.value.clone());
    let normalise = |p: &str| {
        let mut parts: Vec<String> = p.split(',').map(|s| s.trim().to_owned()).collect();
        parts.sort();
        parts
    };
    match actual {
        Some(actual) if normalise(&actual) != normalise(policy) => Err(topic_error(
            topic,
            format!("has cleanup.policy={actual}, but the application needs {policy}"),
        )),
        _ => Ok(()),
    }
}
