//! One operation's page and the resolutions: its facts, the decision aid for an operation waiting for
//! a person (the runbook's reason, the ledger's and the processor's facts side by side, the raw
//! error), its refunds, the processor object's summary, the resolve form and the evidence chain; and
//! the review and result pages of resolving several operations at once. A read-only key sees every
//! fact and no form that changes anything.

use super::{age, layout, state_badge, utc};
use crate::console::advice::Reason;
use crate::console::evidence::TimelineEntry;
use maud::{Markup, html};
use payonce_core::state::Status;
use payonce_ledger::Operation;

/// The resolve form's state: empty, or refused with what on-call typed.
#[derive(Debug, Clone, Default)]
pub struct ResolveForm {
    /// The refusal's code and message.
    pub error: Option<(String, String)>,
    /// The outcome chosen.
    pub outcome: String,
    /// The reference typed.
    pub reference: String,
    /// The reason typed.
    pub reason: String,
}

/// The processor's side of the facts.
#[derive(Debug, Clone, Default)]
pub struct ProcessorFacts {
    /// Where they come from (read now, as recorded, none).
    pub source: String,
    /// Its status.
    pub status: Option<String>,
    /// Amount and currency, as people read them.
    pub amount: Option<String>,
    /// Its customer.
    pub customer: Option<String>,
    /// Its id.
    pub reference: Option<String>,
    /// The operation id its metadata carries.
    pub operation_id: Option<String>,
}

impl ProcessorFacts {
    /// The facts of a processor object (a Stripe PaymentIntent or Refund), none when there is none.
    pub fn of(source: String, object: Option<&serde_json::Value>) -> ProcessorFacts {
        let Some(o) = object else {
            return ProcessorFacts {
                source,
                ..ProcessorFacts::default()
            };
        };
        let text = |v: &serde_json::Value| v.as_str().map(str::to_string);
        let amount = match (o["amount"].as_i64(), o["currency"].as_str()) {
            (Some(a), Some(c)) => Some(
                payonce_core::money::Currency::parse(c)
                    .map(|cur| cur.display_total(a))
                    .unwrap_or_else(|_| format!("{a} {c} (minor units)")),
            ),
            _ => None,
        };
        ProcessorFacts {
            source,
            status: text(&o["status"]),
            amount,
            customer: text(&o["customer"]),
            reference: text(&o["id"]),
            operation_id: text(&o["metadata"]["payonce_operation_id"]),
        }
    }
}

/// What on-call decides with on a `needs_attention` or `unknown` operation.
#[derive(Debug, Clone)]
pub struct Attention {
    /// Why it needs attention (`needs_attention` only).
    pub reason: Option<Reason>,
    /// The processor's facts.
    pub processor: ProcessorFacts,
    /// The raw error text: the newest event detail, then the row's failure message.
    pub raw_error: Vec<String>,
}

/// What the operation page shows besides the row.
#[derive(Debug, Clone, Default)]
pub struct Extras {
    /// The decision aid, when the operation waits for a person or a lookup.
    pub attention: Option<Attention>,
    /// Requests the processor may have received (refused connections are not).
    pub submissions_seen: i64,
    /// The resolve form's state.
    pub resolve: ResolveForm,
    /// Signed in with a read-only key: no forms that change anything.
    pub read_only: bool,
}

fn side_by_side(op: &Operation, p: &ProcessorFacts) -> Markup {
    let none = "—";
    let or_none = |v: &Option<String>| v.clone().unwrap_or_else(|| none.to_string());
    html! {
        table id="side-by-side" {
            caption { "Processor facts: " span id="processor-source" { (p.source) } }
            thead { tr { th scope="col" { "Fact" } th scope="col" { "Ledger" } th scope="col" { "Processor" } } }
            tbody {
                tr { th scope="row" { "Status" } td id="ledger-status" { (op.status.as_str()) } td id="processor-status" { (or_none(&p.status)) } }
                tr { th scope="row" { "Amount" } td { (op.details.money().display()) } td id="processor-amount" { (or_none(&p.amount)) } }
                tr { th scope="row" { "Customer" } td { (op.details.customer()) } td { (or_none(&p.customer)) } }
                tr { th scope="row" { "Reference" } td.mono { (op.external_ref.as_deref().unwrap_or(none)) } td.mono { (or_none(&p.reference)) } }
                tr { th scope="row" { "Operation id" } td.mono { (op.id.as_str()) } td.mono { (or_none(&p.operation_id)) } }
            }
        }
    }
}

fn attention_section(op: &Operation, a: &Attention) -> Markup {
    html! {
        section id="attention" {
            h2 { @if a.reason.is_some() { "Why it needs attention" } @else { "Being checked" } }
            @if let Some(reason) = a.reason {
                p id="attention-reason" { strong { (reason.sentence()) } }
                div id="advice" {
                    h3 { "What the runbook says" }
                    @let advice = reason.advice();
                    @for line in advice.iter().filter(|l| !l.starts_with("- ")) { p { (line) } }
                    @let steps: Vec<&String> = advice.iter().filter(|l| l.starts_with("- ")).collect();
                    @if !steps.is_empty() {
                        ul { @for step in steps { li { (step.trim_start_matches("- ")) } } }
                    }
                }
            }
            (side_by_side(op, &a.processor))
            @if !a.raw_error.is_empty() {
                details id="raw-error" {
                    summary { "Raw error" }
                    @for e in &a.raw_error { pre { (e) } }
                }
            }
        }
    }
}

/// One operation: facts, refunds (`console::refunds`), processor summary, timeline, resolve form.
pub fn operation(
    csrf: &str,
    op: &Operation,
    processor: Option<&serde_json::Value>,
    refunds: Markup,
    timeline: &[TimelineEntry],
    extras: &Extras,
    now_ms: i64,
) -> Markup {
    let id = op.id.as_str();
    layout(
        id,
        Some(csrf),
        html! {
            (facts_section(op, extras, now_ms))
            @if let Some(a) = &extras.attention { (attention_section(op, a)) }
            (refunds)
            @if let Some(summary) = processor {
                section {
                    h2 { "Processor object (summary)" }
                    pre id="processor" { (serde_json::to_string_pretty(summary).unwrap_or_default()) }
                }
            }
            @if op.status == Status::NeedsAttention || op.status == Status::Unknown {
                (resolve_section(csrf, id, extras))
            }
            (timeline_section(timeline))
        },
    )
}

/// The operation's heading, its reason in a sentence, its facts and the export link.
fn facts_section(op: &Operation, extras: &Extras, now_ms: i64) -> Markup {
    let d = &op.details;
    let id = op.id.as_str();
    html! {
        section {
            h1 { "Operation " code id="operation-id" { (id) } " " (state_badge(op.status.as_str())) }
            @if let Some(reason) = extras.attention.as_ref().and_then(|a| a.reason) {
                p id="reason-lead" { (reason.sentence()) }
            }
            table id="facts" {
                tr { th { "Business key" } td { (op.business_key.as_str()) } }
                tr { th { "Kind" } td { (d.kind().as_str()) } }
                tr { th { "Priority" } td id="priority" { (op.priority.as_str()) } }
                @if let Some(at) = op.not_before {
                    tr { th { "Scheduled for" } td id="not-before" { (scheduled(at.as_millis(), now_ms)) } }
                }
                tr { th { "Amount" } td { (d.money().display()) } }
                tr { th { "Customer" } td { (d.customer()) } }
                tr { th { "Invoice" } td { (d.invoice()) } }
                tr { th { "Payment method" } td { (d.payment_method()) } }
                tr { th { "Details hash" } td.mono { (op.details_hash.as_str()) } }
                tr { th { "Idempotency key" } td.mono { (op.idempotency_key.as_str()) } }
                tr { th { "Attempts" } td { (op.attempt) } }
                tr { th { "Requests the processor may have received" } td id="submissions" { (extras.submissions_seen) } }
                tr { th { "Processor reference" } td.mono { (op.external_ref.as_deref().unwrap_or("none")) } }
                tr { th { "Failure" } td { (op.failure_code.as_deref().unwrap_or("")) } }
                tr { th { "Created / updated" } td { (utc(op.created_at.as_millis())) " / " (utc(op.updated_at.as_millis())) " (" (age(now_ms - op.updated_at.as_millis())) " ago)" } }
            }
            p { a id="export" href=(format!("/console/operations/{id}/export")) { "Export the evidence chain (JSON)" } }
        }
    }
}

/// A `not_before` as on-call reads it: the instant, and how far off it is (or that it has come).
fn scheduled(at_ms: i64, now_ms: i64) -> String {
    if at_ms > now_ms {
        format!("{} (in {})", utc(at_ms), age(at_ms - now_ms))
    } else {
        format!("{} (due {} ago)", utc(at_ms), age(now_ms - at_ms))
    }
}

/// The resolve section of an operation waiting for a person: the form, or (read-only key) why
/// there is none.
fn resolve_section(csrf: &str, id: &str, extras: &Extras) -> Markup {
    let form = &extras.resolve;
    html! {
        @if extras.read_only {
            section {
                h2 { "Resolve" }
                p id="read-only" { "You signed in with a read-only key: you can see everything, and resolve nothing. Ask an on-call person with a full key to resolve it." }
            }
        } @else {
            section {
                h2 { "Resolve" }
                p { "Same rules as " code { "payonce reconciler resolve" } ": check the processor first; the reason is recorded with your name." }
                (resolve_error(form))
                form method="post" action=(format!("/console/operations/{id}/resolve")) id="resolve" {
                    input type="hidden" name="csrf" value=(csrf);
                    div { label for="as" { "Outcome" }
                        select id="as" name="as" {
                            option value="failed" selected[form.outcome == "failed"] { "failed (no payment happened)" }
                            option value="succeeded" selected[form.outcome == "succeeded"] { "succeeded (give the processor reference)" }
                            option value="retry" selected[form.outcome == "retry"] { "retry with the same key" }
                        }
                    }
                    div { label for="reference" { "Processor reference (for succeeded)" } input id="reference" name="reference" size="40" value=(form.reference); }
                    div { label for="reason" { "Reason (required)" } (reason_field(form)) }
                    p { button type="submit" id="resolve-submit" { "Resolve" } }
                }
            }
        }
    }
}

/// A refused resolution's message and code, above the form that was refused.
fn resolve_error(form: &ResolveForm) -> Markup {
    html! {
        @if let Some((code, message)) = &form.error {
            div.error id="resolve-error" role="alert" {
                p { (message) }
                p { "Error code: " code id="error-code" { (code) } }
            }
        }
    }
}

/// The reason's text area, marked invalid (and pointing at the message) after a refusal.
fn reason_field(form: &ResolveForm) -> Markup {
    html! {
        @if form.error.is_some() {
            textarea id="reason" name="reason" aria-invalid="true" aria-describedby="resolve-error" { (form.reason) }
        } @else {
            textarea id="reason" name="reason" { (form.reason) }
        }
    }
}

/// The evidence chain as a table, oldest first.
fn timeline_section(timeline: &[TimelineEntry]) -> Markup {
    html! {
        section {
            h2 { "Evidence chain" }
            table id="timeline" {
                thead { tr { th { "When" } th { "What" } th { "Actor" } th { "Detail" } } }
                tbody {
                    @for e in timeline {
                        tr class=(format!("entry {}", e.kind)) {
                            td { (utc(e.at_ms)) }
                            td { (e.what) }
                            td { (e.actor) }
                            td { (e.detail) }
                        }
                    }
                }
            }
        }
    }
}

/// The review before resolving several operations at once: each one's reason and facts, then one
/// form (`failed` or `retry`, one reason) for all of them.
pub fn resolve_many(
    csrf: &str,
    reviewed: &[crate::console::bulk::Reviewed],
    form: &ResolveForm,
    read_only: bool,
) -> Markup {
    let reason = reviewed.first().map(|r| r.reason);
    layout(
        "Resolve together",
        Some(csrf),
        html! {
            section {
                h1 { "Resolve " (reviewed.len()) " operations together" }
                @if let Some(reason) = reason {
                    p id="attention-reason" { strong { (reason.sentence()) } }
                    div id="advice" {
                        h2 { "What the runbook says" }
                        @for line in reason.advice() { p { (line) } }
                    }
                }
            }
            @for r in reviewed {
                section.reviewed {
                    h2 { a href=(format!("/console/operations/{}", r.op.id)) { code { (r.op.id.as_str()) } } " " (state_badge(r.op.status.as_str())) }
                    @if let Some(a) = &r.attention { (side_by_side(&r.op, &a.processor)) }
                }
            }
            section {
                h2 { "One resolution for all of them" }
                @if read_only {
                    p id="read-only" { "You signed in with a read-only key: you can see everything, and resolve nothing." }
                } @else {
                    (resolve_error(form))
                    form method="post" action="/console/resolve-many" id="resolve-many" {
                        input type="hidden" name="csrf" value=(csrf);
                        @for r in reviewed { input type="hidden" name="id" value=(r.op.id.as_str()); }
                        div { label for="as" { "Outcome (the same for every operation; succeeded needs each one's reference, so resolve those one by one)" }
                            select id="as" name="as" {
                                option value="failed" selected[form.outcome == "failed"] { "failed (no payment happened)" }
                                option value="retry" selected[form.outcome == "retry"] { "retry with the same key" }
                            }
                        }
                        div { label for="reason" { "Reason (required; recorded on each operation)" } (reason_field(form)) }
                        p { button type="submit" id="resolve-many-submit" { "Resolve all " (reviewed.len()) } }
                    }
                }
            }
        },
    )
}

/// What a bulk resolution did, one row per operation.
pub fn resolved_many(
    csrf: &str,
    results: &[(payonce_core::id::OperationId, Result<String, String>)],
) -> Markup {
    layout(
        "Resolved",
        Some(csrf),
        html! {
            section {
                h1 { "Resolved" }
                table id="resolved-many" {
                    thead { tr { th scope="col" { "Operation" } th scope="col" { "Now" } } }
                    tbody {
                        @for (id, outcome) in results {
                            tr {
                                td { a.mono href=(format!("/console/operations/{id}")) { (id.as_str()) } }
                                @match outcome {
                                    Ok(status) => td { (state_badge(status)) },
                                    Err(why) => td.error { (why) },
                                }
                            }
                        }
                    }
                }
                p { a href="/console/operations?status=needs_attention" { "Back to needs_attention" } }
            }
        },
    )
}
