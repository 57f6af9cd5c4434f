//! Consumer-protocol encodings: bytes built by hand from Kafka's schema
//! (`ConsumerProtocolSubscription.json`, `ConsumerProtocolAssignment.json`),
//! round trips at every version, agreement with the independent
//! `kafka-protocol` implementation, and typed errors on bad bytes.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use proptest::prelude::*;
use weir_group::GroupError;
use weir_group::consumer_protocol::{Assignment, NO_GENERATION, Subscription, TopicPartitions};
use weir_protocol::kafka_protocol::messages::{
    ConsumerProtocolAssignment, ConsumerProtocolSubscription, TopicName,
    consumer_protocol_assignment, consumer_protocol_subscription,
};
use weir_protocol::kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

/// Java's layout, written field by field from the schema: int16 version,
/// then non-flexible types (int16-length strings, int32-length bytes and
/// arrays, -1 for null).
struct JavaBytes(BytesMut);

impl JavaBytes {
    fn new(version: i16) -> Self {
        let mut b = BytesMut::new();
        b.put_i16(version);
        Self(b)
    }
    fn i32(mut self, v: i32) -> Self {
        self.0.put_i32(v);
        self
    }
    fn str(mut self, s: &str) -> Self {
        self.0.put_i16(s.len() as i16);
        self.0.put_slice(s.as_bytes());
        self
    }
    fn null_str(mut self) -> Self {
        self.0.put_i16(-1);
        self
    }
    fn bytes(mut self, b: &[u8]) -> Self {
        self.0.put_i32(b.len() as i32);
        self.0.put_slice(b);
        self
    }
    fn null_bytes(mut self) -> Self {
        self.0.put_i32(-1);
        self
    }
    fn done(self) -> Vec<u8> {
        self.0.to_vec()
    }
}

fn sample_subscription() -> Subscription {
    Subscription {
        topics: vec!["orders".into(), "payments".into()],
        user_data: Some(Bytes::from_static(b"\x01\x02")),
        owned_partitions: vec![TopicPartitions {
            topic: "orders".into(),
            partitions: vec![0, 3],
        }],
        generation_id: 7,
        rack_id: Some("rack-a".into()),
    }
}

/// The sample's expected bytes at `version`, fields appended in schema order.
fn sample_subscription_java_bytes(version: i16) -> Vec<u8> {
    let mut b = JavaBytes::new(version)
        .i32(2)
        .str("orders")
        .str("payments")
        .bytes(b"\x01\x02");
    if version >= 1 {
        b = b.i32(1).str("orders").i32(2).i32(0).i32(3);
    }
    if version >= 2 {
        b = b.i32(7);
    }
    if version >= 3 {
        b = b.str("rack-a");
    }
    b.done()
}

/// What survives encoding at `version` (later fields are ignorable and dropped).
fn truncate_to_version(mut s: Subscription, version: i16) -> Subscription {
    if version < 1 {
        s.owned_partitions.clear();
    }
    if version < 2 {
        s.generation_id = NO_GENERATION;
    }
    if version < 3 {
        s.rack_id = None;
    }
    s
}

#[test]
fn subscription_matches_java_bytes_at_every_version() {
    for version in 0..=3 {
        let expected = sample_subscription_java_bytes(version);
        let encoded = sample_subscription().encode(version).unwrap();
        assert_eq!(encoded.as_ref(), expected.as_slice(), "encode v{version}");
        let (v, decoded) = Subscription::decode(&expected).unwrap();
        assert_eq!(v, version);
        assert_eq!(
            decoded,
            truncate_to_version(sample_subscription(), version),
            "decode v{version}"
        );
    }
}

#[test]
fn subscription_null_user_data_and_null_rack() {
    let bytes = JavaBytes::new(3)
        .i32(1)
        .str("t")
        .null_bytes()
        .i32(0)
        .i32(-1)
        .null_str()
        .done();
    let (_, s) = Subscription::decode(&bytes).unwrap();
    assert_eq!(s.user_data, None);
    assert_eq!(s.rack_id, None);
    assert_eq!(s.generation_id, -1);
    assert_eq!(
        Subscription::encode(&s, 3).unwrap().as_ref(),
        bytes.as_slice()
    );
}

#[test]
fn assignment_matches_java_bytes_at_every_version() {
    let a = Assignment {
        assigned_partitions: vec![
            TopicPartitions {
                topic: "a".into(),
                partitions: vec![1],
            },
            TopicPartitions {
                topic: "bb".into(),
                partitions: vec![0, 2],
            },
        ],
        user_data: None,
    };
    for version in 0..=3 {
        let expected = JavaBytes::new(version)
            .i32(2)
            .str("a")
            .i32(1)
            .i32(1)
            .str("bb")
            .i32(2)
            .i32(0)
            .i32(2)
            .null_bytes()
            .done();
        assert_eq!(a.encode(version).unwrap().as_ref(), expected.as_slice());
        assert_eq!(Assignment::decode(&expected).unwrap(), (version, a.clone()));
    }
}

#[test]
fn newer_versions_decode_with_the_v3_layout_and_ignore_appended_fields() {
    let mut bytes = sample_subscription_java_bytes(3);
    bytes[1] = 5; // version 5
    bytes.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    let (v, s) = Subscription::decode(&bytes).unwrap();
    assert_eq!(v, 5);
    assert_eq!(s, sample_subscription());
}

#[test]
fn unsupported_versions_are_typed_errors() {
    assert!(matches!(
        sample_subscription().encode(4),
        Err(GroupError::UnsupportedVersion { version: 4, .. })
    ));
    assert!(matches!(
        Assignment::default().encode(-1),
        Err(GroupError::UnsupportedVersion { version: -1, .. })
    ));
    let mut bytes = sample_subscription_java_bytes(0);
    bytes[0] = 0xff;
    bytes[1] = 0xff;
    assert!(matches!(
        Subscription::decode(&bytes),
        Err(GroupError::UnsupportedVersion { version: -1, .. })
    ));
}

#[test]
fn every_truncation_is_a_typed_error() {
    for version in 0..=3 {
        let full = sample_subscription_java_bytes(version);
        for len in 0..full.len() {
            let err = Subscription::decode(&full[..len]).unwrap_err();
            assert!(
                matches!(
                    err,
                    GroupError::Truncated { .. } | GroupError::InvalidCount { .. }
                ),
                "v{version} len {len}: {err}"
            );
        }
    }
}

#[test]
fn a_huge_count_is_rejected_before_allocating() {
    // Claims 2^31-1 topics in 4 bytes.
    let bytes = JavaBytes::new(0).i32(i32::MAX).done();
    assert!(matches!(
        Subscription::decode(&bytes),
        Err(GroupError::InvalidCount { field: "topics", count, .. }) if count == i64::from(i32::MAX)
    ));
    let bytes = JavaBytes::new(1).i32(1).str("t").i32(i32::MAX).done();
    assert!(matches!(
        Assignment::decode(&bytes),
        Err(GroupError::InvalidCount { .. })
    ));
    let bytes = JavaBytes::new(0).i32(-2).done();
    assert!(matches!(
        Subscription::decode(&bytes),
        Err(GroupError::InvalidCount { count: -2, .. })
    ));
}

#[test]
fn invalid_utf8_is_a_typed_error() {
    let mut bytes = JavaBytes::new(0).i32(1).str("ab").null_bytes().done();
    bytes[8] = 0xff;
    assert!(matches!(
        Subscription::decode(&bytes),
        Err(GroupError::InvalidUtf8 {
            field: "topics",
            offset: 8,
            ..
        })
    ));
}

#[test]
fn empty_assignment_bytes_are_an_empty_assignment() {
    assert_eq!(Assignment::decode(&[]).unwrap(), (0, Assignment::default()));
}

fn topic_name() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9._-]{1,12}"
}

fn topic_partitions() -> impl Strategy<Value = Vec<TopicPartitions>> {
    prop::collection::vec(
        (topic_name(), prop::collection::vec(any::<i32>(), 0..6))
            .prop_map(|(topic, partitions)| TopicPartitions { topic, partitions }),
        0..5,
    )
}

fn subscription() -> impl Strategy<Value = Subscription> {
    (
        prop::collection::vec(topic_name(), 0..6),
        prop::option::of(prop::collection::vec(any::<u8>(), 0..16)),
        topic_partitions(),
        any::<i32>(),
        prop::option::of("[a-z0-9-]{0,10}"),
    )
        .prop_map(
            |(topics, user_data, owned_partitions, generation_id, rack_id)| Subscription {
                topics,
                user_data: user_data.map(Bytes::from),
                owned_partitions,
                generation_id,
                rack_id,
            },
        )
}

fn to_kafka_protocol(s: &Subscription) -> ConsumerProtocolSubscription {
    ConsumerProtocolSubscription::default()
        .with_topics(
            s.topics
                .iter()
                .map(|t| StrBytes::from_string(t.clone()))
                .collect(),
        )
        .with_user_data(s.user_data.clone())
        .with_owned_partitions(
            s.owned_partitions
                .iter()
                .map(|tp| {
                    consumer_protocol_subscription::TopicPartition::default()
                        .with_topic(TopicName(StrBytes::from_string(tp.topic.clone())))
                        .with_partitions(tp.partitions.clone())
                })
                .collect(),
        )
        .with_generation_id(s.generation_id)
        .with_rack_id(s.rack_id.clone().map(StrBytes::from_string))
}

proptest! {
    #[test]
    fn subscription_round_trips_at_every_version(s in subscription(), version in 0i16..=3) {
        let bytes = s.encode(version).unwrap();
        let (v, decoded) = Subscription::decode(&bytes).unwrap();
        prop_assert_eq!(v, version);
        prop_assert_eq!(decoded, truncate_to_version(s, version));
    }

    #[test]
    fn assignment_round_trips_at_every_version(
        parts in topic_partitions(),
        user_data in prop::option::of(prop::collection::vec(any::<u8>(), 0..16)),
        version in 0i16..=3,
    ) {
        let a = Assignment { assigned_partitions: parts, user_data: user_data.map(Bytes::from) };
        let bytes = a.encode(version).unwrap();
        prop_assert_eq!(Assignment::decode(&bytes).unwrap(), (version, a));
    }

    /// Weir's bytes equal those of an independent implementation generated
    /// from the same schema, and each decodes the other's.
    #[test]
    fn subscription_agrees_with_kafka_protocol(s in subscription(), version in 0i16..=3) {
        let s = truncate_to_version(s, version);
        let ours = s.encode(version).unwrap();
        let mut theirs = BytesMut::new();
        theirs.put_i16(version);
        to_kafka_protocol(&s).encode(&mut theirs, version).unwrap();
        prop_assert_eq!(ours.as_ref(), theirs.as_ref());

        let mut buf = ours.clone();
        let v = buf.get_i16();
        let decoded = ConsumerProtocolSubscription::decode(&mut buf, v).unwrap();
        prop_assert_eq!(decoded, to_kafka_protocol(&s));
    }

    #[test]
    fn assignment_agrees_with_kafka_protocol(parts in topic_partitions(), version in 0i16..=3) {
        let a = Assignment { assigned_partitions: parts, user_data: None };
        let theirs = ConsumerProtocolAssignment::default().with_assigned_partitions(
            a.assigned_partitions.iter().map(|tp| {
                consumer_protocol_assignment::TopicPartition::default()
                    .with_topic(TopicName(StrBytes::from_string(tp.topic.clone())))
                    .with_partitions(tp.partitions.clone())
            }).collect(),
        );
        let mut bytes = BytesMut::new();
        bytes.put_i16(version);
        theirs.encode(&mut bytes, version).unwrap();
        prop_assert_eq!(Assignment::decode(&bytes).unwrap(), (version, a.clone()));
        let ours = a.encode(version).unwrap();
        prop_assert_eq!(ours.as_ref(), bytes.as_ref());
    }

    /// Arbitrary bytes never panic; they decode or give a typed error.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        let _ = Subscription::decode(&bytes);
        let _ = Assignment::decode(&bytes);
    }

    /// A corrupted valid encoding never panics either (reaches deeper fields
    /// than random bytes do).
    #[test]
    fn corrupted_encodings_never_panic(s in subscription(), at in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let mut bytes = s.encode(3).unwrap().to_vec();
        let i = at.index(bytes.len());
        bytes[i] = byte;
        let _ = Subscription::decode(&bytes);
    }
}
