//! The state machine's tests: every transition, every name.

use super::*;
use Event as E;
use Status as S;

/// The legal moves, written out independently of `transition` as the specification.
const LEGAL: &[(Status, Event, Status)] = &[
    (S::AwaitingApproval, E::Approve, S::Ready),
    (S::AwaitingApproval, E::Cancel, S::Cancelled),
    (S::AwaitingApproval, E::ConflictingReport, S::NeedsAttention),
    (S::Ready, E::ConflictingReport, S::NeedsAttention),
    (S::Executing, E::ConflictingReport, S::NeedsAttention),
    (S::Unknown, E::ConflictingReport, S::NeedsAttention),
    (S::Ready, E::Claim, S::Executing),
    (S::Ready, E::Cancel, S::Cancelled),
    (S::Executing, E::Release, S::Ready),
    (S::Executing, E::LeaseExpiredUnsubmitted, S::Ready),
    (S::Executing, E::NotSubmittedRetry, S::Ready),
    (S::Executing, E::LeaseExpiredSubmitted, S::Unknown),
    (S::Executing, E::OutcomeUnknown, S::Unknown),
    (S::Executing, E::RejectBeforeSubmit, S::Rejected),
    (S::Executing, E::ProcessorSucceeded, S::Succeeded),
    (S::Executing, E::ProcessorFailed, S::Failed),
    (S::Executing, E::NotSubmittedExhausted, S::NeedsAttention),
    (S::Executing, E::Escalate, S::NeedsAttention),
    (S::Unknown, E::ProcessorSucceeded, S::Succeeded),
    (S::Unknown, E::ResolveSucceeded, S::Succeeded),
    (S::Unknown, E::ProcessorFailed, S::Failed),
    (S::Unknown, E::ResolveFailed, S::Failed),
    (S::Unknown, E::Claim, S::Executing),
    (S::Unknown, E::OutcomeUnknown, S::Unknown),
    (S::Unknown, E::Escalate, S::NeedsAttention),
    (S::Unknown, E::ResolveRetry, S::Ready),
    (S::NeedsAttention, E::ResolveSucceeded, S::Succeeded),
    (S::NeedsAttention, E::ResolveFailed, S::Failed),
    (S::NeedsAttention, E::ResolveRetry, S::Ready),
    (S::NeedsAttention, E::ConflictingReport, S::NeedsAttention),
    (S::Succeeded, E::ConflictingReport, S::NeedsAttention),
    (S::Failed, E::ConflictingReport, S::NeedsAttention),
    (S::Rejected, E::ConflictingReport, S::NeedsAttention),
    (S::Cancelled, E::ConflictingReport, S::NeedsAttention),
];

#[test]
fn every_state_event_pair_matches_the_specification() {
    let mut checked = 0;
    for from in ALL_STATUSES {
        for event in ALL_EVENTS {
            let expected = LEGAL
                .iter()
                .find(|(f, e, _)| *f == from && *e == event)
                .map(|(_, _, to)| *to);
            match expected {
                Some(to) => assert_eq!(transition(from, event), Ok(to), "{from:?} + {event:?}"),
                None => assert_eq!(
                    transition(from, event),
                    Err(IllegalTransition { from, event }),
                    "{from:?} + {event:?} must be illegal"
                ),
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 9 * ALL_EVENTS.len());
}

#[test]
fn terminal_states_only_leave_on_a_contradiction() {
    for from in ALL_STATUSES.into_iter().filter(Status::is_terminal) {
        for event in ALL_EVENTS {
            if let Ok(to) = transition(from, event) {
                assert_eq!(
                    (event, to),
                    (E::ConflictingReport, S::NeedsAttention),
                    "{from:?} left by {event:?}"
                );
            }
        }
    }
}

#[test]
fn a_move_takes_its_target_from_the_table_and_refuses_an_illegal_source() {
    let cancel = Move::every(E::Cancel).unwrap();
    assert_eq!(cancel.from, vec![S::AwaitingApproval, S::Ready]);
    assert_eq!(cancel.to, S::Cancelled);
    assert_eq!(
        Move::new(&[S::Executing], E::Cancel),
        Err(IllegalTransition {
            from: S::Executing,
            event: E::Cancel
        })
    );
    assert!(Move::new(&[], E::Cancel).is_err());
    for event in ALL_EVENTS {
        let every = Move::every(event).unwrap();
        for from in every.from {
            assert_eq!(transition(from, event), Ok(every.to), "{event:?}");
        }
    }
}

#[test]
fn log_entries_are_legal_transitions_creation_or_notes_in_place() {
    assert!(legal_log_entry(None, "awaiting_approval", "create"));
    assert!(!legal_log_entry(None, "ready", "create"));
    assert!(legal_log_entry(
        Some("executing"),
        "unknown",
        "outcome_unknown"
    ));
    assert!(legal_log_entry(Some("executing"), "ready", "release"));
    // The old RELEASE statement logged `release` for a move to `unknown`.
    assert!(!legal_log_entry(Some("executing"), "unknown", "release"));
    assert!(legal_log_entry(
        Some("unknown"),
        "unknown",
        "check_deferred"
    ));
    assert!(!legal_log_entry(Some("unknown"), "ready", "check_deferred"));
    assert!(!legal_log_entry(Some("ready"), "ready", "made_up"));
    // A claim out of ready that recorded its submission logs the note with the claim's move, and
    // no other move (the reconciler's claim of an unknown operation logs `claim`).
    assert!(legal_log_entry(
        Some("executing"),
        "executing",
        SUBMITTING_CLAIM
    ));
    assert!(legal_log_entry(
        Some("ready"),
        "executing",
        SUBMITTING_CLAIM
    ));
    assert!(!legal_log_entry(
        Some("unknown"),
        "executing",
        SUBMITTING_CLAIM
    ));
    assert!(!legal_log_entry(
        Some("ready"),
        "succeeded",
        SUBMITTING_CLAIM
    ));
}

#[test]
fn a_claim_is_logged_as_claim_or_as_a_submission_start_out_of_ready() {
    assert!(is_claim_entry(Some("ready"), "executing", "claim"));
    assert!(is_claim_entry(Some("unknown"), "executing", "claim"));
    assert!(is_claim_entry(Some("ready"), "executing", SUBMITTING_CLAIM));
    // `mark_submitting`'s note in place is not a claim, nor is any other move or event.
    assert!(!is_claim_entry(
        Some("executing"),
        "executing",
        SUBMITTING_CLAIM
    ));
    assert!(!is_claim_entry(
        Some("unknown"),
        "executing",
        SUBMITTING_CLAIM
    ));
    assert!(!is_claim_entry(Some("ready"), "executing", "approve"));
    assert!(!is_claim_entry(None, "executing", SUBMITTING_CLAIM));
}

#[test]
fn event_names_round_trip_through_their_stored_text() {
    let mut seen = std::collections::HashSet::new();
    let names = ALL_EVENTS
        .into_iter()
        .map(EventName::Event)
        .chain(ALL_NOTES.into_iter().map(EventName::Note));
    for name in names {
        assert_eq!(EventName::parse(name.as_str()), Some(name));
        assert!(seen.insert(name.as_str()), "{name} named twice");
        assert_eq!(
            serde_json::to_value(name).unwrap(),
            serde_json::json!(name.as_str())
        );
    }
    assert_eq!(seen.len(), 22);
    assert_eq!(EventName::parse("made_up"), None);
    assert_eq!(
        EventName::parse("claim"),
        Some(EventName::Event(Event::Claim))
    );
}

#[test]
fn status_text_round_trips() {
    for s in ALL_STATUSES {
        assert_eq!(Status::parse(s.as_str()), Some(s));
    }
    assert_eq!(Status::parse("processing"), None);
}
