//! The on-call CLI shows refunds beside their payment (totals: refunded, in flight, refundable; one
//! row per refund) and a refund with the payment it gives money back from; `list` says each row's kind.

use crate::support::refunds::{create_refund, settle_refund, succeeded_payment};
use crate::support::{sqlite_ledger, tenant};
use payonce_core::clock::Timestamp;
use payonce_core::state::Status;
use payonce_ledger::{Cancel, Paid, Recorded};
use payonce_reconciler::oncall::{self, Format};
use serde_json::{Value, json};
use std::time::Duration;

const T0: Timestamp = Timestamp::from_millis(1_800_000_000_000);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[tokio::test]
async fn show_puts_refunds_beside_their_payment_and_a_refund_names_its_payment() {
    let ledger = sqlite_ledger().await;
    let payment = succeeded_payment(&ledger, "INV-OC1", 2048, T0).await;
    let done = create_refund(&ledger, &payment, "refund:oc:a", 1000, T0 + ms(1))
        .await
        .unwrap()
        .operation;
    let done = settle_refund(
        &ledger,
        &done,
        Recorded::Succeeded(Paid {
            reference: "re_oc_a".into(),
            result: json!({"id": "re_oc_a", "status": "succeeded"}),
        }),
    )
    .await;
    assert_eq!(done.status, Status::Succeeded);
    let waiting = create_refund(&ledger, &payment, "refund:oc:b", 500, T0 + ms(2))
        .await
        .unwrap()
        .operation;
    let withdrawn = create_refund(&ledger, &payment, "refund:oc:c", 300, T0 + ms(3))
        .await
        .unwrap()
        .operation;
    ledger
        .cancel(
            &tenant(),
            &Cancel {
                id: &withdrawn.id,
                actor: "on_call:test",
            },
            T0 + ms(4),
        )
        .await
        .unwrap();
    let now = T0 + ms(60_000);

    let shown = oncall::show(ledger.as_ref(), None, &payment.id, now, Format::Table)
        .await
        .unwrap();
    assert!(
        shown
            .contains("  refunds 3: refunded 10.00 USD, in flight 5.00 USD, refundable 5.48 USD\n"),
        "{shown}"
    );
    let rows: Vec<Vec<&str>> = shown
        .lines()
        .skip_while(|l| *l != "Refunds:")
        .skip(2)
        .take_while(|l| !l.is_empty())
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        [
            vec![
                done.id.as_str(),
                "succeeded",
                "10.00",
                "USD",
                "requested_by_customer",
                "re_oc_a",
                "59s"
            ],
            vec![
                waiting.id.as_str(),
                "awaiting_approval",
                "5.00",
                "USD",
                "requested_by_customer",
                "59s"
            ],
            vec![
                withdrawn.id.as_str(),
                "cancelled",
                "3.00",
                "USD",
                "requested_by_customer",
                "59s"
            ],
        ],
        "{shown}"
    );
    let json: Value = serde_json::from_str(
        &oncall::show(ledger.as_ref(), None, &payment.id, now, Format::Json)
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        json["refunds"]["totals"],
        json!({"payment_minor": 2048, "refunded_minor": 1000, "in_flight_minor": 500, "refund_count": 3})
    );
    assert_eq!(json["refunds"]["refundable_minor"], 548);
    assert_eq!(json["refunds"]["refunds"].as_array().unwrap().len(), 3);

    let refund = oncall::show(ledger.as_ref(), None, &waiting.id, now, Format::Table)
        .await
        .unwrap();
    assert!(
        refund.contains(&format!(
            "\n  refund of payment {} (pi_INV-OC1), reason requested_by_customer\n",
            payment.id
        )),
        "{refund}"
    );
    assert!(
        !refund.contains("refunds "),
        "a refund has no refunds: {refund}"
    );
    let refund_json: Value = serde_json::from_str(
        &oncall::show(ledger.as_ref(), None, &waiting.id, now, Format::Json)
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(refund_json["refunds"], Value::Null);
    assert_eq!(
        refund_json["operation"]["details"]["refund_of"]["payment_operation"],
        payment.id.as_str()
    );

    let listed = oncall::list(
        ledger.as_ref(),
        vec![Status::Succeeded],
        -1,
        10,
        now,
        Format::Table,
    )
    .await
    .unwrap();
    let kinds: Vec<(&str, &str)> = listed
        .lines()
        .skip(1)
        .map(|l| {
            let cells: Vec<&str> = l.split_whitespace().collect();
            (cells[0], cells[2])
        })
        .collect();
    assert!(listed.starts_with("ID"), "{listed}");
    assert_eq!(
        kinds,
        [
            (payment.id.as_str(), "payment"),
            (done.id.as_str(), "refund")
        ],
        "{listed}"
    );
}
