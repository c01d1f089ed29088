//! The operation state machine (docs/architecture.md): one transition function, no catch-all arm,
//! so a new state or event breaks the build until every pair is decided. The database mirrors the
//! states with a CHECK constraint. The ledger writes every state change as a [`Move`] taken from
//! this table, and the event log may hold only [`legal_log_entry`] rows.

use serde::{Deserialize, Serialize};

/// Where an operation stands. Each variant says who moves a row out of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Created; no valid approval for these exact details. Out: api (approve, cancel); nothing
    /// expires it (an approval link expires, the row waits).
    AwaitingApproval,
    /// Approved and enqueued. Out: worker (claim), api (cancel).
    Ready,
    /// A worker holds the lease; a request may be in flight once `first_submitted_at` is set.
    /// Out: worker (record), reconciler (expired lease).
    Executing,
    /// The processor confirmed; result stored. Terminal (a contradicting report goes to needs_attention).
    Succeeded,
    /// A definitive unsuccessful outcome from the processor. Terminal (contradictions: needs_attention).
    Failed,
    /// Validation or authorization failed before any external request. Terminal.
    Rejected,
    /// The request may have reached the processor; no reliable result. Out: reconciler only.
    Unknown,
    /// Automatic progress would risk a duplicate. Out: on-call (resolve).
    NeedsAttention,
    /// Withdrawn before execution. Terminal.
    Cancelled,
}

/// Every status, in lifecycle order (for metrics, listings and exhaustive tests).
pub const ALL_STATUSES: [Status; 9] = [
    Status::AwaitingApproval,
    Status::Ready,
    Status::Executing,
    Status::Succeeded,
    Status::Failed,
    Status::Rejected,
    Status::Unknown,
    Status::NeedsAttention,
    Status::Cancelled,
];

impl Status {
    /// Stable text form, as stored and as served.
    pub fn as_str(&self) -> &'static str {
        match self {
            Status::AwaitingApproval => "awaiting_approval",
            Status::Ready => "ready",
            Status::Executing => "executing",
            Status::Succeeded => "succeeded",
            Status::Failed => "failed",
            Status::Rejected => "rejected",
            Status::Unknown => "unknown",
            Status::NeedsAttention => "needs_attention",
            Status::Cancelled => "cancelled",
        }
    }

    /// Parses the stored form.
    pub fn parse(raw: &str) -> Option<Status> {
        ALL_STATUSES.into_iter().find(|s| s.as_str() == raw)
    }

    /// Whether nothing automatic ever moves the row again.
    pub fn is_terminal(&self) -> bool {
        match self {
            Status::Succeeded | Status::Failed | Status::Rejected | Status::Cancelled => true,
            Status::AwaitingApproval
            | Status::Ready
            | Status::Executing
            | Status::Unknown
            | Status::NeedsAttention => false,
        }
    }
}

/// Something that happens to an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Event {
    /// A valid approval for the current details hash was recorded.
    Approve,
    /// Upstream or the customer withdrew the operation.
    Cancel,
    /// A worker (or the reconciler, for a same-key retry) took the lease.
    Claim,
    /// The holder gave the lease back before submitting anything (shutdown).
    Release,
    /// The lease expired and no submission was ever recorded: safe to run again.
    LeaseExpiredUnsubmitted,
    /// The lease expired after a submission was recorded: the outcome is unknown.
    LeaseExpiredSubmitted,
    /// Server-side checks before submission failed (approval, tenant, limits): nothing was sent.
    RejectBeforeSubmit,
    /// The processor confirmed the payment (submission reply, lookup or webhook).
    ProcessorSucceeded,
    /// The processor gave a definitive unsuccessful outcome.
    ProcessorFailed,
    /// Nothing reached the processor; retry later with the same key.
    NotSubmittedRetry,
    /// Nothing reached the processor and the attempt limit is spent.
    NotSubmittedExhausted,
    /// The request may have reached the processor; no reliable result.
    OutcomeUnknown,
    /// The reconciler could not resolve without risking a duplicate.
    Escalate,
    /// A processor report contradicts the row (a terminal state, a payment nobody approved, or a
    /// retrieved object that does not match the approved details); both facts are kept.
    ConflictingReport,
    /// On-call resolved by hand: the payment happened (with a reference).
    ResolveSucceeded,
    /// On-call resolved by hand: the payment did not happen.
    ResolveFailed,
    /// On-call asked for a retry with the same key.
    ResolveRetry,
}

/// Every event (for exhaustive tests).
pub const ALL_EVENTS: [Event; 17] = [
    Event::Approve,
    Event::Cancel,
    Event::Claim,
    Event::Release,
    Event::LeaseExpiredUnsubmitted,
    Event::LeaseExpiredSubmitted,
    Event::RejectBeforeSubmit,
    Event::ProcessorSucceeded,
    Event::ProcessorFailed,
    Event::NotSubmittedRetry,
    Event::NotSubmittedExhausted,
    Event::OutcomeUnknown,
    Event::Escalate,
    Event::ConflictingReport,
    Event::ResolveSucceeded,
    Event::ResolveFailed,
    Event::ResolveRetry,
];

impl Event {
    /// Stable text form, as written to the event log.
    pub const fn as_str(&self) -> &'static str {
        match self {
            Event::Approve => "approve",
            Event::Cancel => "cancel",
            Event::Claim => "claim",
            Event::Release => "release",
            Event::LeaseExpiredUnsubmitted => "lease_expired_unsubmitted",
            Event::LeaseExpiredSubmitted => "lease_expired_submitted",
            Event::RejectBeforeSubmit => "reject_before_submit",
            Event::ProcessorSucceeded => "processor_succeeded",
            Event::ProcessorFailed => "processor_failed",
            Event::NotSubmittedRetry => "not_submitted_retry",
            Event::NotSubmittedExhausted => "not_submitted_exhausted",
            Event::OutcomeUnknown => "outcome_unknown",
            Event::Escalate => "escalate",
            Event::ConflictingReport => "conflicting_report",
            Event::ResolveSucceeded => "resolve_succeeded",
            Event::ResolveFailed => "resolve_failed",
            Event::ResolveRetry => "resolve_retry",
        }
    }
}

/// A move the state machine does not allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("event {event:?} is not allowed in state {from:?}")]
pub struct IllegalTransition {
    /// The state the operation was in.
    pub from: Status,
    /// What was attempted.
    pub event: Event,
}

/// The one transition function. Every (state, event) pair is decided here explicitly.
pub fn transition(from: Status, event: Event) -> Result<Status, IllegalTransition> {
    use Event as E;
    use Status as S;
    let illegal = Err(IllegalTransition { from, event });
    match from {
        S::AwaitingApproval => match event {
            E::Approve => Ok(S::Ready),
            E::Cancel => Ok(S::Cancelled),
            // The processor holds a payment nobody approved: the loudest alert (runbook).
            E::ConflictingReport => Ok(S::NeedsAttention),
            E::Claim
            | E::Release
            | E::LeaseExpiredUnsubmitted
            | E::LeaseExpiredSubmitted
            | E::RejectBeforeSubmit
            | E::ProcessorSucceeded
            | E::ProcessorFailed
            | E::NotSubmittedRetry
            | E::NotSubmittedExhausted
            | E::OutcomeUnknown
            | E::Escalate
            | E::ResolveSucceeded
            | E::ResolveFailed
            | E::ResolveRetry => illegal,
        },
        S::Ready => match event {
            E::Claim => Ok(S::Executing),
            E::Cancel => Ok(S::Cancelled),
            // A processor object for this operation that does not match its approved details.
            E::ConflictingReport => Ok(S::NeedsAttention),
            E::Approve
            | E::Release
            | E::LeaseExpiredUnsubmitted
            | E::LeaseExpiredSubmitted
            | E::RejectBeforeSubmit
            | E::ProcessorSucceeded
            | E::ProcessorFailed
            | E::NotSubmittedRetry
            | E::NotSubmittedExhausted
            | E::OutcomeUnknown
            | E::Escalate
            | E::ResolveSucceeded
            | E::ResolveFailed
            | E::ResolveRetry => illegal,
        },
        S::Executing => match event {
            E::Release | E::LeaseExpiredUnsubmitted | E::NotSubmittedRetry => Ok(S::Ready),
            E::LeaseExpiredSubmitted | E::OutcomeUnknown => Ok(S::Unknown),
            E::RejectBeforeSubmit => Ok(S::Rejected),
            E::ProcessorSucceeded => Ok(S::Succeeded),
            E::ProcessorFailed => Ok(S::Failed),
            // A retrieved processor object that contradicts the approved details (amount, currency,
            // customer, operation id) stops the worker's write too: its record is fenced.
            E::NotSubmittedExhausted | E::Escalate | E::ConflictingReport => Ok(S::NeedsAttention),
            // Cancelling mid-flight could hide a payment that happened: refused.
            E::Cancel
            | E::Approve
            | E::Claim
            | E::ResolveSucceeded
            | E::ResolveFailed
            | E::ResolveRetry => illegal,
        },
        S::Unknown => match event {
            E::ProcessorSucceeded | E::ResolveSucceeded => Ok(S::Succeeded),
            E::ProcessorFailed | E::ResolveFailed => Ok(S::Failed),
            // The reconciler retries with the SAME key under a fresh lease.
            E::Claim => Ok(S::Executing),
            E::OutcomeUnknown => Ok(S::Unknown),
            E::Escalate | E::ConflictingReport => Ok(S::NeedsAttention),
            E::ResolveRetry => Ok(S::Ready),
            E::Approve
            | E::Cancel
            | E::Release
            | E::LeaseExpiredUnsubmitted
            | E::LeaseExpiredSubmitted
            | E::RejectBeforeSubmit
            | E::NotSubmittedRetry
            | E::NotSubmittedExhausted => illegal,
        },
        S::NeedsAttention => match event {
            E::ResolveSucceeded => Ok(S::Succeeded),
            E::ResolveFailed => Ok(S::Failed),
            E::ResolveRetry => Ok(S::Ready),
            // Further reports are kept as events; the row waits for a human.
            E::ConflictingReport => Ok(S::NeedsAttention),
            E::Approve
            | E::Cancel
            | E::Claim
            | E::Release
            | E::LeaseExpiredUnsubmitted
            | E::LeaseExpiredSubmitted
            | E::RejectBeforeSubmit
            | E::ProcessorSucceeded
            | E::ProcessorFailed
            | E::NotSubmittedRetry
            | E::NotSubmittedExhausted
            | E::OutcomeUnknown
            | E::Escalate => illegal,
        },
        // A terminal row keeps its result; a contradicting processor report moves it to
        // needs_attention with both facts kept, and nothing else moves it.
        S::Succeeded | S::Failed => match event {
            E::ConflictingReport => Ok(S::NeedsAttention),
            E::Approve
            | E::Cancel
            | E::Claim
            | E::Release
            | E::LeaseExpiredUnsubmitted
            | E::LeaseExpiredSubmitted
            | E::RejectBeforeSubmit
            | E::ProcessorSucceeded
            | E::ProcessorFailed
            | E::NotSubmittedRetry
            | E::NotSubmittedExhausted
            | E::OutcomeUnknown
            | E::Escalate
            | E::ResolveSucceeded
            | E::ResolveFailed
            | E::ResolveRetry => illegal,
        },
        // The processor reports a payment for an operation that never ran as far as we know.
        S::Rejected | S::Cancelled => match event {
            E::ConflictingReport => Ok(S::NeedsAttention),
            E::Approve
            | E::Cancel
            | E::Claim
            | E::Release
            | E::LeaseExpiredUnsubmitted
            | E::LeaseExpiredSubmitted
            | E::RejectBeforeSubmit
            | E::ProcessorSucceeded
            | E::ProcessorFailed
            | E::NotSubmittedRetry
            | E::NotSubmittedExhausted
            | E::OutcomeUnknown
            | E::Escalate
            | E::ResolveSucceeded
            | E::ResolveFailed
            | E::ResolveRetry => illegal,
        },
    }
}

/// A state change as one ledger statement writes it: from any of `from`, to `to`, logged as
/// `event`. Built only from the transition table, so a statement cannot name a move the table
/// refuses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    /// The states the statement may move a row out of (its `WHERE status ...`).
    pub from: Vec<Status>,
    /// What is logged.
    pub event: Event,
    /// The state the row ends in.
    pub to: Status,
}

impl Move {
    /// The move `event` makes from each of `from`: refused unless the table allows every one of
    /// them and they all lead to the same state.
    pub fn new(from: &[Status], event: Event) -> Result<Move, IllegalTransition> {
        let Some((first, rest)) = from.split_first() else {
            return Err(IllegalTransition {
                from: Status::AwaitingApproval,
                event,
            });
        };
        let to = transition(*first, event)?;
        for f in rest {
            if transition(*f, event)? != to {
                return Err(IllegalTransition { from: *f, event });
            }
        }
        Ok(Move {
            from: from.to_vec(),
            event,
            to,
        })
    }

    /// Every state the table lets `event` leave (each leads to the same state for every event).
    pub fn every(event: Event) -> Result<Move, IllegalTransition> {
        let from: Vec<Status> = ALL_STATUSES
            .into_iter()
            .filter(|s| transition(*s, event).is_ok())
            .collect();
        Move::new(&from, event)
    }
}

/// Event-log entries that change no state: the row's creation and the facts kept along the way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Note {
    /// A new row (no from-state).
    Create,
    /// A request is about to leave for the processor.
    SubmissionStarted,
    /// The reconciler will look again later.
    CheckDeferred,
    /// A processor report that changes nothing, kept as evidence.
    ReportIgnored,
    /// The processor replayed this operation's first submission: a row the ledger lost had made
    /// it (`ledger::lost_rows`).
    LostRow,
}

/// Every note.
pub const ALL_NOTES: [Note; 5] = [
    Note::Create,
    Note::SubmissionStarted,
    Note::CheckDeferred,
    Note::ReportIgnored,
    Note::LostRow,
];

impl Note {
    /// Stable text form, as written to the event log.
    pub const fn as_str(&self) -> &'static str {
        match self {
            Note::Create => "create",
            Note::SubmissionStarted => "submission_started",
            Note::CheckDeferred => "check_deferred",
            Note::ReportIgnored => "report_ignored",
            Note::LostRow => "lost_row",
        }
    }
}

/// The name an event-log entry carries: a state machine [`Event`] or a [`Note`]. Stored and
/// answered (JSON) as its text form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventName {
    /// A transition of the state machine.
    Event(Event),
    /// A fact that changes no state.
    Note(Note),
}

impl EventName {
    /// Stable text form, as written to the event log.
    pub const fn as_str(&self) -> &'static str {
        match self {
            EventName::Event(e) => e.as_str(),
            EventName::Note(n) => n.as_str(),
        }
    }

    /// Parses the stored form; `None` for a name the state machine does not know.
    pub fn parse(raw: &str) -> Option<EventName> {
        ALL_EVENTS
            .into_iter()
            .find(|e| e.as_str() == raw)
            .map(EventName::Event)
            .or_else(|| {
                ALL_NOTES
                    .into_iter()
                    .find(|n| n.as_str() == raw)
                    .map(EventName::Note)
            })
    }
}

impl std::fmt::Display for EventName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for EventName {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for EventName {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Serialize for EventName {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// The note a claim that also records its request's start (`Queue::claim_to_submit`) logs in place
/// of [`Event::Claim`]: one row version, one commit, one event, with the claim's move. The trail
/// still shows who claimed (the actor) and when the request left, and every submission is still
/// one `submission_started`.
pub const SUBMITTING_CLAIM: &str = Note::SubmissionStarted.as_str();

/// Whether an event-log row `(from, to, event)` is one the state machine allows: a legal
/// transition, `create` into `awaiting_approval`, a note that leaves the state as it was, or a
/// claim out of `ready` that recorded its submission ([`SUBMITTING_CLAIM`], the claim's move).
pub fn legal_log_entry(from: Option<&str>, to: &str, event: &str) -> bool {
    let Some(to) = Status::parse(to) else {
        return false;
    };
    let Some(event) = EventName::parse(event) else {
        return false;
    };
    let Some(from) = from else {
        return event == EventName::Note(Note::Create) && to == Status::AwaitingApproval;
    };
    let Some(from) = Status::parse(from) else {
        return false;
    };
    match event {
        EventName::Event(event) => transition(from, event) == Ok(to),
        EventName::Note(Note::Create) => false,
        EventName::Note(note) => submitting_claim(from, to, note) || from == to,
    }
}

/// Whether an event-log row `(from, to, event)` logs a claim: `claim`, or a claim out of `ready`
/// that recorded its submission ([`SUBMITTING_CLAIM`] with the claim's move).
pub fn is_claim_entry(from: Option<&str>, to: &str, event: &str) -> bool {
    match (
        EventName::parse(event),
        from.and_then(Status::parse),
        Status::parse(to),
    ) {
        (Some(EventName::Event(Event::Claim)), _, _) => true,
        (Some(EventName::Note(note)), Some(from), Some(to)) => submitting_claim(from, to, note),
        _ => false,
    }
}

/// [`SUBMITTING_CLAIM`] with the claim's move out of `ready`.
fn submitting_claim(from: Status, to: Status, note: Note) -> bool {
    note.as_str() == SUBMITTING_CLAIM
        && from == Status::Ready
        && transition(from, Event::Claim) == Ok(to)
}

#[cfg(test)]
mod tests;
