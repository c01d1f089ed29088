//! The details' parsers, hash and refund shape.

use super::*;

#[test]
fn refund_reasons_round_trip_and_unknown_ones_are_refused() {
    for reason in [
        RefundReason::Duplicate,
        RefundReason::Fraudulent,
        RefundReason::RequestedByCustomer,
    ] {
        assert_eq!(RefundReason::parse(reason.as_str()), Ok(reason));
        let json = serde_json::to_string(&reason).unwrap();
        assert_eq!(json, format!("\"{}\"", reason.as_str()));
    }
    let err = RefundReason::parse("expired_uncaptured_charge").unwrap_err();
    assert!(
        matches!(
            &err,
            DetailsError::Field {
                field: "reason",
                ..
            }
        ),
        "{err:?}"
    );
}

pub(crate) fn raw() -> RawDetails {
    RawDetails {
        kind: "payment".into(),
        amount: 2048,
        currency: "usd".into(),
        customer: "cus_123".into(),
        payment_method: "pm_card_visa".into(),
        invoice: "INV-2048".into(),
        destination: None,
        description: Some("March hosting".into()),
        refund_of: None,
    }
}

#[test]
fn every_consequential_detail_changes_the_hash() {
    let base = Details::parse(&raw()).unwrap().hash();
    let variants: [fn(&mut RawDetails); 6] = [
        |r| r.amount = 2049,
        |r| r.currency = "eur".into(),
        |r| r.customer = "cus_124".into(),
        |r| r.payment_method = "pm_card_mastercard".into(),
        |r| r.invoice = "INV-2049".into(),
        |r| r.destination = Some("acct_1".into()),
    ];
    for change in variants {
        let mut r = raw();
        change(&mut r);
        assert_ne!(Details::parse(&r).unwrap().hash(), base);
    }
    let mut r = raw();
    r.description = Some("other words".into());
    assert_eq!(
        Details::parse(&r).unwrap().hash(),
        base,
        "description is not consequential"
    );
    assert_eq!(DetailsHash::parse(base.as_str()).unwrap(), base);
}

fn payment() -> (Details, OperationId) {
    (Details::parse(&raw()).unwrap(), OperationId::generate())
}

#[test]
fn a_refund_takes_the_payments_parties_and_round_trips_through_its_raw_form() {
    let (payment, op) = payment();
    let refund = Details::refund(&payment, &op, "pi_1", 500, RefundReason::Duplicate).unwrap();
    assert_eq!(refund.kind(), OperationKind::Refund);
    assert_eq!(refund.money().amount_minor(), 500);
    assert_eq!(refund.money().currency(), payment.money().currency());
    assert_eq!(refund.customer(), "cus_123");
    assert_eq!(refund.payment_method(), "pm_card_visa");
    assert_eq!(refund.invoice(), "INV-2048");
    assert_eq!(refund.destination(), None);
    assert_eq!(refund.description(), None);
    let of = refund.refund_of().unwrap();
    assert_eq!(of.payment_operation(), &op);
    assert_eq!(of.payment_reference(), "pi_1");
    assert_eq!(of.reason(), RefundReason::Duplicate);
    assert_eq!(payment.refund_of(), None);

    let raw = refund.to_raw();
    assert_eq!(raw.kind, "refund");
    let json = serde_json::to_value(&raw).unwrap();
    assert_eq!(json["refund_of"]["payment_operation"], op.as_str());
    assert_eq!(json["refund_of"]["reason"], "duplicate");
    let back: RawDetails = serde_json::from_value(json).unwrap();
    assert_eq!(Details::parse(&back).unwrap(), refund);
    assert_eq!(Details::parse(&back).unwrap().hash(), refund.hash());
    // A payment's raw form has no refund_of key at all (responses are unchanged).
    let payment_json = serde_json::to_value(payment.to_raw()).unwrap();
    assert!(payment_json.get("refund_of").is_none(), "{payment_json}");
}

#[test]
fn every_refund_detail_changes_the_hash_and_payment_hashes_are_unchanged() {
    // Pinned: refunds appended their fields after the payment's, so stored payment hashes hold.
    assert_eq!(
        Details::parse(&raw()).unwrap().hash().as_str(),
        PAYMENT_HASH_PINNED
    );
    let (payment, op) = payment();
    let base = Details::refund(&payment, &op, "pi_1", 500, RefundReason::Duplicate)
        .unwrap()
        .hash();
    let variants = [
        Details::refund(&payment, &op, "pi_1", 501, RefundReason::Duplicate),
        Details::refund(
            &payment,
            &OperationId::generate(),
            "pi_1",
            500,
            RefundReason::Duplicate,
        ),
        Details::refund(&payment, &op, "pi_2", 500, RefundReason::Duplicate),
        Details::refund(&payment, &op, "pi_1", 500, RefundReason::Fraudulent),
    ];
    for variant in variants {
        assert_ne!(variant.unwrap().hash(), base);
    }
    let mut other_payment = raw();
    other_payment.customer = "cus_999".into();
    let other = Details::parse(&other_payment).unwrap();
    assert_ne!(
        Details::refund(&other, &op, "pi_1", 500, RefundReason::Duplicate)
            .unwrap()
            .hash(),
        base
    );
}

/// `Details::parse(&raw()).hash()`, computed before refunds existed.
const PAYMENT_HASH_PINNED: &str =
    "0adc909fe44b2cf4c1827ba21dcc619d05feb65391eb213cd3936a7c0e100372";

#[test]
fn refunds_and_payments_are_refused_in_each_others_shape() {
    let (payment, op) = payment();
    let refund = Details::refund(&payment, &op, "pi_1", 500, RefundReason::Duplicate).unwrap();
    let field = |r: Result<Details, DetailsError>| match r {
        Err(DetailsError::Field { field, .. }) => field,
        other => panic!("expected a field error, got {other:?}"),
    };
    assert_eq!(
        field(Details::refund(
            &refund,
            &op,
            "pi_1",
            1,
            RefundReason::Duplicate
        )),
        "payment_operation"
    );
    assert_eq!(
        field(Details::refund(
            &payment,
            &op,
            "pi_1",
            2049,
            RefundReason::Duplicate
        )),
        "amount"
    );
    assert!(matches!(
        Details::refund(&payment, &op, "pi_1", 0, RefundReason::Duplicate),
        Err(DetailsError::Money(_))
    ));
    assert_eq!(
        field(Details::refund(
            &payment,
            &op,
            "pi 1",
            1,
            RefundReason::Duplicate
        )),
        "payment_reference"
    );
    let mut r = refund.to_raw();
    r.refund_of = None;
    assert_eq!(field(Details::parse(&r)), "refund_of");
    let mut r = raw();
    r.refund_of = refund.to_raw().refund_of;
    assert_eq!(field(Details::parse(&r)), "refund_of");
    let mut r = refund.to_raw();
    r.refund_of.as_mut().unwrap().payment_operation = "op_nothex".into();
    assert_eq!(field(Details::parse(&r)), "payment_operation");
    let mut r = refund.to_raw();
    r.refund_of.as_mut().unwrap().reason = "expired_uncaptured_charge".into();
    assert_eq!(field(Details::parse(&r)), "reason");
}

#[test]
fn bad_fields_are_refused_with_their_name() {
    let mut r = raw();
    r.customer = String::new();
    assert!(matches!(
        Details::parse(&r),
        Err(DetailsError::Field {
            field: "customer",
            ..
        })
    ));
    let mut r = raw();
    r.invoice = "x".repeat(REFERENCE_LEN_MAX + 1);
    assert!(matches!(
        Details::parse(&r),
        Err(DetailsError::Field {
            field: "invoice",
            ..
        })
    ));
    let mut r = raw();
    r.description = Some("d".repeat(DESCRIPTION_LEN_MAX + 1));
    assert!(matches!(
        Details::parse(&r),
        Err(DetailsError::Field {
            field: "description",
            ..
        })
    ));
    let mut r = raw();
    r.amount = 0;
    assert!(matches!(Details::parse(&r), Err(DetailsError::Money(_))));
    let mut r = raw();
    r.kind = "transfer".into();
    assert!(matches!(
        Details::parse(&r),
        Err(DetailsError::Field { field: "kind", .. })
    ));
}

/// The hash docs/api.md documents for callers that approve in the create request (and its worked
/// example's details): a change to the encoding breaks every such caller, so it breaks this test.
#[test]
fn the_documented_hash_of_the_worked_example_is_the_hash() {
    let raw = RawDetails {
        kind: "payment".into(),
        amount: 2048,
        currency: "usd".into(),
        customer: "cus_1".into(),
        payment_method: "pm_card_visa".into(),
        invoice: "INV-1".into(),
        destination: None,
        description: Some("not hashed".into()),
        refund_of: None,
    };
    assert_eq!(
        Details::parse(&raw).unwrap().hash().as_str(),
        "6b94d2ac3b88fb9eb8f73c8afe8231578639792a9ca41577b6d36dd6efdd5a6b"
    );
}
