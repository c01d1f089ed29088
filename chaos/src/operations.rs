//! The soak's operations (created and approved straight in the ledger, as upstream would through the
//! api) and the assistant's tool calls against them, some sent twice at once.

use anyhow::Context;
use payonce_core::clock::Timestamp;
use payonce_core::details::{Details, RawDetails};
use payonce_core::id::{BusinessKey, OperationId, TenantId};
use payonce_ledger::{NewApproval, NewOperation, SharedLedger};
use serde_json::{Value, json};
use std::time::Duration;

/// The tenant every soak operation belongs to.
pub const TENANT: &str = "chaos";
/// Amount of every soak payment, minor units.
pub const AMOUNT_MINOR: i64 = 2048;
/// Tool calls in flight at once.
const TOOL_CALLS_IN_FLIGHT: usize = 8;
/// Customers the operations are spread over. The Stripe adapter's list lookup pages through one
/// customer's recent payments and gives up after `LOOKUP_PAGES_MAX` pages, so one customer for
/// thousands of operations leaves lost answers `unknown` for good (found by the long soak).
const CUSTOMERS: usize = 100;
/// Timeout of one tool call (the api answers from the ledger; it never waits for the processor).
const TOOL_CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How many times a tool call answered `503 unavailable` is asked again.
const TOOL_CALL_RETRIES_MAX: usize = 5;
/// Longest pause a `Retry-After` may ask of the soak's assistant, seconds.
const TOOL_CALL_RETRY_AFTER_MAX_S: u64 = 5;

/// One soak operation and what the plan made of it.
#[derive(Debug, Clone)]
pub struct PlannedOp {
    /// The operation id.
    pub id: OperationId,
    /// Whether it was approved (unapproved ones must never be paid).
    pub approved: bool,
}

/// The payment method for operation `i`: mostly cards that succeed, some declines (definitive
/// failures) and some that stay `processing` for a while (unknown until looked up or a webhook).
fn payment_method(i: usize) -> &'static str {
    match i % 25 {
        0 => "pm_card_chargeDeclined",
        1 | 2 => "pm_card_processing",
        _ => "pm_card_visa",
    }
}

/// Creates `count` operations; every `unapproved_every`-th one is left awaiting approval.
pub async fn create(
    ledger: &SharedLedger,
    count: usize,
    unapproved_every: usize,
    now: Timestamp,
) -> anyhow::Result<Vec<PlannedOp>> {
    let mut ops = Vec::with_capacity(count);
    for i in 0..count {
        let approved = unapproved_every == 0 || i % unapproved_every != unapproved_every - 1;
        ops.push(create_one(ledger, i, CUSTOMERS, approved, now).await?);
    }
    Ok(ops)
}

/// Creates soak operation `i` (invoice `CHAOS-{i}`) for one of `customers` customers, approved by
/// the customer when `approved`, as upstream would through the api.
pub async fn create_one(
    ledger: &SharedLedger,
    i: usize,
    customers: usize,
    approved: bool,
    now: Timestamp,
) -> anyhow::Result<PlannedOp> {
    let tenant = TenantId::parse(TENANT).map_err(anyhow::Error::msg)?;
    let invoice = format!("CHAOS-{i}");
    let details = Details::parse(&RawDetails {
        kind: "payment".into(),
        amount: AMOUNT_MINOR,
        currency: "usd".into(),
        customer: format!("cus_chaos_{}", i % customers.max(1)),
        payment_method: payment_method(i).into(),
        invoice: invoice.clone(),
        destination: None,
        description: Some(format!("Invoice {invoice}")),
        refund_of: None,
    })
    .map_err(|e| anyhow::anyhow!("details: {e:?}"))?;
    let hash = details.hash();
    let created = ledger
        .create_or_get(
            NewOperation::keyed(
                &payonce_core::intention::KeySecret::parse(crate::fleet::CHAOS_KEY_SECRET)?,
                tenant.clone(),
                BusinessKey::parse(&format!("invoice:{invoice}:pay"))
                    .map_err(|e| anyhow::anyhow!("business key: {e:?}"))?,
                details,
                "service:chaos".into(),
            ),
            now,
        )
        .await
        .context("creating a soak operation")?;
    if approved {
        ledger
            .approve(
                &tenant,
                NewApproval {
                    operation: created.operation.id.clone(),
                    details_hash: hash,
                    approved_by: "customer:cus_chaos".into(),
                    method: "chaos".into(),
                    expires_at: now + std::time::Duration::from_secs(86_400),
                    priority: None,
                },
                now,
            )
            .await
            .context("approving a soak operation")?;
    }
    Ok(PlannedOp {
        id: created.operation.id,
        approved,
    })
}

/// What the tool calls saw.
#[derive(Debug, Clone, Copy, Default)]
pub struct ToolCallTally {
    /// Calls sent.
    pub sent: usize,
    /// Calls that were the concurrent second copy of another.
    pub duplicates: usize,
    /// Answers that were not 200 or claimed a new payment was submitted.
    pub bad: usize,
}

/// Sends `pay_invoice` for each of `targets` (in the given order); an operation whose flag is true
/// gets two calls at once.
pub async fn tool_calls(
    http: reqwest::Client,
    api_base: String,
    assistant_key: String,
    targets: Vec<(OperationId, bool)>,
) -> ToolCallTally {
    let mut tally = ToolCallTally::default();
    let mut in_flight: tokio::task::JoinSet<bool> = tokio::task::JoinSet::new();
    let mut n = 0usize;
    for (id, twice) in targets {
        let copies = if twice { 2 } else { 1 };
        tally.duplicates += copies - 1;
        for _ in 0..copies {
            while in_flight.len() >= TOOL_CALLS_IN_FLIGHT {
                if let Some(Ok(ok)) = in_flight.join_next().await {
                    tally.bad += usize::from(!ok);
                }
            }
            n += 1;
            tally.sent += 1;
            let (http, base, key, id) = (
                http.clone(),
                api_base.clone(),
                assistant_key.clone(),
                id.clone(),
            );
            in_flight.spawn(async move { call_until_answered(&http, &base, &key, &id, n).await });
        }
    }
    while let Some(r) = in_flight.join_next().await {
        tally.bad += usize::from(!matches!(r, Ok(true)));
    }
    tally
}

/// What one tool call answered.
enum Answer {
    /// Well-formed, about this operation, nothing new submitted.
    Good,
    /// "The state could not be read; call again shortly."
    Unavailable,
    /// Anything else: an HTTP error, a malformed answer, a claim that a new payment was submitted.
    Bad,
}

/// One Anthropic-shaped tool call.
async fn one_call(
    http: &reqwest::Client,
    base: &str,
    key: &str,
    id: &OperationId,
    n: usize,
) -> Answer {
    let call_id = format!("toolu_chaos_{n}");
    let body = json!({"format": "anthropic", "call": {"type": "tool_use", "id": call_id,
        "name": "pay_invoice", "input": {"operation_id": id.as_str()}}});
    // As an assistant would: a 503 (the ledger went away: a failover, a terminated backend) is
    // asked again after its Retry-After, at most TOOL_CALL_RETRIES_MAX times.
    let mut tries = 0;
    let r = loop {
        let sent = http
            .post(format!("{base}/v1/tool-calls"))
            .bearer_auth(key)
            .timeout(TOOL_CALL_TIMEOUT)
            .json(&body)
            .send()
            .await;
        let Ok(r) = sent else { return Answer::Bad };
        if r.status() != reqwest::StatusCode::SERVICE_UNAVAILABLE || tries == TOOL_CALL_RETRIES_MAX
        {
            break r;
        }
        tries += 1;
        let wait_s = r
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(1)
            .min(TOOL_CALL_RETRY_AFTER_MAX_S);
        tokio::time::sleep(Duration::from_secs(wait_s)).await;
    };
    if !r.status().is_success() {
        return Answer::Bad;
    }
    let Ok(result) = r.json::<Value>().await else {
        return Answer::Bad;
    };
    let answer: Value = result["content"]
        .as_str()
        .and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or(Value::Null);
    if answer["error"]["code"] == "unavailable" {
        return Answer::Unavailable;
    }
    if answer["operation_id"] == id.as_str() && answer["new_payment_submitted"] != true {
        Answer::Good
    } else {
        Answer::Bad
    }
}

/// One tool call as an assistant follows the answer's advice: `unavailable` ("call again shortly
/// with the same operation id") is called again, at most [`TOOL_CALL_RETRIES_MAX`] times.
pub async fn call_until_answered(
    http: &reqwest::Client,
    base: &str,
    key: &str,
    id: &OperationId,
    n: usize,
) -> bool {
    for _ in 0..TOOL_CALL_RETRIES_MAX {
        match one_call(http, base, key, id, n).await {
            Answer::Unavailable => tokio::time::sleep(Duration::from_secs(1)).await,
            Answer::Good => return true,
            Answer::Bad => return false,
        }
    }
    matches!(one_call(http, base, key, id, n).await, Answer::Good)
}
