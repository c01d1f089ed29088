//! Rows the reconciler's unit tests decide on.

use payonce_core::clock::Timestamp;
use payonce_core::details::{Details, RawDetails};
use payonce_core::id::{BusinessKey, IdempotencyKey, OperationId, TenantId};
use payonce_core::state::Status;
use payonce_ledger::Operation;
use std::time::Duration;

const HOUR: Duration = Duration::from_secs(3_600);

/// A payment of 2048 usd, `unknown` since its first and only submission at `first_submitted_ms`.
pub(crate) fn unknown_since(first_submitted_ms: i64) -> Operation {
    let details = Details::parse(&RawDetails {
        kind: "payment".into(),
        amount: 2048,
        currency: "usd".into(),
        customer: "cus_123".into(),
        payment_method: "pm_card_visa".into(),
        invoice: "INV-2048".into(),
        destination: None,
        description: None,
        refund_of: None,
    })
    .expect("valid details");
    let at = Timestamp::from_millis(first_submitted_ms);
    Operation {
        id: OperationId::parse("op_0123456789abcdef0123456789abcdef").expect("id"),
        tenant: TenantId::parse("acme").expect("tenant"),
        business_key: BusinessKey::parse("invoice:INV-2048").expect("business key"),
        details_hash: details.hash(),
        approved_hash: Some(details.hash()),
        details,
        status: Status::Unknown,
        attempt: 1,
        lease_owner: None,
        lease_expires_at: None,
        idempotency_key: IdempotencyKey::parse("po1_0123456789abcdef0123").expect("key"),
        first_submitted_at: Some(at),
        first_submitted_attempt: Some(1),
        last_submitted_at: Some(at),
        submit_count: 1,
        not_sent_attempts: 0,
        external_ref: None,
        result: None,
        failure_code: None,
        failure_message: None,
        available_at: at,
        next_check_at: Some(at),
        check_count: 0,
        approved_by: Some("customer".into()),
        approval_expires_at: Some(at + HOUR),
        created_at: at,
        updated_at: at,
        processor: None,
        priority: payonce_core::priority::Priority::Interactive,
        not_before: None,
    }
}
