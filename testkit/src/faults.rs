//! Fault injection: intercepted requests, network partitions and the
//! request log.
//!
//! Every request passes through [`Faults::action_for`] before its handler
//! runs. An [`Intercept`] matches requests by API key, client id, broker or
//! connection and drops them, delays them, answers them with an error code
//! or closes the connection, for a given number of matches or until removed.
//! A [`NetworkPartition`] cuts one client off from a broker or from the
//! coordinator of one group or transactional id: its requests there are
//! never answered, as when packets are lost, until the partition is healed.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

use tokio::time::Instant;
use weir_protocol::ApiKey;
use weir_protocol::kafka_protocol::messages::RequestKind;

use crate::handlers::{RequestContext, RequestId};

/// Which requests a fault applies to. Every field that is set must match.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestMatcher {
    /// The API.
    pub api_key: Option<ApiKey>,
    /// The client id in the request header.
    pub client_id: Option<String>,
    /// The broker the request was sent to.
    pub broker: Option<i32>,
    /// The connection (see [`LoggedRequest::connection_id`]).
    pub connection: Option<u64>,
}

impl RequestMatcher {
    /// Matches every request.
    pub fn any() -> Self {
        Self::default()
    }

    /// Matches requests of one API.
    pub fn api(api_key: ApiKey) -> Self {
        Self {
            api_key: Some(api_key),
            ..Self::default()
        }
    }

    /// Also requires this client id.
    pub fn client(mut self, client_id: impl Into<String>) -> Self {
        self.client_id = Some(client_id.into());
        self
    }

    /// Also requires this broker.
    pub fn broker(mut self, broker: i32) -> Self {
        self.broker = Some(broker);
        self
    }

    /// Also requires this connection.
    pub fn connection(mut self, connection: u64) -> Self {
        self.connection = Some(connection);
        self
    }

    /// Whether a request matches.
    pub fn matches(&self, ctx: &RequestContext) -> bool {
        self.api_key.is_none_or(|k| k == ctx.api_key)
            && self
                .client_id
                .as_deref()
                .is_none_or(|c| ctx.client_id.as_deref() == Some(c))
            && self.broker.is_none_or(|b| b == ctx.broker_id)
            && self.connection.is_none_or(|c| c == ctx.connection_id)
    }
}

/// What an intercept does to a matched request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InterceptAction {
    /// Never answer it (the client times out).
    Drop,
    /// Handle it, but lose the response: the client times out and retries
    /// a request that did take effect (what idempotence must absorb).
    DropResponse,
    /// Handle it after this long (on tokio's clock).
    Delay(Duration),
    /// Answer with this Kafka error code in every error field of the
    /// response; the connection is closed for APIs with no error field.
    Error(i16),
    /// Close the connection without answering.
    CloseConnection,
}

/// A request interceptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Intercept {
    /// Which requests.
    pub matcher: RequestMatcher,
    /// What to do.
    pub action: InterceptAction,
    /// How many more requests to intercept; `None` until removed.
    pub remaining: Option<u32>,
}

impl Intercept {
    /// Intercepts every matching request until removed.
    pub fn new(matcher: RequestMatcher, action: InterceptAction) -> Self {
        Self {
            matcher,
            action,
            remaining: None,
        }
    }

    /// Intercepts only the next `count` matching requests.
    pub fn times(mut self, count: u32) -> Self {
        self.remaining = Some(count);
        self
    }
}

/// Which client a network partition cuts off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientSelector {
    /// Every connection whose requests carry this client id.
    ClientId(String),
    /// One connection.
    Connection(u64),
}

/// What the client is cut off from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PartitionTarget {
    /// Every request to this broker.
    Broker(i32),
    /// Requests to the coordinator of this consumer group (JoinGroup,
    /// SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch,
    /// TxnOffsetCommit, DescribeGroups).
    GroupCoordinator(String),
    /// Requests to the coordinator of this transactional id
    /// (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
    /// TxnOffsetCommit).
    TxnCoordinator(String),
}

/// A network partition between a client and a broker or coordinator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkPartition {
    /// The client.
    pub client: ClientSelector,
    /// What it can no longer reach.
    pub target: PartitionTarget,
}

/// The id of an installed intercept or partition, to remove it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FaultId(pub u64);

/// One request as it arrived.
#[derive(Debug, Clone, PartialEq)]
pub struct LoggedRequest {
    /// When it arrived (tokio's clock).
    pub at: Instant,
    /// The connection.
    pub connection_id: u64,
    /// The broker it was sent to.
    pub broker_id: i32,
    /// The header's client id.
    pub client_id: Option<String>,
    /// The API.
    pub api_key: ApiKey,
    /// The version.
    pub version: i16,
    /// The correlation id.
    pub correlation_id: i32,
    /// The decoded body.
    pub body: RequestKind,
}

/// What to do with one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultAction {
    /// Handle it normally.
    None,
    /// Never answer.
    Drop,
    /// Handle it but never answer.
    DropResponse,
    /// Handle it later.
    Delay(Duration),
    /// Answer with an error code.
    Error(i16),
    /// Close the connection.
    Close,
}

/// Default cap on the request log, so a long-running standalone broker
/// does not grow without bound; tests rarely send this many requests.
pub const DEFAULT_LOG_CAPACITY: usize = 10_000;

/// All installed faults and the request log.
#[derive(Debug)]
pub struct Faults {
    intercepts: Vec<(FaultId, Intercept)>,
    partitions: Vec<(FaultId, NetworkPartition)>,
    log: VecDeque<LoggedRequest>,
    log_capacity: usize,
    held: HashMap<RequestId, (RequestContext, RequestKind)>,
    lost_responses: HashSet<RequestId>,
    next_id: u64,
}

impl Default for Faults {
    fn default() -> Self {
        Self {
            intercepts: Vec::new(),
            partitions: Vec::new(),
            log: VecDeque::new(),
            log_capacity: DEFAULT_LOG_CAPACITY,
            held: HashMap::new(),
            lost_responses: HashSet::new(),
            next_id: 1,
        }
    }
}

impl Faults {
    fn next_id(&mut self) -> FaultId {
        let id = FaultId(self.next_id);
        self.next_id += 1;
        id
    }

    /// Installs an intercept; the first installed that matches wins.
    pub fn add_intercept(&mut self, intercept: Intercept) -> FaultId {
        let id = self.next_id();
        self.intercepts.push((id, intercept));
        id
    }

    /// Installs a network partition.
    pub fn add_partition(&mut self, partition: NetworkPartition) -> FaultId {
        let id = self.next_id();
        self.partitions.push((id, partition));
        id
    }

    /// Removes an intercept or heals a partition. Returns whether it existed.
    pub fn remove(&mut self, id: FaultId) -> bool {
        let before = self.intercepts.len() + self.partitions.len();
        self.intercepts.retain(|(i, _)| *i != id);
        self.partitions.retain(|(i, _)| *i != id);
        before != self.intercepts.len() + self.partitions.len()
    }

    /// Removes every intercept and heals every partition.
    pub fn clear(&mut self) {
        self.intercepts.clear();
        self.partitions.clear();
    }

    /// Sets how many requests the log keeps (oldest dropped first).
    pub fn set_log_capacity(&mut self, capacity: usize) {
        self.log_capacity = capacity;
        while self.log.len() > capacity {
            self.log.pop_front();
        }
    }

    /// The logged requests, oldest first.
    pub fn requests(&self) -> impl Iterator<Item = &LoggedRequest> {
        self.log.iter()
    }

    /// Empties the request log.
    pub fn clear_log(&mut self) {
        self.log.clear();
    }

    pub(crate) fn log_request(&mut self, ctx: &RequestContext, body: &RequestKind) {
        if self.log_capacity == 0 {
            return;
        }
        if self.log.len() >= self.log_capacity {
            self.log.pop_front();
        }
        self.log.push_back(LoggedRequest {
            at: ctx.now,
            connection_id: ctx.connection_id,
            broker_id: ctx.broker_id,
            client_id: ctx.client_id.clone(),
            api_key: ctx.api_key,
            version: ctx.version,
            correlation_id: ctx.correlation_id,
            body: body.clone(),
        });
    }

    /// Decides what happens to a request, consuming one use of a counted intercept.
    pub fn action_for(&mut self, ctx: &RequestContext, body: &RequestKind) -> FaultAction {
        if self.partitions.iter().any(|(_, p)| cuts_off(p, ctx, body)) {
            return FaultAction::Drop;
        }
        let Some(pos) = self
            .intercepts
            .iter()
            .position(|(_, i)| i.matcher.matches(ctx))
        else {
            return FaultAction::None;
        };
        let action = self.intercepts[pos].1.action;
        if let Some(remaining) = &mut self.intercepts[pos].1.remaining {
            *remaining = remaining.saturating_sub(1);
            if *remaining == 0 {
                self.intercepts.remove(pos);
            }
        }
        match action {
            InterceptAction::Drop => FaultAction::Drop,
            InterceptAction::DropResponse => FaultAction::DropResponse,
            InterceptAction::Delay(d) => FaultAction::Delay(d),
            InterceptAction::Error(code) => FaultAction::Error(code),
            InterceptAction::CloseConnection => FaultAction::Close,
        }
    }

    pub(crate) fn hold(&mut self, ctx: RequestContext, body: RequestKind) {
        self.held.insert(ctx.request_id, (ctx, body));
    }

    pub(crate) fn lose_response(&mut self, id: RequestId) {
        self.lost_responses.insert(id);
    }

    /// Whether the response to this request must be lost; forgets it.
    pub(crate) fn is_response_lost(&mut self, id: RequestId) -> bool {
        self.lost_responses.remove(&id)
    }

    pub(crate) fn release(&mut self, id: RequestId) -> Option<(RequestContext, RequestKind)> {
        self.held.remove(&id)
    }
}

fn cuts_off(p: &NetworkPartition, ctx: &RequestContext, body: &RequestKind) -> bool {
    let client = match &p.client {
        ClientSelector::ClientId(c) => ctx.client_id.as_deref() == Some(c.as_str()),
        ClientSelector::Connection(c) => *c == ctx.connection_id,
    };
    if !client {
        return false;
    }
    match &p.target {
        PartitionTarget::Broker(b) => *b == ctx.broker_id,
        PartitionTarget::GroupCoordinator(g) => group_of(body).is_some_and(|x| x == g.as_str()),
        PartitionTarget::TxnCoordinator(t) => txn_of(body).is_some_and(|x| x == t.as_str()),
    }
}

/// The consumer group a coordinator request is about.
pub fn group_of(body: &RequestKind) -> Option<&str> {
    Some(match body {
        RequestKind::JoinGroup(r) => r.group_id.as_str(),
        RequestKind::SyncGroup(r) => r.group_id.as_str(),
        RequestKind::Heartbeat(r) => r.group_id.as_str(),
        RequestKind::LeaveGroup(r) => r.group_id.as_str(),
        RequestKind::OffsetCommit(r) => r.group_id.as_str(),
        RequestKind::TxnOffsetCommit(r) => r.group_id.as_str(),
        RequestKind::OffsetFetch(r) => {
            if r.groups.is_empty() {
                r.group_id.as_str()
            } else {
                r.groups.first()?.group_id.as_str()
            }
        }
        RequestKind::DescribeGroups(r) => r.groups.first()?.as_str(),
        _ => return None,
    })
}

/// The transactional id a coordinator request is about.
pub fn txn_of(body: &RequestKind) -> Option<&str> {
    Some(match body {
        RequestKind::InitProducerId(r) => r.transactional_id.as_ref()?.as_str(),
        RequestKind::AddPartitionsToTxn(r) => {
            if r.transactions.is_empty() {
                r.v3_and_below_transactional_id.as_str()
            } else {
                r.transactions.first()?.transactional_id.as_str()
            }
        }
        RequestKind::AddOffsetsToTxn(r) => r.transactional_id.as_str(),
        RequestKind::EndTxn(r) => r.transactional_id.as_str(),
        RequestKind::TxnOffsetCommit(r) => r.transactional_id.as_str(),
        _ => return None,
    })
}
