//! Kafka's error codes as data: name, whether retrying may help, description.
//!
//! Retriability follows the Java client's exception hierarchy (a code is
//! retriable when its exception extends `RetriableException`), so that Weir
//! retries exactly what Kafka's own clients retry. Callers that need finer
//! rules (the idempotent producer, the group member) match on the code.

/// One Kafka error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KafkaCode {
    /// The numeric code on the wire.
    pub code: i16,
    /// Kafka's name for it, e.g. `NOT_LEADER_OR_FOLLOWER`.
    pub name: &'static str,
    /// Whether the same request may succeed if tried again.
    pub retriable: bool,
    /// What it means.
    pub description: &'static str,
}

impl KafkaCode {
    /// The entry for `code`; codes newer than this table get a
    /// non-retriable `UNKNOWN_CODE` entry that keeps the number.
    pub fn from_code(code: i16) -> KafkaCode {
        // The table is sorted by code from -1 upwards, without gaps.
        let index = usize::try_from(i32::from(code) + 1).ok();
        match index.and_then(|i| TABLE.get(i)) {
            Some(entry) if entry.code == code => *entry,
            _ => KafkaCode {
                code,
                name: "UNKNOWN_CODE",
                retriable: false,
                description: "An error code this client does not know.",
            },
        }
    }

    /// Whether this is code 0, no error.
    pub fn is_ok(&self) -> bool {
        self.code == 0
    }
}

impl std::fmt::Display for KafkaCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.name, self.code)
    }
}

/// The numeric codes by name, for matching.
#[allow(missing_docs)]
pub mod codes {
    /// `UNKNOWN_SERVER_ERROR` (-1).
    pub const UNKNOWN_SERVER_ERROR: i16 = -1;
    /// `NONE` (0).
    pub const NONE: i16 = 0;
    /// `OFFSET_OUT_OF_RANGE` (1).
    pub const OFFSET_OUT_OF_RANGE: i16 = 1;
    /// `CORRUPT_MESSAGE` (2).
    pub const CORRUPT_MESSAGE: i16 = 2;
    /// `UNKNOWN_TOPIC_OR_PARTITION` (3).
    pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
    /// `INVALID_FETCH_SIZE` (4).
    pub const INVALID_FETCH_SIZE: i16 = 4;
    /// `LEADER_NOT_AVAILABLE` (5).
    pub const LEADER_NOT_AVAILABLE: i16 = 5;
    /// `NOT_LEADER_OR_FOLLOWER` (6).
    pub const NOT_LEADER_OR_FOLLOWER: i16 = 6;
    /// `REQUEST_TIMED_OUT` (7).
    pub const REQUEST_TIMED_OUT: i16 = 7;
    /// `BROKER_NOT_AVAILABLE` (8).
    pub const BROKER_NOT_AVAILABLE: i16 = 8;
    /// `REPLICA_NOT_AVAILABLE` (9).
    pub const REPLICA_NOT_AVAILABLE: i16 = 9;
    /// `MESSAGE_TOO_LARGE` (10).
    pub const MESSAGE_TOO_LARGE: i16 = 10;
    /// `STALE_CONTROLLER_EPOCH` (11).
    pub const STALE_CONTROLLER_EPOCH: i16 = 11;
    /// `OFFSET_METADATA_TOO_LARGE` (12).
    pub const OFFSET_METADATA_TOO_LARGE: i16 = 12;
    /// `NETWORK_EXCEPTION` (13).
    pub const NETWORK_EXCEPTION: i16 = 13;
    /// `COORDINATOR_LOAD_IN_PROGRESS` (14).
    pub const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
    /// `COORDINATOR_NOT_AVAILABLE` (15).
    pub const COORDINATOR_NOT_AVAILABLE: i16 = 15;
    /// `NOT_COORDINATOR` (16).
    pub const NOT_COORDINATOR: i16 = 16;
    /// `INVALID_TOPIC_EXCEPTION` (17).
    pub const INVALID_TOPIC_EXCEPTION: i16 = 17;
    /// `RECORD_LIST_TOO_LARGE` (18).
    pub const RECORD_LIST_TOO_LARGE: i16 = 18;
    /// `NOT_ENOUGH_REPLICAS` (19).
    pub const NOT_ENOUGH_REPLICAS: i16 = 19;
    /// `NOT_ENOUGH_REPLICAS_AFTER_APPEND` (20).
    pub const NOT_ENOUGH_REPLICAS_AFTER_APPEND: i16 = 20;
    /// `INVALID_REQUIRED_ACKS` (21).
    pub const INVALID_REQUIRED_ACKS: i16 = 21;
    /// `ILLEGAL_GENERATION` (22).
    pub const ILLEGAL_GENERATION: i16 = 22;
    /// `INCONSISTENT_GROUP_PROTOCOL` (23).
    pub const INCONSISTENT_GROUP_PROTOCOL: i16 = 23;
    /// `INVALID_GROUP_ID` (24).
    pub const INVALID_GROUP_ID: i16 = 24;
    /// `UNKNOWN_MEMBER_ID` (25).
    pub const UNKNOWN_MEMBER_ID: i16 = 25;
    /// `INVALID_SESSION_TIMEOUT` (26).
    pub const INVALID_SESSION_TIMEOUT: i16 = 26;
    /// `REBALANCE_IN_PROGRESS` (27).
    pub const REBALANCE_IN_PROGRESS: i16 = 27;
    /// `INVALID_COMMIT_OFFSET_SIZE` (28).
    pub const INVALID_COMMIT_OFFSET_SIZE: i16 = 28;
    /// `TOPIC_AUTHORIZATION_FAILED` (29).
    pub const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
    /// `GROUP_AUTHORIZATION_FAILED` (30).
    pub const GROUP_AUTHORIZATION_FAILED: i16 = 30;
    /// `CLUSTER_AUTHORIZATION_FAILED` (31).
    pub const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;
    /// `INVALID_TIMESTAMP` (32).
    pub const INVALID_TIMESTAMP: i16 = 32;
    /// `UNSUPPORTED_SASL_MECHANISM` (33).
    pub const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
    /// `ILLEGAL_SASL_STATE` (34).
    pub const ILLEGAL_SASL_STATE: i16 = 34;
    /// `UNSUPPORTED_VERSION` (35).
    pub const UNSUPPORTED_VERSION: i16 = 35;
    /// `TOPIC_ALREADY_EXISTS` (36).
    pub const TOPIC_ALREADY_EXISTS: i16 = 36;
    /// `INVALID_PARTITIONS` (37).
    pub const INVALID_PARTITIONS: i16 = 37;
    /// `INVALID_REPLICATION_FACTOR` (38).
    pub const INVALID_REPLICATION_FACTOR: i16 = 38;
    /// `INVALID_REPLICA_ASSIGNMENT` (39).
    pub const INVALID_REPLICA_ASSIGNMENT: i16 = 39;
    /// `INVALID_CONFIG` (40).
    pub const INVALID_CONFIG: i16 = 40;
    /// `NOT_CONTROLLER` (41).
    pub const NOT_CONTROLLER: i16 = 41;
    /// `INVALID_REQUEST` (42).
    pub const INVALID_REQUEST: i16 = 42;
    /// `UNSUPPORTED_FOR_MESSAGE_FORMAT` (43).
    pub const UNSUPPORTED_FOR_MESSAGE_FORMAT: i16 = 43;
    /// `POLICY_VIOLATION` (44).
    pub const POLICY_VIOLATION: i16 = 44;
    /// `OUT_OF_ORDER_SEQUENCE_NUMBER` (45).
    pub const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
    /// `DUPLICATE_SEQUENCE_NUMBER` (46).
    pub const DUPLICATE_SEQUENCE_NUMBER: i16 = 46;
    /// `INVALID_PRODUCER_EPOCH` (47).
    pub const INVALID_PRODUCER_EPOCH: i16 = 47;
    /// `INVALID_TXN_STATE` (48).
    pub const INVALID_TXN_STATE: i16 = 48;
    /// `INVALID_PRODUCER_ID_MAPPING` (49).
    pub const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
    /// `INVALID_TRANSACTION_TIMEOUT` (50).
    pub const INVALID_TRANSACTION_TIMEOUT: i16 = 50;
    /// `CONCURRENT_TRANSACTIONS` (51).
    pub const CONCURRENT_TRANSACTIONS: i16 = 51;
    /// `TRANSACTION_COORDINATOR_FENCED` (52).
    pub const TRANSACTION_COORDINATOR_FENCED: i16 = 52;
    /// `TRANSACTIONAL_ID_AUTHORIZATION_FAILED` (53).
    pub const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 = 53;
    /// `SECURITY_DISABLED` (54).
    pub const SECURITY_DISABLED: i16 = 54;
    /// `OPERATION_NOT_ATTEMPTED` (55).
    pub const OPERATION_NOT_ATTEMPTED: i16 = 55;
    /// `KAFKA_STORAGE_ERROR` (56).
    pub const KAFKA_STORAGE_ERROR: i16 = 56;
    /// `LOG_DIR_NOT_FOUND` (57).
    pub const LOG_DIR_NOT_FOUND: i16 = 57;
    /// `SASL_AUTHENTICATION_FAILED` (58).
    pub const SASL_AUTHENTICATION_FAILED: i16 = 58;
    /// `UNKNOWN_PRODUCER_ID` (59).
    pub const UNKNOWN_PRODUCER_ID: i16 = 59;
    /// `REASSIGNMENT_IN_PROGRESS` (60).
    pub const REASSIGNMENT_IN_PROGRESS: i16 = 60;
    /// `DELEGATION_TOKEN_AUTH_DISABLED` (61).
    pub const DELEGATION_TOKEN_AUTH_DISABLED: i16 = 61;
    /// `DELEGATION_TOKEN_NOT_FOUND` (62).
    pub const DELEGATION_TOKEN_NOT_FOUND: i16 = 62;
    /// `DELEGATION_TOKEN_OWNER_MISMATCH` (63).
    pub const DELEGATION_TOKEN_OWNER_MISMATCH: i16 = 63;
    /// `DELEGATION_TOKEN_REQUEST_NOT_ALLOWED` (64).
    pub const DELEGATION_TOKEN_REQUEST_NOT_ALLOWED: i16 = 64;
    /// `DELEGATION_TOKEN_AUTHORIZATION_FAILED` (65).
    pub const DELEGATION_TOKEN_AUTHORIZATION_FAILED: i16 = 65;
    /// `DELEGATION_TOKEN_EXPIRED` (66).
    pub const DELEGATION_TOKEN_EXPIRED: i16 = 66;
    /// `INVALID_PRINCIPAL_TYPE` (67).
    pub const INVALID_PRINCIPAL_TYPE: i16 = 67;
    /// `NON_EMPTY_GROUP` (68).
    pub const NON_EMPTY_GROUP: i16 = 68;
    /// `GROUP_ID_NOT_FOUND` (69).
    pub const GROUP_ID_NOT_FOUND: i16 = 69;
    /// `FETCH_SESSION_ID_NOT_FOUND` (70).
    pub const FETCH_SESSION_ID_NOT_FOUND: i16 = 70;
    /// `INVALID_FETCH_SESSION_EPOCH` (71).
    pub const INVALID_FETCH_SESSION_EPOCH: i16 = 71;
    /// `LISTENER_NOT_FOUND` (72).
    pub const LISTENER_NOT_FOUND: i16 = 72;
    /// `TOPIC_DELETION_DISABLED` (73).
    pub const TOPIC_DELETION_DISABLED: i16 = 73;
    /// `FENCED_LEADER_EPOCH` (74).
    pub const FENCED_LEADER_EPOCH: i16 = 74;
    /// `UNKNOWN_LEADER_EPOCH` (75).
    pub const UNKNOWN_LEADER_EPOCH: i16 = 75;
    /// `UNSUPPORTED_COMPRESSION_TYPE` (76).
    pub const UNSUPPORTED_COMPRESSION_TYPE: i16 = 76;
    /// `STALE_BROKER_EPOCH` (77).
    pub const STALE_BROKER_EPOCH: i16 = 77;
    /// `OFFSET_NOT_AVAILABLE` (78).
    pub const OFFSET_NOT_AVAILABLE: i16 = 78;
    /// `MEMBER_ID_REQUIRED` (79).
    pub const MEMBER_ID_REQUIRED: i16 = 79;
    /// `PREFERRED_LEADER_NOT_AVAILABLE` (80).
    pub const PREFERRED_LEADER_NOT_AVAILABLE: i16 = 80;
    /// `GROUP_MAX_SIZE_REACHED` (81).
    pub const GROUP_MAX_SIZE_REACHED: i16 = 81;
    /// `FENCED_INSTANCE_ID` (82).
    pub const FENCED_INSTANCE_ID: i16 = 82;
    /// `ELIGIBLE_LEADERS_NOT_AVAILABLE` (83).
    pub const ELIGIBLE_LEADERS_NOT_AVAILABLE: i16 = 83;
    /// `ELECTION_NOT_NEEDED` (84).
    pub const ELECTION_NOT_NEEDED: i16 = 84;
    /// `NO_REASSIGNMENT_IN_PROGRESS` (85).
    pub const NO_REASSIGNMENT_IN_PROGRESS: i16 = 85;
    /// `GROUP_SUBSCRIBED_TO_TOPIC` (86).
    pub const GROUP_SUBSCRIBED_TO_TOPIC: i16 = 86;
    /// `INVALID_RECORD` (87).
    pub const INVALID_RECORD: i16 = 87;
    /// `UNSTABLE_OFFSET_COMMIT` (88).
    pub const UNSTABLE_OFFSET_COMMIT: i16 = 88;
    /// `THROTTLING_QUOTA_EXCEEDED` (89).
    pub const THROTTLING_QUOTA_EXCEEDED: i16 = 89;
    /// `PRODUCER_FENCED` (90).
    pub const PRODUCER_FENCED: i16 = 90;
    /// `RESOURCE_NOT_FOUND` (91).
    pub const RESOURCE_NOT_FOUND: i16 = 91;
    /// `DUPLICATE_RESOURCE` (92).
    pub const DUPLICATE_RESOURCE: i16 = 92;
    /// `UNACCEPTABLE_CREDENTIAL` (93).
    pub const UNACCEPTABLE_CREDENTIAL: i16 = 93;
    /// `INCONSISTENT_VOTER_SET` (94).
    pub const INCONSISTENT_VOTER_SET: i16 = 94;
    /// `INVALID_UPDATE_VERSION` (95).
    pub const INVALID_UPDATE_VERSION: i16 = 95;
    /// `FEATURE_UPDATE_FAILED` (96).
    pub const FEATURE_UPDATE_FAILED: i16 = 96;
    /// `PRINCIPAL_DESERIALIZATION_FAILURE` (97).
    pub const PRINCIPAL_DESERIALIZATION_FAILURE: i16 = 97;
    /// `SNAPSHOT_NOT_FOUND` (98).
    pub const SNAPSHOT_NOT_FOUND: i16 = 98;
    /// `POSITION_OUT_OF_RANGE` (99).
    pub const POSITION_OUT_OF_RANGE: i16 = 99;
    /// `UNKNOWN_TOPIC_ID` (100).
    pub const UNKNOWN_TOPIC_ID: i16 = 100;
    /// `DUPLICATE_BROKER_REGISTRATION` (101).
    pub const DUPLICATE_BROKER_REGISTRATION: i16 = 101;
    /// `BROKER_ID_NOT_REGISTERED` (102).
    pub const BROKER_ID_NOT_REGISTERED: i16 = 102;
    /// `INCONSISTENT_TOPIC_ID` (103).
    pub const INCONSISTENT_TOPIC_ID: i16 = 103;
    /// `INCONSISTENT_CLUSTER_ID` (104).
    pub const INCONSISTENT_CLUSTER_ID: i16 = 104;
    /// `TRANSACTIONAL_ID_NOT_FOUND` (105).
    pub const TRANSACTIONAL_ID_NOT_FOUND: i16 = 105;
    /// `FETCH_SESSION_TOPIC_ID_ERROR` (106).
    pub const FETCH_SESSION_TOPIC_ID_ERROR: i16 = 106;
    /// `INELIGIBLE_REPLICA` (107).
    pub const INELIGIBLE_REPLICA: i16 = 107;
    /// `NEW_LEADER_ELECTED` (108).
    pub const NEW_LEADER_ELECTED: i16 = 108;
    /// `OFFSET_MOVED_TO_TIERED_STORAGE` (109).
    pub const OFFSET_MOVED_TO_TIERED_STORAGE: i16 = 109;
    /// `FENCED_MEMBER_EPOCH` (110).
    pub const FENCED_MEMBER_EPOCH: i16 = 110;
    /// `UNRELEASED_INSTANCE_ID` (111).
    pub const UNRELEASED_INSTANCE_ID: i16 = 111;
    /// `UNSUPPORTED_ASSIGNOR` (112).
    pub const UNSUPPORTED_ASSIGNOR: i16 = 112;
    /// `STALE_MEMBER_EPOCH` (113).
    pub const STALE_MEMBER_EPOCH: i16 = 113;
    /// `MISMATCHED_ENDPOINT_TYPE` (114).
    pub const MISMATCHED_ENDPOINT_TYPE: i16 = 114;
    /// `UNSUPPORTED_ENDPOINT_TYPE` (115).
    pub const UNSUPPORTED_ENDPOINT_TYPE: i16 = 115;
    /// `UNKNOWN_CONTROLLER_ID` (116).
    pub const UNKNOWN_CONTROLLER_ID: i16 = 116;
    /// `UNKNOWN_SUBSCRIPTION_ID` (117).
    pub const UNKNOWN_SUBSCRIPTION_ID: i16 = 117;
    /// `TELEMETRY_TOO_LARGE` (118).
    pub const TELEMETRY_TOO_LARGE: i16 = 118;
    /// `INVALID_REGISTRATION` (119).
    pub const INVALID_REGISTRATION: i16 = 119;
    /// `TRANSACTION_ABORTABLE` (120).
    pub const TRANSACTION_ABORTABLE: i16 = 120;
    /// `INVALID_RECORD_STATE` (121).
    pub const INVALID_RECORD_STATE: i16 = 121;
    /// `SHARE_SESSION_NOT_FOUND` (122).
    pub const SHARE_SESSION_NOT_FOUND: i16 = 122;
    /// `INVALID_SHARE_SESSION_EPOCH` (123).
    pub const INVALID_SHARE_SESSION_EPOCH: i16 = 123;
    /// `FENCED_STATE_EPOCH` (124).
    pub const FENCED_STATE_EPOCH: i16 = 124;
    /// `INVALID_VOTER_KEY` (125).
    pub const INVALID_VOTER_KEY: i16 = 125;
    /// `DUPLICATE_VOTER` (126).
    pub const DUPLICATE_VOTER: i16 = 126;
    /// `VOTER_NOT_FOUND` (127).
    pub const VOTER_NOT_FOUND: i16 = 127;
    /// `INVALID_REGULAR_EXPRESSION` (128).
    pub const INVALID_REGULAR_EXPRESSION: i16 = 128;
    /// `REBOOTSTRAP_REQUIRED` (129).
    pub const REBOOTSTRAP_REQUIRED: i16 = 129;
}

/// Every known code, sorted by code.
pub static TABLE: &[KafkaCode] = &[
    KafkaCode {
        code: -1,
        name: "UNKNOWN_SERVER_ERROR",
        retriable: false,
        description: "The server experienced an unexpected error when processing the request.",
    },
    KafkaCode {
        code: 0,
        name: "NONE",
        retriable: false,
        description: "No error.",
    },
    KafkaCode {
        code: 1,
        name: "OFFSET_OUT_OF_RANGE",
        retriable: false,
        description: "The requested offset is not within the range of offsets maintained by the server.",
    },
    KafkaCode {
        code: 2,
        name: "CORRUPT_MESSAGE",
        retriable: true,
        description: "The message failed its CRC checksum, exceeds the valid size, has a null key for a compacted topic, or is otherwise corrupt.",
    },
    KafkaCode {
        code: 3,
        name: "UNKNOWN_TOPIC_OR_PARTITION",
        retriable: true,
        description: "This server does not host this topic-partition.",
    },
    KafkaCode {
        code: 4,
        name: "INVALID_FETCH_SIZE",
        retriable: false,
        description: "The requested fetch size is invalid.",
    },
    KafkaCode {
        code: 5,
        name: "LEADER_NOT_AVAILABLE",
        retriable: true,
        description: "There is no leader for this topic-partition as we are in the middle of a leadership election.",
    },
    KafkaCode {
        code: 6,
        name: "NOT_LEADER_OR_FOLLOWER",
        retriable: true,
        description: "This server is not the leader or a follower for that topic-partition.",
    },
    KafkaCode {
        code: 7,
        name: "REQUEST_TIMED_OUT",
        retriable: true,
        description: "The request timed out.",
    },
    KafkaCode {
        code: 8,
        name: "BROKER_NOT_AVAILABLE",
        retriable: false,
        description: "The broker is not available.",
    },
    KafkaCode {
        code: 9,
        name: "REPLICA_NOT_AVAILABLE",
        retriable: true,
        description: "The replica is not available for the requested topic-partition.",
    },
    KafkaCode {
        code: 10,
        name: "MESSAGE_TOO_LARGE",
        retriable: false,
        description: "The request included a message larger than the max message size the server will accept.",
    },
    KafkaCode {
        code: 11,
        name: "STALE_CONTROLLER_EPOCH",
        retriable: false,
        description: "The controller moved to another broker.",
    },
    KafkaCode {
        code: 12,
        name: "OFFSET_METADATA_TOO_LARGE",
        retriable: false,
        description: "The metadata field of the offset request was too large.",
    },
    KafkaCode {
        code: 13,
        name: "NETWORK_EXCEPTION",
        retriable: true,
        description: "The server disconnected before a response was received.",
    },
    KafkaCode {
        code: 14,
        name: "COORDINATOR_LOAD_IN_PROGRESS",
        retriable: true,
        description: "The coordinator is loading and hence can't process requests.",
    },
    KafkaCode {
        code: 15,
        name: "COORDINATOR_NOT_AVAILABLE",
        retriable: true,
        description: "The coordinator is not available.",
    },
    KafkaCode {
        code: 16,
        name: "NOT_COORDINATOR",
        retriable: true,
        description: "This is not the correct coordinator.",
    },
    KafkaCode {
        code: 17,
        name: "INVALID_TOPIC_EXCEPTION",
        retriable: false,
        description: "The request attempted to perform an operation on an invalid topic.",
    },
    KafkaCode {
        code: 18,
        name: "RECORD_LIST_TOO_LARGE",
        retriable: false,
        description: "The request included a message batch larger than the configured segment size on the server.",
    },
    KafkaCode {
        code: 19,
        name: "NOT_ENOUGH_REPLICAS",
        retriable: true,
        description: "Messages are rejected since there are fewer in-sync replicas than required.",
    },
    KafkaCode {
        code: 20,
        name: "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
        retriable: true,
        description: "Messages are written to the log, but to fewer in-sync replicas than required.",
    },
    KafkaCode {
        code: 21,
        name: "INVALID_REQUIRED_ACKS",
        retriable: false,
        description: "Produce request specified an invalid value for required acks.",
    },
    KafkaCode {
        code: 22,
        name: "ILLEGAL_GENERATION",
        retriable: false,
        description: "Specified group generation id is not valid.",
    },
    KafkaCode {
        code: 23,
        name: "INCONSISTENT_GROUP_PROTOCOL",
        retriable: false,
        description: "The group member's supported protocols are incompatible with those of existing members.",
    },
    KafkaCode {
        code: 24,
        name: "INVALID_GROUP_ID",
        retriable: false,
        description: "The configured groupId is invalid.",
    },
    KafkaCode {
        code: 25,
        name: "UNKNOWN_MEMBER_ID",
        retriable: false,
        description: "The coordinator is not aware of this member.",
    },
    KafkaCode {
        code: 26,
        name: "INVALID_SESSION_TIMEOUT",
        retriable: false,
        description: "The session timeout is not within the range allowed by the broker.",
    },
    KafkaCode {
        code: 27,
        name: "REBALANCE_IN_PROGRESS",
        retriable: false,
        description: "The group is rebalancing, so a rejoin is needed.",
    },
    KafkaCode {
        code: 28,
        name: "INVALID_COMMIT_OFFSET_SIZE",
        retriable: false,
        description: "The committing offset data size is not valid.",
    },
    KafkaCode {
        code: 29,
        name: "TOPIC_AUTHORIZATION_FAILED",
        retriable: false,
        description: "Topic authorization failed.",
    },
    KafkaCode {
        code: 30,
        name: "GROUP_AUTHORIZATION_FAILED",
        retriable: false,
        description: "Group authorization failed.",
    },
    KafkaCode {
        code: 31,
        name: "CLUSTER_AUTHORIZATION_FAILED",
        retriable: false,
        description: "Cluster authorization failed.",
    },
    KafkaCode {
        code: 32,
        name: "INVALID_TIMESTAMP",
        retriable: false,
        description: "The timestamp of the message is out of acceptable range.",
    },
    KafkaCode {
        code: 33,
        name: "UNSUPPORTED_SASL_MECHANISM",
        retriable: false,
        description: "The broker does not support the requested SASL mechanism.",
    },
    KafkaCode {
        code: 34,
        name: "ILLEGAL_SASL_STATE",
        retriable: false,
        description: "Request is not valid given the current SASL state.",
    },
    KafkaCode {
        code: 35,
        name: "UNSUPPORTED_VERSION",
        retriable: false,
        description: "The version of API is not supported.",
    },
    KafkaCode {
        code: 36,
        name: "TOPIC_ALREADY_EXISTS",
        retriable: false,
        description: "Topic with this name already exists.",
    },
    KafkaCode {
        code: 37,
        name: "INVALID_PARTITIONS",
        retriable: false,
        description: "Number of partitions is below 1.",
    },
    KafkaCode {
        code: 38,
        name: "INVALID_REPLICATION_FACTOR",
        retriable: false,
        description: "Replication factor is below 1 or larger than the number of available brokers.",
    },
    KafkaCode {
        code: 39,
        name: "INVALID_REPLICA_ASSIGNMENT",
        retriable: false,
        description: "Replica assignment is invalid.",
    },
    KafkaCode {
        code: 40,
        name: "INVALID_CONFIG",
        retriable: false,
        description: "Configuration is invalid.",
    },
    KafkaCode {
        code: 41,
        name: "NOT_CONTROLLER",
        retriable: true,
        description: "This is not the correct controller for this cluster.",
    },
    KafkaCode {
        code: 42,
        name: "INVALID_REQUEST",
        retriable: false,
        description: "This most likely occurs because of a request being malformed by the client library or the message was sent to an incompatible broker.",
    },
    KafkaCode {
        code: 43,
        name: "UNSUPPORTED_FOR_MESSAGE_FORMAT",
        retriable: false,
        description: "The message format version on the broker does not support the request.",
    },
    KafkaCode {
        code: 44,
        name: "POLICY_VIOLATION",
        retriable: false,
        description: "Request parameters do not satisfy the configured policy.",
    },
    KafkaCode {
        code: 45,
        name: "OUT_OF_ORDER_SEQUENCE_NUMBER",
        retriable: false,
        description: "The broker received an out of order sequence number.",
    },
    KafkaCode {
        code: 46,
        name: "DUPLICATE_SEQUENCE_NUMBER",
        retriable: false,
        description: "The broker received a duplicate sequence number.",
    },
    KafkaCode {
        code: 47,
        name: "INVALID_PRODUCER_EPOCH",
        retriable: false,
        description: "Producer attempted to produce with an old epoch.",
    },
    KafkaCode {
        code: 48,
        name: "INVALID_TXN_STATE",
        retriable: false,
        description: "The producer attempted a transactional operation in an invalid state.",
    },
    KafkaCode {
        code: 49,
        name: "INVALID_PRODUCER_ID_MAPPING",
        retriable: false,
        description: "The producer attempted to use a producer id which is not currently assigned to its transactional id.",
    },
    KafkaCode {
        code: 50,
        name: "INVALID_TRANSACTION_TIMEOUT",
        retriable: false,
        description: "The transaction timeout is larger than the maximum value allowed by the broker.",
    },
    KafkaCode {
        code: 51,
        name: "CONCURRENT_TRANSACTIONS",
        retriable: false,
        description: "The producer attempted to update a transaction while another concurrent operation on the same transaction was ongoing.",
    },
    KafkaCode {
        code: 52,
        name: "TRANSACTION_COORDINATOR_FENCED",
        retriable: false,
        description: "Indicates that the transaction coordinator sending a WriteTxnMarker is no longer the current coordinator for a given producer.",
    },
    KafkaCode {
        code: 53,
        name: "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
        retriable: false,
        description: "Transactional Id authorization failed.",
    },
    KafkaCode {
        code: 54,
        name: "SECURITY_DISABLED",
        retriable: false,
        description: "Security features are disabled.",
    },
    KafkaCode {
        code: 55,
        name: "OPERATION_NOT_ATTEMPTED",
        retriable: false,
        description: "The broker did not attempt to execute this operation.",
    },
    KafkaCode {
        code: 56,
        name: "KAFKA_STORAGE_ERROR",
        retriable: true,
        description: "Disk error when trying to access log file on the disk.",
    },
    KafkaCode {
        code: 57,
        name: "LOG_DIR_NOT_FOUND",
        retriable: false,
        description: "The user-specified log directory is not found in the broker config.",
    },
    KafkaCode {
        code: 58,
        name: "SASL_AUTHENTICATION_FAILED",
        retriable: false,
        description: "SASL Authentication failed.",
    },
    KafkaCode {
        code: 59,
        name: "UNKNOWN_PRODUCER_ID",
        retriable: false,
        description: "The broker could not locate the producer metadata associated with the producer id.",
    },
    KafkaCode {
        code: 60,
        name: "REASSIGNMENT_IN_PROGRESS",
        retriable: false,
        description: "A partition reassignment is in progress.",
    },
    KafkaCode {
        code: 61,
        name: "DELEGATION_TOKEN_AUTH_DISABLED",
        retriable: false,
        description: "Delegation Token feature is not enabled.",
    },
    KafkaCode {
        code: 62,
        name: "DELEGATION_TOKEN_NOT_FOUND",
        retriable: false,
        description: "Delegation Token is not found on server.",
    },
    KafkaCode {
        code: 63,
        name: "DELEGATION_TOKEN_OWNER_MISMATCH",
        retriable: false,
        description: "Specified Principal is not valid Owner/Renewer.",
    },
    KafkaCode {
        code: 64,
        name: "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED",
        retriable: false,
        description: "Delegation Token requests are not allowed on PLAINTEXT/1-way SSL channels and on delegation token authenticated channels.",
    },
    KafkaCode {
        code: 65,
        name: "DELEGATION_TOKEN_AUTHORIZATION_FAILED",
        retriable: false,
        description: "Delegation Token authorization failed.",
    },
    KafkaCode {
        code: 66,
        name: "DELEGATION_TOKEN_EXPIRED",
        retriable: false,
        description: "Delegation Token is expired.",
    },
    KafkaCode {
        code: 67,
        name: "INVALID_PRINCIPAL_TYPE",
        retriable: false,
        description: "Supplied principalType is not supported.",
    },
    KafkaCode {
        code: 68,
        name: "NON_EMPTY_GROUP",
        retriable: false,
        description: "The group is not empty.",
    },
    KafkaCode {
        code: 69,
        name: "GROUP_ID_NOT_FOUND",
        retriable: false,
        description: "The group id does not exist.",
    },
    KafkaCode {
        code: 70,
        name: "FETCH_SESSION_ID_NOT_FOUND",
        retriable: true,
        description: "The fetch session ID was not found.",
    },
    KafkaCode {
        code: 71,
        name: "INVALID_FETCH_SESSION_EPOCH",
        retriable: true,
        description: "The fetch session epoch is invalid.",
    },
    KafkaCode {
        code: 72,
        name: "LISTENER_NOT_FOUND",
        retriable: true,
        description: "There is no listener on the leader broker that matches the listener on which metadata request was processed.",
    },
    KafkaCode {
        code: 73,
        name: "TOPIC_DELETION_DISABLED",
        retriable: false,
        description: "Topic deletion is disabled.",
    },
    KafkaCode {
        code: 74,
        name: "FENCED_LEADER_EPOCH",
        retriable: true,
        description: "The leader epoch in the request is older than the epoch on the broker.",
    },
    KafkaCode {
        code: 75,
        name: "UNKNOWN_LEADER_EPOCH",
        retriable: true,
        description: "The leader epoch in the request is newer than the epoch on the broker.",
    },
    KafkaCode {
        code: 76,
        name: "UNSUPPORTED_COMPRESSION_TYPE",
        retriable: false,
        description: "The requesting client does not support the compression type of given partition.",
    },
    KafkaCode {
        code: 77,
        name: "STALE_BROKER_EPOCH",
        retriable: false,
        description: "Broker epoch has changed.",
    },
    KafkaCode {
        code: 78,
        name: "OFFSET_NOT_AVAILABLE",
        retriable: true,
        description: "The leader high watermark has not caught up from a recent leader election so the offsets cannot be guaranteed to be monotonically increasing.",
    },
    KafkaCode {
        code: 79,
        name: "MEMBER_ID_REQUIRED",
        retriable: false,
        description: "The group member needs to have a valid member id before actually entering a consumer group.",
    },
    KafkaCode {
        code: 80,
        name: "PREFERRED_LEADER_NOT_AVAILABLE",
        retriable: true,
        description: "The preferred leader was not available.",
    },
    KafkaCode {
        code: 81,
        name: "GROUP_MAX_SIZE_REACHED",
        retriable: false,
        description: "The consumer group has reached its max size.",
    },
    KafkaCode {
        code: 82,
        name: "FENCED_INSTANCE_ID",
        retriable: false,
        description: "The broker rejected this static consumer since another consumer with the same group.instance.id has registered with a different member.id.",
    },
    KafkaCode {
        code: 83,
        name: "ELIGIBLE_LEADERS_NOT_AVAILABLE",
        retriable: true,
        description: "Eligible topic partition leaders are not available.",
    },
    KafkaCode {
        code: 84,
        name: "ELECTION_NOT_NEEDED",
        retriable: true,
        description: "Leader election not needed for topic partition.",
    },
    KafkaCode {
        code: 85,
        name: "NO_REASSIGNMENT_IN_PROGRESS",
        retriable: false,
        description: "No partition reassignment is in progress.",
    },
    KafkaCode {
        code: 86,
        name: "GROUP_SUBSCRIBED_TO_TOPIC",
        retriable: false,
        description: "Deleting offsets of a topic is forbidden while the consumer group is actively subscribed to it.",
    },
    KafkaCode {
        code: 87,
        name: "INVALID_RECORD",
        retriable: false,
        description: "This record has failed the validation on broker and hence will be rejected.",
    },
    KafkaCode {
        code: 88,
        name: "UNSTABLE_OFFSET_COMMIT",
        retriable: true,
        description: "There are unstable offsets that need to be cleared.",
    },
    KafkaCode {
        code: 89,
        name: "THROTTLING_QUOTA_EXCEEDED",
        retriable: true,
        description: "The throttling quota has been exceeded.",
    },
    KafkaCode {
        code: 90,
        name: "PRODUCER_FENCED",
        retriable: false,
        description: "There is a newer producer with the same transactionalId which fences the current one.",
    },
    KafkaCode {
        code: 91,
        name: "RESOURCE_NOT_FOUND",
        retriable: false,
        description: "A request illegally referred to a resource that does not exist.",
    },
    KafkaCode {
        code: 92,
        name: "DUPLICATE_RESOURCE",
        retriable: false,
        description: "A request illegally referred to the same resource twice.",
    },
    KafkaCode {
        code: 93,
        name: "UNACCEPTABLE_CREDENTIAL",
        retriable: false,
        description: "Requested credential would not meet criteria for acceptability.",
    },
    KafkaCode {
        code: 94,
        name: "INCONSISTENT_VOTER_SET",
        retriable: false,
        description: "Either the sender or recipient of a voter-only request is not one of the expected voters.",
    },
    KafkaCode {
        code: 95,
        name: "INVALID_UPDATE_VERSION",
        retriable: false,
        description: "The given update version was invalid.",
    },
    KafkaCode {
        code: 96,
        name: "FEATURE_UPDATE_FAILED",
        retriable: false,
        description: "Unable to update finalized features due to an unexpected server error.",
    },
    KafkaCode {
        code: 97,
        name: "PRINCIPAL_DESERIALIZATION_FAILURE",
        retriable: false,
        description: "Request principal deserialization failed during forwarding.",
    },
    KafkaCode {
        code: 98,
        name: "SNAPSHOT_NOT_FOUND",
        retriable: false,
        description: "Requested snapshot was not found.",
    },
    KafkaCode {
        code: 99,
        name: "POSITION_OUT_OF_RANGE",
        retriable: false,
        description: "Requested position is not greater than or equal to zero, and less than the size of the snapshot.",
    },
    KafkaCode {
        code: 100,
        name: "UNKNOWN_TOPIC_ID",
        retriable: true,
        description: "This server does not host this topic ID.",
    },
    KafkaCode {
        code: 101,
        name: "DUPLICATE_BROKER_REGISTRATION",
        retriable: false,
        description: "This broker ID is already in use.",
    },
    KafkaCode {
        code: 102,
        name: "BROKER_ID_NOT_REGISTERED",
        retriable: false,
        description: "The given broker ID was not registered.",
    },
    KafkaCode {
        code: 103,
        name: "INCONSISTENT_TOPIC_ID",
        retriable: true,
        description: "The log's topic ID did not match the topic ID in the request.",
    },
    KafkaCode {
        code: 104,
        name: "INCONSISTENT_CLUSTER_ID",
        retriable: false,
        description: "The clusterId in the request does not match that found on the server.",
    },
    KafkaCode {
        code: 105,
        name: "TRANSACTIONAL_ID_NOT_FOUND",
        retriable: false,
        description: "The transactionalId could not be found.",
    },
    KafkaCode {
        code: 106,
        name: "FETCH_SESSION_TOPIC_ID_ERROR",
        retriable: true,
        description: "The fetch session encountered inconsistent topic ID usage.",
    },
    KafkaCode {
        code: 107,
        name: "INELIGIBLE_REPLICA",
        retriable: false,
        description: "The new ISR contains at least one ineligible replica.",
    },
    KafkaCode {
        code: 108,
        name: "NEW_LEADER_ELECTED",
        retriable: false,
        description: "The AlterPartition request successfully updated the partition state but the leader has changed.",
    },
    KafkaCode {
        code: 109,
        name: "OFFSET_MOVED_TO_TIERED_STORAGE",
        retriable: false,
        description: "The requested offset is moved to tiered storage.",
    },
    KafkaCode {
        code: 110,
        name: "FENCED_MEMBER_EPOCH",
        retriable: false,
        description: "The member epoch is fenced by the group coordinator.",
    },
    KafkaCode {
        code: 111,
        name: "UNRELEASED_INSTANCE_ID",
        retriable: false,
        description: "The instance ID is still used by another member in the consumer group.",
    },
    KafkaCode {
        code: 112,
        name: "UNSUPPORTED_ASSIGNOR",
        retriable: false,
        description: "The assignor or its version range is not supported by the consumer group.",
    },
    KafkaCode {
        code: 113,
        name: "STALE_MEMBER_EPOCH",
        retriable: false,
        description: "The member epoch is stale.",
    },
    KafkaCode {
        code: 114,
        name: "MISMATCHED_ENDPOINT_TYPE",
        retriable: false,
        description: "The request was sent to an endpoint of the wrong type.",
    },
    KafkaCode {
        code: 115,
        name: "UNSUPPORTED_ENDPOINT_TYPE",
        retriable: false,
        description: "This endpoint type is not supported yet.",
    },
    KafkaCode {
        code: 116,
        name: "UNKNOWN_CONTROLLER_ID",
        retriable: false,
        description: "This controller ID is not known.",
    },
    KafkaCode {
        code: 117,
        name: "UNKNOWN_SUBSCRIPTION_ID",
        retriable: false,
        description: "Client sent a push telemetry request with an invalid or outdated subscription ID.",
    },
    KafkaCode {
        code: 118,
        name: "TELEMETRY_TOO_LARGE",
        retriable: false,
        description: "Client sent a push telemetry request larger than the maximum size the broker will accept.",
    },
    KafkaCode {
        code: 119,
        name: "INVALID_REGISTRATION",
        retriable: false,
        description: "The controller has considered the broker registration to be invalid.",
    },
    KafkaCode {
        code: 120,
        name: "TRANSACTION_ABORTABLE",
        retriable: false,
        description: "The server encountered an error with the transaction; the client can abort the transaction to continue.",
    },
    KafkaCode {
        code: 121,
        name: "INVALID_RECORD_STATE",
        retriable: false,
        description: "The record state is invalid.",
    },
    KafkaCode {
        code: 122,
        name: "SHARE_SESSION_NOT_FOUND",
        retriable: true,
        description: "The share session was not found.",
    },
    KafkaCode {
        code: 123,
        name: "INVALID_SHARE_SESSION_EPOCH",
        retriable: true,
        description: "The share session epoch is invalid.",
    },
    KafkaCode {
        code: 124,
        name: "FENCED_STATE_EPOCH",
        retriable: false,
        description: "The share coordinator rejected the request because the share-group state epoch did not match.",
    },
    KafkaCode {
        code: 125,
        name: "INVALID_VOTER_KEY",
        retriable: false,
        description: "The voter key doesn't match the receiving replica's key.",
    },
    KafkaCode {
        code: 126,
        name: "DUPLICATE_VOTER",
        retriable: false,
        description: "The voter is already part of the set of voters.",
    },
    KafkaCode {
        code: 127,
        name: "VOTER_NOT_FOUND",
        retriable: false,
        description: "The voter is not part of the set of voters.",
    },
    KafkaCode {
        code: 128,
        name: "INVALID_REGULAR_EXPRESSION",
        retriable: false,
        description: "The regular expression is not valid.",
    },
    KafkaCode {
        code: 129,
        name: "REBOOTSTRAP_REQUIRED",
        retriable: false,
        description: "Client metadata is stale; the client should rebootstrap to obtain new metadata.",
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_dense_and_sorted_so_lookup_by_index_is_exact() {
        for (i, entry) in TABLE.iter().enumerate() {
            assert_eq!(i32::from(entry.code), i as i32 - 1, "{}", entry.name);
            assert_eq!(KafkaCode::from_code(entry.code), *entry);
        }
    }

    #[test]
    fn retriability_matches_the_java_client() {
        for (code, retriable) in [
            (codes::NOT_LEADER_OR_FOLLOWER, true),
            (codes::LEADER_NOT_AVAILABLE, true),
            (codes::UNKNOWN_TOPIC_OR_PARTITION, true),
            (codes::REQUEST_TIMED_OUT, true),
            (codes::OUT_OF_ORDER_SEQUENCE_NUMBER, false),
            (codes::TOPIC_ALREADY_EXISTS, false),
            (codes::COORDINATOR_LOAD_IN_PROGRESS, true),
        ] {
            assert_eq!(
                KafkaCode::from_code(code).retriable,
                retriable,
                "code {code}"
            );
        }
    }

    #[test]
    fn unknown_codes_keep_their_number() {
        let c = KafkaCode::from_code(30_000);
        assert_eq!(
            (c.code, c.name, c.retriable),
            (30_000, "UNKNOWN_CODE", false)
        );
        assert_eq!(KafkaCode::from_code(-7).name, "UNKNOWN_CODE");
        assert_eq!(
            KafkaCode::from_code(6).to_string(),
            "NOT_LEADER_OR_FOLLOWER (6)"
        );
    }
}
