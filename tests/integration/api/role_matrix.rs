//! The role matrix: every route and tool × every kind of caller → the expected status, table-driven,
//! so no route lets a caller exceed its role. Callers: the tenant's service, assistant and on-call
//! keys; a customer holding a confirmation link and no key; no key, an invalid key, revoked and
//! expired keys; and another tenant's key of each role. Each cell runs on a fresh operation awaiting
//! approval (with a fresh confirmation link) and a fresh refund awaiting approval (of one succeeded
//! payment made before the first cell); a cell not marked as writing must leave the tenant's ledger
//! rows exactly as they were (checked on Postgres, table by table).
//!
//! To extend: add a [`Case`] to [`cases`] (a new route must be in `payonce_api::openapi::ROUTES`,
//! which [`the_matrix_covers_every_route`] and [`every_route_the_router_serves_is_in_the_route_table`]
//! hold in step with the router); a new kind of request body is a [`Body`] variant.

use super::tools::{answer_of, call_object};
use super::{TestApi, WEBHOOK_SECRET, raw_details, spawn, tenant, token_of};
use crate::support::postgres_ledger;
use crate::support::refunds::{create_refund, succeeded_payment};
use payonce_api::keys;
use payonce_ledger::Role;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::Duration;

/// Who sends the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Who {
    Service,
    Assistant,
    OnCall,
    /// The customer: holds the operation's confirmation link and the tenant app's signed assertion
    /// for the operation's customer, no key.
    Customer,
    /// Holds the confirmation link but nothing only the customer has (what an assistant can get).
    LinkHolder,
    NoKey,
    InvalidKey,
    RevokedService,
    RevokedAssistant,
    ExpiredService,
    ExpiredAssistant,
    OtherService,
    OtherAssistant,
    OtherOnCall,
}

const EVERYONE: [Who; 14] = [
    Who::Service,
    Who::Assistant,
    Who::OnCall,
    Who::Customer,
    Who::LinkHolder,
    Who::NoKey,
    Who::InvalidKey,
    Who::RevokedService,
    Who::RevokedAssistant,
    Who::ExpiredService,
    Who::ExpiredAssistant,
    Who::OtherService,
    Who::OtherAssistant,
    Who::OtherOnCall,
];

/// What a tool call's result must say (for 200 answers of tool routes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tool {
    /// Not a tool route.
    No,
    /// The tool answered about the operation.
    Answered,
    /// The tool answered `operation_not_found` (another tenant's key).
    NotFound,
}

/// One cell's expectation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Expect {
    status: u16,
    tool: Tool,
    /// May change the tenant's ledger rows (otherwise they must be unchanged).
    writes: bool,
}

/// Answers without changing the tenant's rows.
const fn ok(status: u16) -> Expect {
    Expect {
        status,
        tool: Tool::No,
        writes: false,
    }
}
/// Answers and may change the tenant's rows.
const fn writes(status: u16) -> Expect {
    Expect {
        status,
        tool: Tool::No,
        writes: true,
    }
}
const UNAUTHORIZED: Expect = ok(401);
const FORBIDDEN: Expect = ok(403);
/// Another tenant's operation looks like no operation.
const HIDDEN: Expect = ok(404);
/// A tool answer about the operation (the call is recorded, a link may be issued).
const TOOL_ANSWER: Expect = Expect {
    status: 200,
    tool: Tool::Answered,
    writes: true,
};
/// A tool answer that the operation does not exist (other tenant): nothing of ours changes.
const TOOL_NOT_FOUND: Expect = Expect {
    status: 200,
    tool: Tool::NotFound,
    writes: false,
};

/// A row's expectations, by column. `none` covers no key, an invalid key, revoked and expired keys.
#[derive(Debug, Clone, Copy)]
struct Cols {
    service: Expect,
    assistant: Expect,
    on_call: Expect,
    customer: Expect,
    /// A link without proof of being the customer.
    link_holder: Expect,
    none: Expect,
    other_service: Expect,
    other_assistant: Expect,
    other_on_call: Expect,
}

impl Cols {
    /// The same answer for everyone (public routes).
    const fn all(e: Expect) -> Cols {
        Cols {
            service: e,
            assistant: e,
            on_call: e,
            customer: e,
            link_holder: e,
            none: e,
            other_service: e,
            other_assistant: e,
            other_on_call: e,
        }
    }

    fn of(&self, who: Who) -> Expect {
        match who {
            Who::Service => self.service,
            Who::Assistant => self.assistant,
            Who::OnCall => self.on_call,
            Who::Customer => self.customer,
            Who::LinkHolder => self.link_holder,
            Who::NoKey
            | Who::InvalidKey
            | Who::RevokedService
            | Who::RevokedAssistant
            | Who::ExpiredService
            | Who::ExpiredAssistant => self.none,
            Who::OtherService => self.other_service,
            Who::OtherAssistant => self.other_assistant,
            Who::OtherOnCall => self.other_on_call,
        }
    }
}

/// The request body a case sends.
#[derive(Debug, Clone, Copy)]
enum Body {
    None,
    /// A new operation with a business key unique to the cell.
    CreateOperation,
    /// A batch of one new operation with its approval, with a business key unique to the cell.
    CreateBatch,
    /// `{details_hash, approved_by}` of the fixture operation.
    Approve,
    /// A refund of 1 from the fixture's succeeded payment, with a business key unique to the cell.
    CreateRefund,
    /// `{details_hash}` of the fixture refund.
    ApproveRefund,
    /// `POST /v1/tool-calls` in a provider format.
    ToolCall {
        format: &'static str,
        tool: &'static str,
    },
    /// MCP JSON-RPC `tools/call`.
    Mcp {
        tool: &'static str,
    },
    /// A Stripe event without a signature.
    UnsignedWebhook,
    /// An Adyen notification whose item carries no HMAC signature.
    UnsignedAdyenNotification,
    /// The confirmation page's form with the fixture's details hash.
    ConfirmForm,
    /// A tenant profile, `{display_name}`.
    Profile,
}

/// One row of the matrix.
#[derive(Debug, Clone)]
struct Case {
    method: &'static str,
    /// The route as in `payonce_api::openapi::ROUTES`; `{id}` is the fixture operation (the fixture
    /// refund under `/v1/refunds/`), `{token}` the caller's confirmation token (the real one only for
    /// the customer), `{file}` the console script's current name.
    route: &'static str,
    query: &'static str,
    body: Body,
    cols: Cols,
}

fn case(method: &'static str, route: &'static str, body: Body, cols: Cols) -> Case {
    Case {
        method,
        route,
        query: "",
        body,
        cols,
    }
}

/// The matrix.
fn cases() -> Vec<Case> {
    let public = Cols::all(ok(200));
    // Service-only writes on an operation: another tenant's service key finds nothing, other roles
    // are refused before the operation is looked up.
    let service_write = |status| Cols {
        service: writes(status),
        assistant: FORBIDDEN,
        on_call: FORBIDDEN,
        customer: UNAUTHORIZED,
        link_holder: UNAUTHORIZED,
        none: UNAUTHORIZED,
        other_service: HIDDEN,
        other_assistant: FORBIDDEN,
        other_on_call: FORBIDDEN,
    };
    let tool_cols = Cols {
        service: TOOL_ANSWER,
        assistant: TOOL_ANSWER,
        on_call: FORBIDDEN,
        customer: UNAUTHORIZED,
        link_holder: UNAUTHORIZED,
        none: UNAUTHORIZED,
        other_service: TOOL_NOT_FOUND,
        other_assistant: TOOL_NOT_FOUND,
        other_on_call: FORBIDDEN,
    };
    // Only a real link opens the page; only the customer's proof approves on it (issue 13: a link
    // alone, which an assistant could be handed, is refused with `assertion_required`).
    let link_holder_only = |customer| Cols {
        customer,
        link_holder: UNAUTHORIZED,
        ..Cols::all(HIDDEN)
    };
    // The tenant's own profile, service key only. Another tenant's service key reads and writes its
    // own tenant's (its write leaves this tenant's row unchanged, which the snapshot checks).
    let profile_read = Cols {
        service: ok(200),
        assistant: FORBIDDEN,
        on_call: FORBIDDEN,
        customer: UNAUTHORIZED,
        link_holder: UNAUTHORIZED,
        none: UNAUTHORIZED,
        other_service: ok(200),
        other_assistant: FORBIDDEN,
        other_on_call: FORBIDDEN,
    };
    let profile_write = Cols {
        service: writes(200),
        ..profile_read
    };
    let mut out = vec![
        case("get", "/v1/tenant/profile", Body::None, profile_read),
        case("put", "/v1/tenant/profile", Body::Profile, profile_write),
        case("get", "/healthz", Body::None, public),
        case("get", "/readyz", Body::None, public),
        case("get", "/metrics", Body::None, public),
        case("get", "/openapi.json", Body::None, public),
        case("get", "/static/confirm.css", Body::None, public),
        case(
            "post",
            "/v1/operations",
            Body::CreateOperation,
            Cols {
                service: writes(201),
                assistant: FORBIDDEN,
                on_call: FORBIDDEN,
                customer: UNAUTHORIZED,
                link_holder: UNAUTHORIZED,
                none: UNAUTHORIZED,
                // Created in the other tenant; nothing of ours changes.
                other_service: ok(201),
                other_assistant: FORBIDDEN,
                other_on_call: FORBIDDEN,
            },
        ),
        case(
            "post",
            "/v1/operations/batch",
            Body::CreateBatch,
            Cols {
                service: writes(200),
                assistant: FORBIDDEN,
                on_call: FORBIDDEN,
                customer: UNAUTHORIZED,
                link_holder: UNAUTHORIZED,
                none: UNAUTHORIZED,
                // Created in the other tenant; nothing of ours changes.
                other_service: ok(200),
                other_assistant: FORBIDDEN,
                other_on_call: FORBIDDEN,
            },
        ),
        case(
            "get",
            "/v1/operations/{id}",
            Body::None,
            Cols {
                service: ok(200),
                assistant: ok(200),
                on_call: ok(200),
                customer: UNAUTHORIZED,
                link_holder: UNAUTHORIZED,
                none: UNAUTHORIZED,
                other_service: HIDDEN,
                other_assistant: HIDDEN,
                other_on_call: HIDDEN,
            },
        ),
        case(
            "post",
            "/v1/operations/{id}/approval-requests",
            Body::None,
            service_write(201),
        ),
        case(
            "post",
            "/v1/operations/{id}/approve",
            Body::Approve,
            service_write(200),
        ),
        case(
            "post",
            "/v1/operations/{id}/cancel",
            Body::None,
            service_write(200),
        ),
        case(
            "post",
            "/v1/operations/{id}/execute",
            Body::None,
            Cols {
                // Awaiting approval: the answer issues a confirmation link.
                service: writes(200),
                assistant: writes(200),
                on_call: FORBIDDEN,
                customer: UNAUTHORIZED,
                link_holder: UNAUTHORIZED,
                none: UNAUTHORIZED,
                other_service: HIDDEN,
                other_assistant: HIDDEN,
                other_on_call: FORBIDDEN,
            },
        ),
        case(
            "get",
            "/v1/operations/{id}/refunds",
            Body::None,
            Cols {
                service: ok(200),
                assistant: FORBIDDEN,
                on_call: ok(200),
                customer: UNAUTHORIZED,
                link_holder: UNAUTHORIZED,
                none: UNAUTHORIZED,
                other_service: HIDDEN,
                other_assistant: FORBIDDEN,
                other_on_call: HIDDEN,
            },
        ),
        // Another tenant's service key names a payment it cannot see: not found, nothing created.
        case(
            "post",
            "/v1/refunds",
            Body::CreateRefund,
            service_write(201),
        ),
        case(
            "post",
            "/v1/refunds/{id}/approve",
            Body::ApproveRefund,
            // A person of the merchant only: never the service key that created it, never an
            // assistant, never a customer or a link.
            Cols {
                service: FORBIDDEN,
                assistant: FORBIDDEN,
                on_call: writes(200),
                customer: UNAUTHORIZED,
                link_holder: UNAUTHORIZED,
                none: UNAUTHORIZED,
                other_service: FORBIDDEN,
                other_assistant: FORBIDDEN,
                other_on_call: HIDDEN,
            },
        ),
        case(
            "post",
            "/v1/webhooks/stripe",
            Body::UnsignedWebhook,
            // Authenticated by its signature only: no key helps.
            Cols::all(ok(400)),
        ),
        case(
            "post",
            "/v1/webhooks/adyen",
            Body::UnsignedAdyenNotification,
            // Authenticated by each item's HMAC signature only: no key helps, nothing is stored.
            Cols::all(ok(400)),
        ),
        case(
            "get",
            "/confirm/{token}",
            Body::None,
            link_holder_only(ok(200)),
        ),
        case(
            "post",
            "/confirm/{token}",
            Body::ConfirmForm,
            link_holder_only(writes(200)),
        ),
    ];
    // The console authenticates by its session cookie only: no bearer key of any role opens a page
    // (401, the sign-in form) or acts (401 before the form is read); a sign-in without the sign-in
    // form's token is refused (403). The sessions themselves are tested in console.rs.
    out.push(case("get", "/static/console.css", Body::None, public));
    // The live refresh's script: the same static file for everyone (`{file}` is its current name).
    out.push(case("get", "/console/assets/{file}", Body::None, public));
    out.push(case("get", "/console/sign-in", Body::None, public));
    out.push(case(
        "post",
        "/console/sign-in",
        Body::None,
        Cols::all(FORBIDDEN),
    ));
    for route in [
        "/console",
        "/console/operations",
        "/console/operations/{id}",
        "/console/operations/{id}/export",
        "/console/resolve-many",
    ] {
        out.push(case("get", route, Body::None, Cols::all(UNAUTHORIZED)));
    }
    for route in [
        "/console/sign-out",
        "/console/operations/{id}/resolve",
        "/console/resolve-many",
        "/console/operations/{id}/approve-refund",
        "/console/operations/{id}/decline-refund",
    ] {
        out.push(case("post", route, Body::None, Cols::all(UNAUTHORIZED)));
    }
    for format in ["openai_chat", "openai_responses", "anthropic", "mcp"] {
        out.push(Case {
            query: match format {
                "openai_chat" => "?format=openai_chat",
                "openai_responses" => "?format=openai_responses",
                "anthropic" => "?format=anthropic",
                _ => "?format=mcp",
            },
            ..case(
                "get",
                "/v1/tools",
                Body::None,
                Cols {
                    service: ok(200),
                    assistant: ok(200),
                    on_call: FORBIDDEN,
                    customer: UNAUTHORIZED,
                    link_holder: UNAUTHORIZED,
                    none: UNAUTHORIZED,
                    other_service: ok(200),
                    other_assistant: ok(200),
                    other_on_call: FORBIDDEN,
                },
            )
        });
    }
    for tool in ["pay_invoice", "get_payment_status", "request_refund"] {
        for format in ["openai_chat", "openai_responses", "anthropic"] {
            out.push(case(
                "post",
                "/v1/tool-calls",
                Body::ToolCall { format, tool },
                tool_cols,
            ));
        }
        out.push(case("post", "/mcp", Body::Mcp { tool }, tool_cols));
    }
    out
}

/// The keys of every caller.
struct Keys {
    revoked_service: String,
    revoked_assistant: String,
    expired_service: String,
    expired_assistant: String,
    other_on_call: String,
}

impl Keys {
    async fn make(api: &TestApi) -> Keys {
        let other = payonce_core::id::TenantId::parse(super::OTHER_TENANT).unwrap();
        let issue = |tenant: payonce_core::id::TenantId, role, ttl: Option<Duration>| {
            let ledger = api.ledger.clone();
            async move {
                keys::issue(ledger.as_ref(), &tenant, role, "matrix", ttl, super::T0)
                    .await
                    .unwrap()
            }
        };
        let revoked_service = issue(tenant(), Role::Service, None).await;
        let revoked_assistant = issue(tenant(), Role::Assistant, None).await;
        for k in [&revoked_service, &revoked_assistant] {
            keys::revoke(
                api.ledger.as_ref(),
                &k.key_id,
                "oncall:test",
                "matrix",
                super::T0,
            )
            .await
            .unwrap();
        }
        let second = Some(Duration::from_secs(1));
        let expired_service = issue(tenant(), Role::Service, second).await;
        let expired_assistant = issue(tenant(), Role::Assistant, second).await;
        let other_on_call = issue(other, Role::OnCall, None).await;
        // Past the expiry: the api's clock is the test's.
        api.clock.advance(std::time::Duration::from_millis(1_000));
        Keys {
            revoked_service: revoked_service.secret,
            revoked_assistant: revoked_assistant.secret,
            expired_service: expired_service.secret,
            expired_assistant: expired_assistant.secret,
            other_on_call: other_on_call.secret,
        }
    }

    fn of(&self, api: &TestApi, who: Who) -> Option<String> {
        match who {
            Who::Service => Some(api.service.clone()),
            Who::Assistant => Some(api.assistant.clone()),
            Who::OnCall => Some(api.on_call.clone()),
            Who::Customer | Who::LinkHolder | Who::NoKey => None,
            Who::InvalidKey => Some(format!("po_service_{}", "0".repeat(64))),
            Who::RevokedService => Some(self.revoked_service.clone()),
            Who::RevokedAssistant => Some(self.revoked_assistant.clone()),
            Who::ExpiredService => Some(self.expired_service.clone()),
            Who::ExpiredAssistant => Some(self.expired_assistant.clone()),
            Who::OtherService => Some(api.other_service.clone()),
            Who::OtherAssistant => Some(api.other_assistant.clone()),
            Who::OtherOnCall => Some(self.other_on_call.clone()),
        }
    }
}

/// A fresh operation awaiting approval and its confirmation token; the succeeded payment and a fresh
/// refund of it awaiting approval.
struct Fixture {
    id: String,
    details_hash: String,
    token: String,
    paid: String,
    refund: String,
    refund_hash: String,
}

/// Whether a case's body proposes a refund (the `request_refund` tool).
fn proposes(body: Body) -> bool {
    matches!(
        body,
        Body::ToolCall {
            tool: "request_refund",
            ..
        } | Body::Mcp {
            tool: "request_refund"
        }
    )
}

/// A tool's arguments: the fixture operation, or a refund request of the fixture's payment for an
/// amount unique to the cell.
fn tool_arguments(tool: &str, fixture: &Fixture, cell: usize) -> Value {
    if tool == "request_refund" {
        json!({"payment_operation_id": fixture.paid, "amount": cell, "reason": "requested_by_customer"})
    } else {
        json!({"operation_id": fixture.id})
    }
}

/// The tenant's rows, one digest per table (an unchanged digest: an unchanged table). A digest is the
/// row count and the sum of the rows' `xmin`, the transaction that wrote each row version: an insert
/// or a delete changes the count, and an update writes a new version under the updating
/// transaction's id (even one that leaves every value as it was), so any write by the cell shows.
async fn snapshot(db: &sqlx::PgPool) -> Vec<(&'static str, String)> {
    let tenant_ops = "operation_id IN (SELECT id FROM operations WHERE tenant_id = 'acme')";
    let tables = [
        ("operations", "tenant_id = 'acme'".to_string()),
        ("operation_events", tenant_ops.to_string()),
        ("approvals", tenant_ops.to_string()),
        ("approval_links", tenant_ops.to_string()),
        ("tool_calls", "tenant_id = 'acme'".to_string()),
        ("tool_call_keys", "tenant_id = 'acme'".to_string()),
        ("used_assertions", "tenant_id = 'acme'".to_string()),
        ("approval_codes", tenant_ops.to_string()),
        ("approval_notices", tenant_ops.to_string()),
        ("tenant_verification", "tenant_id = 'acme'".to_string()),
        ("tenant_profiles", "tenant_id = 'acme'".to_string()),
        // No route writes a tenant's processor (the CLI is the operator's): every cell is checked.
        ("tenant_processors", "tenant_id = 'acme'".to_string()),
        ("operation_cards", tenant_ops.to_string()),
        ("processor_events", "true".to_string()),
    ];
    // One round trip; per table a count and an order-free sum of system columns, so a cell costs an
    // index or heap scan, not the text of every row the tenant has (quadratic over the matrix).
    let union = tables
        .iter()
        .map(|(table, filter)| {
            format!(
                "SELECT '{table}' AS name, count(*)::text || ':' || \
                 coalesce(sum(t.xmin::text::bigint), 0)::text AS digest FROM {table} t WHERE {filter}"
            )
        })
        .collect::<Vec<_>>()
        .join(" UNION ALL ");
    // Table names and filters are this function's own constants.
    let rows: Vec<(String, String)> = sqlx::query_as(sqlx::AssertSqlSafe(union))
        .fetch_all(db)
        .await
        .unwrap();
    tables
        .iter()
        .map(|(table, _)| {
            let digest = rows
                .iter()
                .find(|(name, _)| name == table)
                .map(|(_, d)| d.clone())
                .unwrap_or_else(|| panic!("no digest for {table}"));
            (*table, digest)
        })
        .collect()
}

/// Sends one cell's request; returns (status, body).
async fn send(
    api: &TestApi,
    case: &Case,
    who: Who,
    key: Option<&str>,
    fixture: &Fixture,
    cell: usize,
) -> (u16, String) {
    let token = if matches!(who, Who::Customer | Who::LinkHolder) {
        fixture.token.clone()
    } else {
        // Anyone else guesses: a well-formed token that is not the link's.
        "ab".repeat(32)
    };
    let id = if case.route.starts_with("/v1/refunds/") {
        &fixture.refund
    } else {
        &fixture.id
    };
    let script = payonce_api::console::live::script_path();
    let file = script.trim_start_matches(payonce_api::console::live::ASSETS_PREFIX);
    let path = case
        .route
        .replace("{id}", id)
        .replace("{token}", &token)
        .replace("{file}", file);
    // The customer arrives as the tenant's app sends them: signed in, with an assertion.
    let assertion = (who == Who::Customer).then(|| api.assertion(&fixture.id, "cus_test", 60_000));
    let path = match (&assertion, case.route.starts_with("/confirm/"), case.method) {
        (Some(a), true, "get") => format!("{path}?assertion={a}"),
        _ => path,
    };
    let method = reqwest::Method::from_bytes(case.method.to_uppercase().as_bytes()).unwrap();
    let mut req = api
        .http
        .request(method, format!("{}{path}{}", api.base, case.query));
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    req = match case.body {
        Body::None if case.method == "post" => req.json(&json!({})),
        Body::None => req,
        Body::CreateOperation => {
            let invoice = format!("INV-M{cell}");
            req.json(&json!({"business_key": format!("invoice:{invoice}:pay"),
                             "details": raw_details(&invoice, 2048)}))
        }
        Body::CreateBatch => {
            let invoice = format!("INV-B{cell}");
            let details = raw_details(&invoice, 2048);
            let hash = payonce_core::details::Details::parse(
                &serde_json::from_value(details.clone()).unwrap(),
            )
            .unwrap()
            .hash();
            req.json(&json!({"operations": [{
                "business_key": format!("invoice:{invoice}:pay"), "details": details,
                "approval": {"details_hash": hash.as_str(), "approved_by": "mandate:cus_test"},
            }]}))
        }
        Body::Approve => req.json(
            &json!({"details_hash": fixture.details_hash, "approved_by": "customer:cus_test"}),
        ),
        Body::CreateRefund => req.json(&json!({"business_key": format!("refund:M{cell}"),
            "payment_operation_id": fixture.paid, "amount": 1, "reason": "duplicate"})),
        Body::ApproveRefund => req.json(&json!({"details_hash": fixture.refund_hash})),
        Body::ToolCall { format, tool } => {
            let call = call_object(
                format,
                &format!("call_{cell}"),
                tool,
                &tool_arguments(tool, fixture, cell),
            );
            req.json(&json!({"format": format, "call": call}))
        }
        Body::Mcp { tool } => req
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-06-18")
            .json(
                &json!({"jsonrpc": "2.0", "id": cell, "method": "tools/call",
                          "params": {"name": tool, "arguments": tool_arguments(tool, fixture, cell)}}),
            ),
        Body::UnsignedWebhook => req.json(&json!({"id": format!("evt_m{cell}"),
            "object": "event", "type": "payment_intent.succeeded",
            "data": {"object": {"id": "pi_x", "metadata": {"payonce_operation_id": fixture.id}}}})),
        Body::UnsignedAdyenNotification => req.json(&json!({"live": "false", "notificationItems": [
            {"NotificationRequestItem": {"additionalData": {}, "amount": {"currency": "USD", "value": 2048},
             "eventCode": "AUTHORISATION", "merchantAccountCode": "PayonceECOM",
             "merchantReference": fixture.id, "pspReference": format!("PSP{cell:013}"), "success": "true"}}]})),
        Body::Profile => req.json(&json!({"display_name": format!("Profile {cell}")})),
        Body::ConfirmForm => match &assertion {
            Some(a) => req.form(&[
                ("details_hash", fixture.details_hash.as_str()),
                ("assertion", a.as_str()),
            ]),
            None => req.form(&[("details_hash", fixture.details_hash.as_str())]),
        },
    };
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.text().await.unwrap())
}

/// The tool outcome in a 200 answer of a tool route.
fn tool_outcome(body: Body, text: &str, cell: usize) -> Tool {
    let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    let (answer, is_error) = match body {
        Body::ToolCall { format, .. } => answer_of(format, &v, &format!("call_{cell}")),
        Body::Mcp { .. } => answer_of("mcp", &v["result"], ""),
        _ => return Tool::No,
    };
    if is_error {
        assert_eq!(answer["error"]["code"], "operation_not_found", "{text}");
        Tool::NotFound
    } else {
        assert!(answer["operation_id"].is_string(), "{text}");
        Tool::Answered
    }
}

#[tokio::test]
async fn no_route_or_tool_lets_a_caller_exceed_its_role() {
    let (ledger, url) = postgres_ledger().await;
    let db = sqlx::PgPool::connect(&url).await.unwrap();
    let api = spawn(ledger).await;
    let keys = Keys::make(&api).await;
    let profile = payonce_ledger::profiles::TenantProfile {
        tenant: super::tenant(),
        display_name: "Acme".into(),
        support_url: None,
        support_email: None,
        updated_at: super::T0,
    };
    api.ledger.profiles().set_profile(&profile).await.unwrap();
    // Before any cell: no other operation is ready, so the fixture's claim takes its own payment.
    let paid = succeeded_payment(&api.ledger, "INV-PAID", 1_000_000, super::T0).await;
    // A payment of its own for every cell that proposes a refund: a payment has at most
    // `PROPOSALS_OPEN_MAX` proposals awaiting approval, and the cells leave theirs open.
    let proposing = cases().iter().filter(|c| proposes(c.body)).count() * EVERYONE.len();
    let mut to_propose_on = Vec::new();
    for i in 0..proposing {
        let invoice = format!("INV-PROPOSE{i}");
        to_propose_on.push(succeeded_payment(&api.ledger, &invoice, 1_000_000, super::T0).await);
    }
    let mut to_propose_on = to_propose_on.into_iter();
    let mut failures = Vec::new();
    let mut cell = 0_usize;
    for case in cases() {
        for who in EVERYONE {
            cell += 1;
            let op = api.create(&format!("INV-F{cell}"), 2048).await;
            let refund =
                create_refund(&api.ledger, &paid, &format!("refund:F{cell}"), 1, super::T0)
                    .await
                    .unwrap()
                    .operation;
            let paid = if proposes(case.body) {
                to_propose_on.next().unwrap().id
            } else {
                paid.id.clone()
            };
            let fixture = Fixture {
                id: op["id"].as_str().unwrap().to_string(),
                details_hash: op["details_hash"].as_str().unwrap().to_string(),
                token: token_of(&api.link(op["id"].as_str().unwrap()).await).to_string(),
                paid: paid.as_str().to_string(),
                refund: refund.id.as_str().to_string(),
                refund_hash: refund.details_hash.as_str().to_string(),
            };
            let expect = case.cols.of(who);
            let before = snapshot(&db).await;
            let key = keys.of(&api, who);
            let (status, text) = send(&api, &case, who, key.as_deref(), &fixture, cell).await;
            let after = snapshot(&db).await;
            let what = format!(
                "{} {}{} {:?} as {who:?}",
                case.method, case.route, case.query, case.body
            );
            if status != expect.status {
                failures.push(format!(
                    "{what}: {status}, expected {}: {text}",
                    expect.status
                ));
                continue;
            }
            if status == 200 && expect.tool != Tool::No {
                let got = tool_outcome(case.body, &text, cell);
                if got != expect.tool {
                    failures.push(format!(
                        "{what}: tool {got:?}, expected {:?}: {text}",
                        expect.tool
                    ));
                }
            }
            if !expect.writes {
                let changed: Vec<&str> = before
                    .iter()
                    .zip(&after)
                    .filter(|(b, a)| b != a)
                    .map(|(b, _)| b.0)
                    .collect();
                if !changed.is_empty() {
                    failures.push(format!("{what}: changed {changed:?} ({status})"));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {cell} cells wrong:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // The webhook secret is configured: the 400s above are signature refusals, not a missing secret.
    assert!(!WEBHOOK_SECRET.is_empty());
    api.stop().await;
}

/// The routes the matrix has rows for, as (method, route).
fn matrix_routes() -> BTreeSet<(String, String)> {
    cases()
        .iter()
        .map(|c| (c.method.to_string(), c.route.to_string()))
        .collect()
}

#[test]
fn the_matrix_covers_every_route() {
    let served: BTreeSet<(String, String)> = payonce_api::openapi::ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    let listed = matrix_routes();
    let missing: Vec<_> = served.difference(&listed).collect();
    let stale: Vec<_> = listed.difference(&served).collect();
    assert!(
        missing.is_empty(),
        "routes without a row in the role matrix (tests/integration/api/role_matrix.rs): {missing:?}"
    );
    assert!(
        stale.is_empty(),
        "role matrix rows for routes the router does not serve: {stale:?}"
    );
}

/// The first argument of each `.route(` / `.route_service(` call in `source`, and the HTTP methods
/// named in the rest of the call (`get(…)`, `.post(…)`; none for a service).
fn routes_in(source: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    for opener in [".route(", ".route_service("] {
        let mut rest = source;
        while let Some(at) = rest.find(opener) {
            let call = &rest[at + opener.len()..];
            // The call's text up to its closing parenthesis.
            let mut depth = 1_i32;
            let end = call
                .char_indices()
                .find_map(|(i, c)| {
                    depth += match c {
                        '(' => 1,
                        ')' => -1,
                        _ => 0,
                    };
                    (depth == 0).then_some(i)
                })
                .expect("balanced parentheses");
            let args = &call[..end];
            let (path, handlers) = args.split_once(',').unwrap_or((args, ""));
            let methods = ["get", "post", "put", "patch", "delete"]
                .iter()
                .filter(|m| {
                    handlers.match_indices(&format!("{m}(")).any(|(i, _)| {
                        i == 0
                            || !handlers[..i]
                                .chars()
                                .last()
                                .is_some_and(|c| c.is_alphanumeric() || c == '_')
                    })
                })
                .map(|m| m.to_string())
                .collect();
            out.push((path.trim().to_string(), methods));
            rest = &call[end..];
        }
    }
    out
}

/// Every `.rs` file under `dir`, module folders included.
fn rust_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}

#[test]
fn every_route_the_router_serves_is_in_the_route_table() {
    // Paths given by a constant rather than a literal: name each constant here.
    let constants = [
        ("PATH", payonce_api::mcp::PATH),
        ("page::STYLESHEET_PATH", payonce_api::page::STYLESHEET_PATH),
    ];
    let table = payonce_api::openapi::ROUTES;
    let mut seen = 0;
    for path in rust_files(&super::repo_root().join("api/src")) {
        let source = std::fs::read_to_string(&path).unwrap();
        for (arg, methods) in routes_in(&source) {
            // One route may serve several methods, each a row of the table.
            seen += methods.len().max(1);
            let route =
                if let Some(literal) = arg.strip_prefix('"').and_then(|a| a.strip_suffix('"')) {
                    literal.to_string()
                } else {
                    constants
                        .iter()
                        .find(|(name, _)| *name == arg)
                        .unwrap_or_else(|| {
                            panic!(
                                "{}: route path {arg} is not a literal; name it in this test",
                                path.display()
                            )
                        })
                        .1
                        .to_string()
                };
            assert!(
                table.iter().any(|(_, p)| *p == route),
                "{}: the router serves {route} but payonce_api::openapi::ROUTES (and so the role matrix) does not list it",
                path.display()
            );
            for m in methods {
                assert!(
                    table.contains(&(m.as_str(), route.as_str())),
                    "{}: the router serves {m} {route} but payonce_api::openapi::ROUTES does not list it",
                    path.display()
                );
            }
        }
    }
    assert!(
        seen >= table.len() - 1,
        "the source scan found only {seen} routes"
    );
}

#[test]
fn the_route_scan_reads_methods_and_paths() {
    let src = r#"Router::new().route("/a/{id}", get(show).post(submit)).route(
            "/b",
            post(webhooks::stripe).layer(DefaultBodyLimit::max(5)),
        ).route_service(PATH, service)"#;
    assert_eq!(
        routes_in(src),
        vec![
            (
                "\"/a/{id}\"".to_string(),
                vec!["get".to_string(), "post".to_string()]
            ),
            ("\"/b\"".to_string(), vec!["post".to_string()]),
            ("PATH".to_string(), vec![]),
        ]
    );
}
