//! The user data the streams assignor puts in the group protocol, for tools
//! that read a running application from the broker alone (`weir app`).
//!
//! An application's consumer group is its `application.id`; DescribeGroups
//! gives each member's subscription and assignment as the consumer protocol
//! encodes them, and their `user_data` is what [`decode_subscription`] and
//! [`decode_assignment`] read (this build's version or a later one).

pub use crate::runtime::assignor::{AssignmentInfo, PROTOCOL, SubscriptionInfo};

/// User data that is not the streams assignor's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not weir-streams {what} user data: {reason}")]
pub struct DecodeError {
    /// `subscription` or `assignment`.
    pub what: &'static str,
    /// What is wrong with the bytes.
    pub reason: String,
}

/// Decodes the user data of a member's consumer-protocol assignment: its
/// active, standby and warmup tasks and every member's `application.server`.
///
/// # Errors
/// [`DecodeError`] when the bytes are truncated or not of this format.
pub fn decode_assignment(user_data: &[u8]) -> Result<AssignmentInfo, DecodeError> {
    AssignmentInfo::decode(user_data).map_err(|reason| DecodeError {
        what: "assignment",
        reason,
    })
}

/// Decodes the user data of a member's consumer-protocol subscription: its
/// process id, thread count, `application.server` and task offset sums.
///
/// # Errors
/// [`DecodeError`] when the bytes are truncated or not of this format.
pub fn decode_subscription(user_data: &[u8]) -> Result<SubscriptionInfo, DecodeError> {
    SubscriptionInfo::decode(user_data).map_err(|reason| DecodeError {
        what: "subscription",
        reason,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::task::TaskId;

    #[test]
    fn the_public_decoders_read_what_the_assignor_writes() {
        let info = AssignmentInfo {
            version: 3,
            active: [TaskId::new(0, 1)].into(),
            standby: [TaskId::new(0, 2)].into(),
            warmup: [TaskId::new(1, 0)].into(),
            ..AssignmentInfo::default()
        };
        assert_eq!(decode_assignment(&info.encode()).unwrap(), info);
        let sub = SubscriptionInfo {
            version: 3,
            process_id: "p".into(),
            threads: 2,
            application_server: Some("h:1".into()),
            ..SubscriptionInfo::default()
        };
        assert_eq!(decode_subscription(&sub.encode()).unwrap(), sub);
        let e = decode_assignment(&[0]).unwrap_err();
        assert_eq!(e.what, "assignment");
        assert!(decode_subscription(&[]).is_err());
    }
}
