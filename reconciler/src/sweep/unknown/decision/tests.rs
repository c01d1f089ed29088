//! The decision table of [`super::decide`], row by row for every contract, and the limits
//! it keeps (same-key retries without a lookup, the wait for a notification, the window).

use super::*;
use crate::fixtures::unknown_since;
use payonce_processor::contract;

const HOUR: Duration = Duration::from_secs(3_600);

/// The facts of a paid object for `op`, with `amount` as the processor holds it.
fn paid_object(op: &Operation, amount: i64) -> ProcessorObject {
    ProcessorObject {
        reference: "pi_1".into(),
        amount_minor: Some(amount),
        currency: Some("usd".into()),
        customer: Some("cus_123".into()),
        operation_id: Some(op.id.as_str().to_string()),
        intention: None,
        payment_reference: None,
        status: FoundStatus::Succeeded {
            result: serde_json::json!({"id": "pi_1"}),
        },
        object: serde_json::json!({"id": "pi_1"}),
    }
}

/// The lookup outcomes of the table's columns, in order: found paid, found paid with another
/// amount, found failed, found in progress, not found (read-after-write), not found (lagging),
/// rate limited, unavailable. With the facts of the found object.
fn lookups(op: &Operation) -> Vec<(LookupOutcome, Option<ProcessorObject>)> {
    let found = |status| LookupOutcome::Found {
        reference: "pi_1".into(),
        status,
    };
    let paid = FoundStatus::Succeeded {
        result: serde_json::json!({"id": "pi_1"}),
    };
    vec![
        (found(paid.clone()), Some(paid_object(op, 2048))),
        (found(paid), Some(paid_object(op, 3000))),
        (
            found(FoundStatus::Failed {
                code: "card_declined".into(),
                message: "no".into(),
            }),
            None,
        ),
        (
            found(FoundStatus::Pending {
                processor_status: "processing".into(),
            }),
            None,
        ),
        (LookupOutcome::NotFound { consistent: true }, None),
        (LookupOutcome::NotFound { consistent: false }, None),
        (
            LookupOutcome::RateLimited {
                reason: "429".into(),
            },
            None,
        ),
        (
            LookupOutcome::Unavailable {
                reason: "timeout".into(),
            },
            None,
        ),
    ]
}

/// One letter per decision: S(ucceeded), L(ost row recreated), M(ismatch), F(ailed), P(oll),
/// r(etry same key), R(esubmit), E(scalate), D(efer).
fn letter(d: &Decision) -> char {
    match d {
        Decision::Record(Report::Succeeded(_)) => 'S',
        Decision::Record(Report::Recreated(_)) => 'L',
        Decision::Record(Report::Mismatch { .. }) => 'M',
        Decision::Record(Report::Failed(_)) => 'F',
        Decision::Poll(_) => 'P',
        Decision::RetrySameKey => 'r',
        Decision::Resubmit => 'R',
        Decision::Escalate(_) => 'E',
        Decision::Defer(_) => 'D',
    }
}

/// A processor with neither idempotent submission nor a lookup.
const UNKEYED: Contract = Contract {
    name: "unkeyed",
    processor: "a processor without keys or lookups",
    key: None,
    lookups: payonce_processor::contract::Lookups::NONE,
    ..contract::STRIPE
};

/// The three ages of the table, from the first submission: young (a minute), near the edge of
/// the retention (inside the margin), past it (a minute after). Without a documented retention,
/// measured against a day.
fn ages(c: &Contract, margin: Duration) -> [Duration; 3] {
    let retention = c.key_retention.unwrap_or(contract::DAY);
    [
        Duration::from_secs(60),
        retention - margin / 2,
        retention + Duration::from_secs(60),
    ]
}

/// The decisions of one row: per lookup column, its three ages.
fn row(c: &Contract, with_reference: bool, config: &ReconcilerConfig) -> String {
    let mut op = unknown_since(0);
    if with_reference {
        op.external_ref = Some("pi_1".into());
    }
    let asked = can_look_up(&op, c);
    let mut groups = Vec::new();
    for (lookup, found) in lookups(&op) {
        let mut group = String::new();
        for age in ages(c, config.retention_margin) {
            let case = Case {
                op: &op,
                lookup: asked.then(|| lookup.clone()),
                found: found.clone(),
                now: Timestamp::from_millis(0) + age,
            };
            group.push(letter(&decide(case, c, config)));
        }
        groups.push(group);
    }
    groups.join(" ")
}

/// Every contract, with and without a stored reference, under the default policy (no
/// resubmission after the window): columns as [`lookups`], letters as [`letter`], three ages
/// each as [`ages`].
#[test]
fn every_contract_decides_as_the_table_says() {
    let stripe_like = "SSS MMM FFF PPP rEE rEE DDD DDD";
    let not_asked_replays = "rEE rEE rEE rEE rEE rEE rEE rEE";
    let not_asked_human = "EEE EEE EEE EEE EEE EEE EEE EEE";
    let not_asked_waits = "PEE PEE PEE PEE PEE PEE PEE PEE";
    let table: [(&Contract, bool, &str); 22] = [
        (&contract::STRIPE, false, stripe_like),
        (&contract::STRIPE, true, stripe_like),
        // No lookup: without a reference (the answer was lost), a retry while Adyen remembers
        // the key replays its result, then a human. With the reference Adyen answered with
        // (`Received`), its notification settles it: wait, no request; a human once the wait
        // (a day) is over, which both older ages are.
        (&contract::ADYEN_CHECKOUT, false, not_asked_replays),
        (&contract::ADYEN_CHECKOUT, true, not_asked_waits),
        // Only 2xx saved and no reference to retrieve: a retry could execute twice.
        (&contract::CHECKOUT_COM, false, not_asked_human),
        (
            &contract::CHECKOUT_COM,
            true,
            "SSS MMM FFF PPP rEE EEE DDD DDD",
        ),
        (&contract::WORLDLINE_DIRECT, false, not_asked_replays),
        (&contract::WORLDLINE_DIRECT, true, stripe_like),
        // No retention to count on: never retried with the key.
        (&contract::PAYPAL_REST, false, not_asked_human),
        (
            &contract::PAYPAL_REST,
            true,
            "SSS MMM FFF PPP EEE EEE DDD DDD",
        ),
        // A lagging list and only successes saved: "not found" proves nothing, a retry could
        // execute twice.
        (&contract::QONTO, false, "SSS MMM FFF PPP EEE EEE DDD DDD"),
        (&contract::QONTO, true, "SSS MMM FFF PPP EEE EEE DDD DDD"),
        (&contract::SHORT_RETENTION, false, stripe_like),
        (&contract::SHORT_RETENTION, true, stripe_like),
        (&contract::REPLAY_ANY_PAYLOAD, false, stripe_like),
        (&contract::REPLAY_ANY_PAYLOAD, true, stripe_like),
        (
            &contract::ONLY_2XX_SAVED,
            false,
            "SSS MMM FFF PPP rEE EEE DDD DDD",
        ),
        (
            &contract::ONLY_2XX_SAVED,
            true,
            "SSS MMM FFF PPP rEE EEE DDD DDD",
        ),
        (&contract::NO_LOOKUP, false, not_asked_replays),
        (&contract::NO_LOOKUP, true, not_asked_replays),
        (&UNKEYED, false, not_asked_human),
        (&UNKEYED, true, not_asked_human),
    ];
    let config = ReconcilerConfig::new("rec");
    let covered: std::collections::HashSet<&str> = table.iter().map(|r| r.0.name).collect();
    for c in contract::DOCUMENTED.iter().chain(contract::REGISTRY.iter()) {
        assert!(covered.contains(c.name), "{} is not in the table", c.name);
    }
    for (c, with_reference, expected) in table {
        assert_eq!(
            row(c, with_reference, &config),
            expected,
            "{} (reference: {with_reference})",
            c.name
        );
    }
}

/// With resubmission after the window allowed, only a read-after-write "not found" changes:
/// the two not-found columns per contract.
#[test]
fn the_resubmit_policy_acts_only_on_proof_of_absence_past_the_window() {
    let mut config = ReconcilerConfig::new("rec");
    config.resubmit_after_window = true;
    let table: [(&Contract, bool, &str); 9] = [
        (&contract::STRIPE, false, "rRR rEE"),
        (&contract::ADYEN_CHECKOUT, false, "rEE rEE"),
        (&contract::CHECKOUT_COM, true, "rRR EEE"),
        (&contract::WORLDLINE_DIRECT, true, "rRR rEE"),
        (&contract::PAYPAL_REST, true, "RRR EEE"),
        (&contract::QONTO, false, "EEE EEE"),
        (&contract::ONLY_2XX_SAVED, false, "rRR EEE"),
        (&contract::NO_LOOKUP, false, "rEE rEE"),
        (&UNKEYED, false, "EEE EEE"),
    ];
    for (c, with_reference, expected) in table {
        let all = row(c, with_reference, &config);
        let not_found: Vec<&str> = all.split(' ').skip(4).take(2).collect();
        assert_eq!(not_found.join(" "), expected, "{}", c.name);
    }
}

#[test]
fn escalations_say_why_a_retry_is_not_safe() {
    let config = ReconcilerConfig::new("rec");
    let op = unknown_since(0);
    let reason = |c: &Contract, lookup: Option<LookupOutcome>, age: Duration| {
        let case = Case {
            op: &op,
            lookup,
            found: None,
            now: Timestamp::from_millis(0) + age,
        };
        match decide(case, c, &config) {
            Decision::Escalate(why) => why,
            other => panic!("{}: {other:?}", c.name),
        }
    };
    let minute = Duration::from_secs(60);
    let lagging = Some(LookupOutcome::NotFound { consistent: false });
    assert!(
        reason(&contract::ONLY_2XX_SAVED, lagging.clone(), minute)
            .contains("saves only 2xx answers")
    );
    assert!(
        reason(&contract::STRIPE, lagging, contract::DAY).contains("retention window has closed")
    );
    assert!(reason(&contract::PAYPAL_REST, None, minute).contains("no single key retention"));
    assert!(reason(&UNKEYED, None, minute).contains("no idempotent submission"));
    assert!(reason(&contract::NO_LOOKUP, None, contract::DAY).contains("offers no lookup"));
}

#[test]
fn without_a_lookup_same_key_retries_stop_at_the_limit() {
    let config = ReconcilerConfig::new("rec");
    let mut op = unknown_since(0);
    let decide_at = |op: &Operation| {
        let case = Case {
            op,
            lookup: None,
            found: None,
            now: Timestamp::from_millis(60_000),
        };
        decide(case, &contract::NO_LOOKUP, &config)
    };
    op.submit_count = SUBMISSIONS_WITHOUT_LOOKUP_MAX - 1;
    assert_eq!(decide_at(&op), Decision::RetrySameKey);
    op.submit_count = SUBMISSIONS_WITHOUT_LOOKUP_MAX;
    match decide_at(&op) {
        Decision::Escalate(why) => assert!(why.contains("replays what it saved"), "{why}"),
        other => panic!("{other:?}"),
    }
    // With a lookup, the lookup decides however often the key was sent.
    op.submit_count = SUBMISSIONS_WITHOUT_LOOKUP_MAX * 10;
    let case = Case {
        op: &op,
        lookup: Some(LookupOutcome::NotFound { consistent: true }),
        found: None,
        now: Timestamp::from_millis(60_000),
    };
    assert_eq!(
        decide(case, &contract::STRIPE, &config),
        Decision::RetrySameKey
    );
}

#[test]
fn a_reference_only_a_notification_settles_waits_for_it_up_to_the_limit() {
    let config = ReconcilerConfig::new("rec");
    let mut op = unknown_since(0);
    op.external_ref = Some("PSPRECEIVED00001".into());
    let at = |op: &Operation, now: Duration, c: &Contract| {
        let case = Case {
            op,
            lookup: None,
            found: None,
            now: Timestamp::from_millis(0) + now,
        };
        decide(case, c, &config)
    };
    let before = NOTIFICATION_WAIT_MAX - Duration::from_secs(1);
    // However often the key was sent: another request would replay the saved `Received`.
    for sent in [
        1,
        SUBMISSIONS_WITHOUT_LOOKUP_MAX,
        SUBMISSIONS_WITHOUT_LOOKUP_MAX * 10,
    ] {
        op.submit_count = sent;
        let waits = at(&op, before, &contract::ADYEN_CHECKOUT);
        assert!(
            matches!(&waits, Decision::Poll(why) if why.contains("awaits its notification")),
            "{sent}: {waits:?}"
        );
    }
    match at(&op, NOTIFICATION_WAIT_MAX, &contract::ADYEN_CHECKOUT) {
        Decision::Escalate(why) => assert!(why.contains("none came within 24 h"), "{why}"),
        other => panic!("{other:?}"),
    }
    // The wait runs from the last submission, the one whose answer gave the reference.
    op.last_submitted_at = Some(Timestamp::from_millis(0) + contract::DAY);
    assert!(matches!(
        at(&op, NOTIFICATION_WAIT_MAX + HOUR, &contract::ADYEN_CHECKOUT),
        Decision::Poll(_)
    ));
    // Without a reference (the answer was lost): same-key retries up to the limit, as before.
    op.external_ref = None;
    op.submit_count = 1;
    let minute = Duration::from_secs(60);
    assert_eq!(
        at(&op, minute, &contract::ADYEN_CHECKOUT),
        Decision::RetrySameKey
    );
    op.submit_count = SUBMISSIONS_WITHOUT_LOOKUP_MAX;
    assert!(matches!(
        at(&op, minute, &contract::ADYEN_CHECKOUT),
        Decision::Escalate(_)
    ));
    // `no-lookup` on Stripe's wire: a held reference changes nothing (a Stripe event is applied
    // only through a retrieve), so the request limit still sends it to a human.
    op.external_ref = Some("pi_1".into());
    assert!(matches!(
        at(&op, minute, &contract::NO_LOOKUP),
        Decision::Escalate(_)
    ));
}

#[test]
fn a_short_retention_closes_the_window_on_its_own_clock() {
    // `short-retention` shortened to 2 s for a test, margin 200 ms: a retry at 1 s, a human
    // at 1.9 s.
    let mut config = ReconcilerConfig::new("rec");
    config.retention_margin = Duration::from_millis(200);
    let short = contract::SHORT_RETENTION.with_key_retention(Duration::from_secs(2));
    let op = unknown_since(0);
    let at = |ms| Case {
        op: &op,
        lookup: Some(LookupOutcome::NotFound { consistent: false }),
        found: None,
        now: Timestamp::from_millis(ms),
    };
    assert_eq!(decide(at(1_000), &short, &config), Decision::RetrySameKey);
    assert!(matches!(
        decide(at(1_900), &short, &config),
        Decision::Escalate(_)
    ));
}
