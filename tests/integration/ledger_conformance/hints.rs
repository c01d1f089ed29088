//! Closing webhook hints that agree with their row in bulk, on both stores: exactly those whose
//! operation is `succeeded` with the object the payload names, and whose payload says `succeeded`.

use super::{T0, at, for_each_store};
use crate::support::ready_operation;
use crate::support::refunds::succeeded_payment;
use payonce_ledger::{NewProcessorEvent, ProcessorEventKey};
use serde_json::json;

#[tokio::test]
async fn only_hints_that_agree_with_a_succeeded_row_are_closed_in_bulk() {
    for_each_store(|ledger| async move {
        let paid = succeeded_payment(&ledger, "INV-HINT1", 1_000, at(T0)).await;
        let reference = paid.external_ref.clone().expect("paid");
        let open = ready_operation(&ledger, "INV-HINT2", "pm_card_visa", at(T0)).await;
        let hint = |id: &str, object: serde_json::Value| {
            json!({"id": id, "object": "event", "type": "payment_intent.succeeded",
                "data": {"object": object}})
            .to_string()
        };
        let cases = [
            // (event id, operation, object, closed in bulk)
            (
                "evt_agrees",
                &paid,
                json!({"id": reference, "status": "succeeded"}),
                true,
            ),
            (
                "evt_other_object",
                &paid,
                json!({"id": "pi_someone_else", "status": "succeeded"}),
                false,
            ),
            (
                "evt_says_failed",
                &paid,
                json!({"id": reference, "status": "requires_payment_method"}),
                false,
            ),
            (
                "evt_row_not_final",
                &open,
                json!({"id": "pi_open", "status": "succeeded"}),
                false,
            ),
        ];
        for (id, op, object, _) in &cases {
            let payload = hint(id, object.clone());
            assert!(
                ledger
                    .insert_processor_event(
                        &NewProcessorEvent {
                            key: ProcessorEventKey {
                                processor: "stripe",
                                event_id: id
                            },
                            event_type: "payment_intent.succeeded",
                            operation: Some(&op.id),
                            payload: &payload,
                        },
                        at(T0),
                    )
                    .await
                    .unwrap()
            );
        }
        assert_eq!(
            ledger.close_known_hints(at(T0 + 1), 1_000).await.unwrap(),
            1,
            "{}",
            ledger.store()
        );
        let pending: Vec<String> = ledger
            .pending_processor_events(at(T0 + 1), 100)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.event_id)
            .collect();
        let expected: Vec<&str> = cases.iter().filter(|c| !c.3).map(|c| c.0).collect();
        assert_eq!(pending, expected, "{}", ledger.store());
        // Nothing left that agrees: a second call closes nothing.
        assert_eq!(
            ledger.close_known_hints(at(T0 + 2), 1_000).await.unwrap(),
            0
        );
    })
    .await;
}
