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
    let missing: Vec<&str> = names
        .iter()
        .filter(|n| !present.contains_key(*n))
        .map(String::as_str)
        .collect();
    if missing.iter().any(|n| is_generated(application_id, n)) {
        let all: Vec<String> = admin
            .list_topics()
            .await
            .map_err(|e| StreamsError::client("listing topics", e))?
            .into_iter()
            .map(|t| t.name)
            .collect();
        check_renumbering(application_id, &names, &missing, &all)?;
    }
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

/// Whether `topic` is an internal topic of `application_id` named after a
/// generated DSL name (`KSTREAM-...-0000000007`), which renumbers when an
/// operation is added before it.
fn is_generated(application_id: &str, topic: &str) -> bool {
    topic
        .strip_prefix(application_id)
        .and_then(|rest| rest.strip_prefix('-'))
        .is_some_and(|rest| rest.starts_with("KSTREAM-") || rest.starts_with("KTABLE-"))
}

/// The internal topic's kind, by its suffix.
fn kind(topic: &str) -> Option<&'static str> {
    ["-changelog", "-repartition"]
        .into_iter()
        .find(|suffix| topic.ends_with(suffix))
}

/// Refuses to start when the topology needs an internal topic with a
/// generated name that does not exist yet while one of the same kind with
/// another generated name does: the topology changed and the generated
/// names moved, so a store would start from an empty changelog (and the old
/// state be silently abandoned), the failure Kafka Streams users meet when
/// they add an operation to an application without naming its stores.
fn check_renumbering(
    application_id: &str,
    needed: &[String],
    missing: &[&str],
    existing: &[String],
) -> Result<()> {
    let orphans: Vec<&String> = existing
        .iter()
        .filter(|t| is_generated(application_id, t) && !needed.contains(t))
        .collect();
    // Changelogs first: they hold the state a renumbering would abandon.
    let mut generated: Vec<&&str> = missing
        .iter()
        .filter(|n| is_generated(application_id, n))
        .collect();
    generated.sort_by_key(|n| kind(n) != Some("-changelog"));
    for new in generated {
        let same_kind: Vec<&str> = orphans
            .iter()
            .filter(|o| kind(o).is_some() && kind(o) == kind(new))
            .map(|o| o.as_str())
            .collect();
        if !same_kind.is_empty() {
            return Err(topic_error(
                new,
                format!(
                    concat!(
                        "the topology needs this topic, but {} exist(s) from an earlier version ",
                        "of the topology: the generated names of its stores or repartitions ",
                        "changed, and starting would leave their state behind. Name the stores ",
                        "(Materialized::as_) and repartitions (repartition(Some(name))) with the ",
                        "names of the existing topics, or delete those topics to start from ",
                        "empty state",
                    ),
                    same_kind.join(", ")
                ),
            ));
        }
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_renumbered_generated_store_is_refused_and_a_named_one_is_not() {
        let old = names(&["app-KSTREAM-AGGREGATE-STATE-STORE-0000000003-changelog"]);
        let needed = names(&["app-KSTREAM-AGGREGATE-STATE-STORE-0000000004-changelog"]);
        let missing = ["app-KSTREAM-AGGREGATE-STATE-STORE-0000000004-changelog"];
        let err = check_renumbering("app", &needed, &missing, &old).unwrap_err();
        assert!(err.to_string().contains("0000000003"), "{err}");
        // A first start: nothing exists.
        assert!(check_renumbering("app", &needed, &missing, &[]).is_ok());
        // A named store needs no generated topic.
        let named = names(&["app-counts-changelog"]);
        assert!(check_renumbering("app", &named, &["app-counts-changelog"], &old).is_ok());
        // A leftover repartition topic does not block a new changelog.
        let repart = names(&["app-KSTREAM-AGGREGATE-STATE-STORE-0000000003-repartition"]);
        assert!(check_renumbering("app", &needed, &missing, &repart).is_ok());
        // Another application's topics do not count.
        let other = names(&["other-KSTREAM-AGGREGATE-STATE-STORE-0000000003-changelog"]);
        assert!(check_renumbering("app", &needed, &missing, &other).is_ok());
    }
}
