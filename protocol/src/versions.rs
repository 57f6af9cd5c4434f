//! ApiVersions negotiation.
//!
//! Each connection learns the broker's version ranges once, from its
//! ApiVersions response, and every request is then sent at the highest version
//! both sides speak. Weir may cap its own range below what `kafka-protocol`
//! can encode, where a newer version changes semantics Weir does not
//! implement (for example Fetch v13, which names topics by id).

use std::collections::HashMap;

use kafka_protocol::messages::{ApiKey, ApiVersionsResponse};
use kafka_protocol::protocol::{Request, VersionRange};

use crate::{ProtocolError, Result};

/// The version ranges a broker advertised, and the cluster's finalized
/// feature levels it reported with them (ApiVersions v3+).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BrokerVersions {
    ranges: HashMap<i16, VersionRange>,
    /// Feature name to its finalized (cluster-wide) maximum level, for
    /// example `transaction.version` -> 2 on a new Kafka 4.x cluster.
    finalized: HashMap<String, i16>,
}

impl BrokerVersions {
    /// Reads the ranges from an ApiVersions response. Keys unknown to
    /// `kafka-protocol` are kept, so they can still be reported.
    pub fn from_response(response: &ApiVersionsResponse) -> Self {
        let ranges = response
            .api_keys
            .iter()
            .map(|k| {
                (
                    k.api_key,
                    VersionRange {
                        min: k.min_version,
                        max: k.max_version,
                    },
                )
            })
            .collect();
        // Kafka marks the list valid only with an epoch of 0 or more.
        let finalized = if response.finalized_features_epoch >= 0 {
            response
                .finalized_features
                .iter()
                .map(|f| (f.name.to_string(), f.max_version_level))
                .collect()
        } else {
            HashMap::new()
        };
        Self { ranges, finalized }
    }

    /// Ranges from explicit `(api, min, max)` triples, for tests and fakes.
    pub fn from_ranges(ranges: impl IntoIterator<Item = (ApiKey, i16, i16)>) -> Self {
        Self {
            ranges: ranges
                .into_iter()
                .map(|(k, min, max)| (k as i16, VersionRange { min, max }))
                .collect(),
            finalized: HashMap::new(),
        }
    }

    /// The same ranges with `feature` finalized at `level`, for tests and fakes.
    #[must_use]
    pub fn with_finalized(mut self, feature: &str, level: i16) -> Self {
        self.finalized.insert(feature.to_owned(), level);
        self
    }

    /// The finalized level of a cluster feature, if the broker reported it.
    ///
    /// ```
    /// use weir_protocol::versions::BrokerVersions;
    /// let v = BrokerVersions::default().with_finalized("transaction.version", 2);
    /// assert_eq!(v.finalized_level("transaction.version"), Some(2));
    /// assert_eq!(v.finalized_level("group.version"), None);
    /// ```
    pub fn finalized_level(&self, feature: &str) -> Option<i16> {
        self.finalized.get(feature).copied()
    }

    /// The broker's range for `api`, if it supports it at all.
    pub fn range(&self, api: ApiKey) -> Option<VersionRange> {
        self.ranges.get(&(api as i16)).copied()
    }

    /// The highest version of `api` in both the broker's range and `ours`.
    ///
    /// # Errors
    /// [`ProtocolError::UnsupportedApi`] if the broker lacks the API, or
    /// [`ProtocolError::NoCommonVersion`], naming the API and both ranges.
    pub fn negotiate(&self, api: ApiKey, ours: VersionRange) -> Result<i16> {
        let theirs = self
            .range(api)
            .ok_or(ProtocolError::UnsupportedApi { api })?;
        let common = ours.intersect(&theirs);
        if common.is_empty() {
            return Err(ProtocolError::NoCommonVersion {
                api,
                ours_min: ours.min,
                ours_max: ours.max,
                theirs_min: theirs.min,
                theirs_max: theirs.max,
            });
        }
        Ok(common.max)
    }

    /// [`negotiate`](Self::negotiate) for request type `R`, with Weir's range
    /// capped at `max` (`None`: everything `kafka-protocol` can encode).
    ///
    /// # Errors
    /// As [`negotiate`](Self::negotiate).
    pub fn negotiate_for<R: Request>(&self, max: Option<i16>) -> Result<i16> {
        let api = crate::api::api_key_of::<R>()?;
        let mut ours = R::VERSIONS;
        if let Some(cap) = max {
            ours.max = ours.max.min(cap);
        }
        self.negotiate(api, ours)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::FetchRequest;
    use kafka_protocol::messages::api_versions_response::ApiVersion;

    #[test]
    fn picks_the_highest_common_version() {
        let resp = ApiVersionsResponse::default().with_api_keys(vec![
            ApiVersion::default()
                .with_api_key(ApiKey::Fetch as i16)
                .with_min_version(4)
                .with_max_version(17),
        ]);
        let versions = BrokerVersions::from_response(&resp);
        assert_eq!(
            versions.negotiate_for::<FetchRequest>(Some(12)).unwrap(),
            12
        );
        assert_eq!(
            versions
                .negotiate(ApiKey::Fetch, VersionRange { min: 0, max: 6 })
                .unwrap(),
            6
        );
    }

    #[test]
    fn reads_finalized_features_only_with_a_valid_epoch() {
        use kafka_protocol::messages::api_versions_response::FinalizedFeatureKey;
        let feature = FinalizedFeatureKey::default()
            .with_name("transaction.version".into())
            .with_min_version_level(0)
            .with_max_version_level(2);
        let resp = ApiVersionsResponse::default()
            .with_finalized_features_epoch(7)
            .with_finalized_features(vec![feature.clone()]);
        let versions = BrokerVersions::from_response(&resp);
        assert_eq!(versions.finalized_level("transaction.version"), Some(2));
        let stale = ApiVersionsResponse::default()
            .with_finalized_features_epoch(-1)
            .with_finalized_features(vec![feature]);
        assert_eq!(
            BrokerVersions::from_response(&stale).finalized_level("transaction.version"),
            None
        );
    }

    #[test]
    fn names_the_api_when_nothing_is_shared() {
        let versions = BrokerVersions::from_ranges([(ApiKey::Produce, 9, 11)]);
        let err = versions
            .negotiate(ApiKey::Produce, VersionRange { min: 3, max: 8 })
            .unwrap_err();
        assert!(matches!(
            err,
            ProtocolError::NoCommonVersion {
                api: ApiKey::Produce,
                ..
            }
        ));
        assert!(err.to_string().contains("Produce"));
        assert!(matches!(
            versions.negotiate(ApiKey::Fetch, VersionRange { min: 0, max: 12 }),
            Err(ProtocolError::UnsupportedApi { api: ApiKey::Fetch })
        ));
    }
}
