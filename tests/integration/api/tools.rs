//! The assistant's tools over `/v1/tool-calls` in every provider shape: concurrency on one operation,
//! regenerated calls, refused arguments, and the answer for every state.

use super::{TestApi, spawn, spawn_on_postgres, tenant};
use crate::support::rows;
use crate::support::{recording, sqlite_ledger};
use payonce_api::confirm::OPEN_LINKS_MAX;
use payonce_core::clock::Clock;
use payonce_core::id::OperationId;
use payonce_ledger::Recorded;
use payonce_ledger::{Declined, Escalate, Fence, LeaseHolder, Paid};
use serde_json::{Value, json};
use std::time::Duration;

/// The provider's call object for `name(args)` in `format`, with call id `call_id`.
pub fn call_object(format: &str, call_id: &str, name: &str, args: &Value) -> Value {
    match format {
        "openai_chat" => {
            json!({"id": call_id, "type": "function", "function": {"name": name, "arguments": args.to_string()}})
        }
        "openai_responses" => {
            json!({"type": "function_call", "id": format!("fc_{call_id}"), "call_id": call_id,
                                     "name": name, "arguments": args.to_string(), "status": "completed"})
        }
        "anthropic" => json!({"type": "tool_use", "id": call_id, "name": name, "input": args}),
        "mcp" => json!({"name": name, "arguments": args}),
        other => panic!("unknown format {other}"),
    }
}

/// The structured answer inside a provider's tool result, and whether it is a tool error.
pub fn answer_of(format: &str, result: &Value, call_id: &str) -> (Value, bool) {
    let (text, is_error) = match format {
        "openai_chat" => {
            assert_eq!(result["role"], "tool");
            assert_eq!(result["tool_call_id"], call_id);
            (result["content"].as_str().unwrap(), None)
        }
        "openai_responses" => {
            assert_eq!(result["type"], "function_call_output");
            assert_eq!(result["call_id"], call_id);
            (result["output"].as_str().unwrap(), None)
        }
        "anthropic" => {
            assert_eq!(result["type"], "tool_result");
            assert_eq!(result["tool_use_id"], call_id);
            (
                result["content"].as_str().unwrap(),
                result["is_error"].as_bool(),
            )
        }
        "mcp" => (
            result["content"][0]["text"].as_str().unwrap(),
            result["isError"].as_bool(),
        ),
        other => panic!("unknown format {other}"),
    };
    let answer: Value = serde_json::from_str(text).unwrap();
    let is_error = is_error.unwrap_or_else(|| answer.get("error").is_some());
    (answer, is_error)
}

/// Runs one tool call through `/v1/tool-calls`; returns the structured answer and the error flag.
pub async fn call_tool(
    api: &TestApi,
    key: &str,
    format: &str,
    call_id: &str,
    name: &str,
    args: Value,
) -> (Value, bool) {
    let r = api
        .post(
            "/v1/tool-calls",
            key,
            json!({"format": format, "call": call_object(format, call_id, name, &args)}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    answer_of(format, &r.json(), call_id)
}

const FORMATS: [&str; 4] = ["openai_chat", "openai_responses", "anthropic", "mcp"];

#[tokio::test]
async fn fifty_concurrent_tool_calls_and_executes_give_one_operation_unchanged() {
    let api = spawn_on_postgres().await;
    let op = api.create_ready("INV-50").await;
    let id = op["id"].as_str().unwrap().to_string();
    let before = api
        .get(&format!("/v1/operations/{id}"), &api.service)
        .await
        .json();
    let started = std::time::Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    let api = std::sync::Arc::new(api);
    for i in 0..50 {
        let api = api.clone();
        let id = id.clone();
        tasks.spawn(async move {
            if i % 5 == 4 {
                let r = api
                    .post(
                        &format!("/v1/operations/{id}/execute"),
                        &api.assistant,
                        json!({}),
                    )
                    .await;
                assert_eq!(r.status, 200, "{}", r.text);
                return r.json();
            }
            let format = FORMATS[i % FORMATS.len()];
            let tool = if i % 2 == 0 {
                "pay_invoice"
            } else {
                "get_payment_status"
            };
            let (answer, is_error) = call_tool(
                &api,
                &api.assistant,
                format,
                &format!("call_{i}"),
                tool,
                json!({"operation_id": id}),
            )
            .await;
            assert!(!is_error, "{answer}");
            answer
        });
    }
    let answers = tasks.join_all().await;
    let elapsed = started.elapsed();
    eprintln!("50 concurrent tool calls/executes on one operation: {elapsed:?}");
    assert_eq!(answers.len(), 50);
    for a in &answers {
        assert_eq!(a["operation_id"], id.as_str());
        assert_eq!(a["outcome"], "pending");
        assert_eq!(a["status"], "ready");
        assert_eq!(a["new_payment_submitted"], false);
        assert_eq!(
            a["message"], answers[0]["message"],
            "every answer says the same"
        );
    }
    assert_eq!(api.operation_count().await, 1, "no new operation rows");
    let after = api
        .get(&format!("/v1/operations/{id}"), &api.service)
        .await
        .json();
    assert_eq!(before, after, "the operation is unchanged, events included");
    let calls = api
        .ledger
        .tool_calls(&tenant(), &OperationId::parse(&id).unwrap())
        .await
        .unwrap();
    assert_eq!(
        calls.len(),
        40,
        "every tool call is recorded (executes are not tool calls)"
    );
    if let Ok(api) = std::sync::Arc::try_unwrap(api) {
        api.stop().await;
    }
}

#[tokio::test]
async fn a_regenerated_call_with_a_new_provider_id_returns_the_same_operation() {
    let api = spawn(sqlite_ledger().await).await;
    let op = api.create_ready("INV-51").await;
    let id = op["id"].as_str().unwrap();
    let args = json!({"operation_id": id});
    let (first, _) = call_tool(
        &api,
        &api.assistant,
        "anthropic",
        "toolu_01A",
        "pay_invoice",
        args.clone(),
    )
    .await;
    let (second, _) = call_tool(
        &api,
        &api.assistant,
        "anthropic",
        "toolu_01B",
        "pay_invoice",
        args.clone(),
    )
    .await;
    let (third, _) = call_tool(
        &api,
        &api.assistant,
        "openai_chat",
        "call_abc",
        "pay_invoice",
        args,
    )
    .await;
    assert_eq!(first, second);
    assert_eq!(first, third);
    assert_eq!(api.operation_count().await, 1);
    let calls = api
        .ledger
        .tool_calls(&tenant(), &OperationId::parse(id).unwrap())
        .await
        .unwrap();
    let ids: Vec<(&str, &str)> = calls
        .iter()
        .map(|(p, c, _)| (p.as_str(), c.as_deref().unwrap_or("")))
        .collect();
    assert_eq!(
        ids,
        [
            ("anthropic", "toolu_01A"),
            ("anthropic", "toolu_01B"),
            ("openai_chat", "call_abc")
        ],
        "provider ids are recorded for correlation, never as identity"
    );
    api.stop().await;
}

#[tokio::test]
async fn arguments_beyond_operation_id_and_bad_calls_are_refused() {
    let api = spawn(sqlite_ledger().await).await;
    let op = api.create("INV-52", 2048).await;
    let id = op["id"].as_str().unwrap();
    for format in FORMATS {
        let (a, is_error) = call_tool(
            &api,
            &api.assistant,
            format,
            "call_amount",
            "pay_invoice",
            json!({"operation_id": id, "amount": 1, "currency": "usd"}),
        )
        .await;
        assert!(is_error, "{format}: {a}");
        assert_eq!(a["error"]["code"], "invalid_arguments");
        assert!(a["message"].as_str().unwrap().contains("only operation_id"));
    }
    // Invalid JSON in a JSON-string argument: a tool error result, not a 500.
    for format in ["openai_chat", "openai_responses"] {
        let mut call = call_object(format, "call_bad", "pay_invoice", &json!({}));
        let slot = if format == "openai_chat" {
            &mut call["function"]["arguments"]
        } else {
            &mut call["arguments"]
        };
        *slot = json!("{\"operation_id\": ");
        let r = api
            .post(
                "/v1/tool-calls",
                &api.assistant,
                json!({"format": format, "call": call}),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        let (a, is_error) = answer_of(format, &r.json(), "call_bad");
        assert!(is_error);
        assert_eq!(a["error"]["code"], "invalid_arguments");
    }
    let (unknown, is_error) = call_tool(
        &api,
        &api.assistant,
        "anthropic",
        "t1",
        "refund_everything",
        json!({"operation_id": id}),
    )
    .await;
    assert!(is_error);
    assert_eq!(unknown["error"]["code"], "unknown_tool");
    let (missing, _) = call_tool(
        &api,
        &api.assistant,
        "anthropic",
        "t2",
        "get_payment_status",
        json!({"operation_id": OperationId::generate().as_str()}),
    )
    .await;
    assert_eq!(missing["error"]["code"], "operation_not_found");
    let (theirs, _) = call_tool(
        &api,
        &api.other_assistant,
        "anthropic",
        "t3",
        "get_payment_status",
        json!({"operation_id": id}),
    )
    .await;
    assert_eq!(
        theirs["error"]["code"], "operation_not_found",
        "another tenant's id is unknown"
    );
    assert_eq!(theirs, missing);

    let envelope = api
        .post(
            "/v1/tool-calls",
            &api.assistant,
            json!({"format": "anthropic", "call": {"type": "tool_use"}}),
        )
        .await;
    assert_eq!(
        (envelope.status, envelope.code().as_str()),
        (400, "invalid_tool_call")
    );
    let format = api
        .post(
            "/v1/tool-calls",
            &api.assistant,
            json!({"format": "gemini", "call": {}}),
        )
        .await;
    assert_eq!(
        (format.status, format.code().as_str()),
        (400, "unsupported_format")
    );
    let on_call = api
        .post(
            "/v1/tool-calls",
            &api.on_call,
            json!({"format": "mcp", "call": {}}),
        )
        .await;
    assert_eq!(on_call.status, 403);

    let after = api
        .get(&format!("/v1/operations/{id}"), &api.service)
        .await
        .json();
    assert_eq!(after["status"], "awaiting_approval");
    assert_eq!(
        after["details"], op["details"],
        "no call changed the details"
    );
    assert_eq!(api.operation_count().await, 1);
    api.stop().await;
}

#[tokio::test]
async fn tool_definitions_are_served_in_each_providers_shape() {
    let api = spawn(sqlite_ledger().await).await;
    let get = |f: &str| format!("/v1/tools?format={f}");
    let chat = api.get(&get("openai_chat"), &api.assistant).await.json();
    let t = &chat["tools"][0];
    assert_eq!(t["type"], "function");
    assert_eq!(t["function"]["name"], "pay_invoice");
    assert_eq!(t["function"]["parameters"]["additionalProperties"], false);
    assert_eq!(
        t["function"]["parameters"]["required"],
        json!(["operation_id"])
    );
    let responses = api
        .get(&get("openai_responses"), &api.assistant)
        .await
        .json();
    assert_eq!(responses["tools"][1]["name"], "get_payment_status");
    assert!(responses["tools"][1]["parameters"].is_object());
    assert_eq!(responses["tools"][1]["strict"], true);
    let anthropic = api.get(&get("anthropic"), &api.assistant).await.json();
    assert!(anthropic["tools"][0]["input_schema"]["properties"]["operation_id"].is_object());
    let mcp = api.get(&get("mcp"), &api.assistant).await.json();
    assert!(mcp["tools"][0]["inputSchema"].is_object());
    for tools in [&chat, &responses, &anthropic, &mcp] {
        assert_eq!(tools["tools"].as_array().unwrap().len(), 3);
    }
    let bad = api.get(&get("cohere"), &api.assistant).await;
    assert_eq!(bad.code(), "unsupported_format");
    api.stop().await;
}

/// Moves the only ready operation of `api` to executing with a submission recorded; returns the
/// fence the test worker then writes with.
async fn claim_and_submit(api: &TestApi, id: &OperationId) -> Fence {
    let worker = rows::holder("test-worker", Duration::from_secs(30));
    let row = rows::executing(&api.ledger, id, &worker, api.clock.now()).await;
    Fence::of(&row)
}

#[tokio::test]
async fn every_state_has_its_answer() {
    let api = spawn(sqlite_ledger().await).await;
    let ask = |id: String| {
        let api = &api;
        async move {
            let (a, is_error) = call_tool(
                api,
                &api.assistant,
                "openai_responses",
                "call_state",
                "get_payment_status",
                json!({"operation_id": id}),
            )
            .await;
            assert!(!is_error, "{a}");
            a
        }
    };
    let ready_id = |op: &Value| OperationId::parse(op["id"].as_str().unwrap()).unwrap();
    let now = || api.clock.now();

    // awaiting_approval: never a link (a capability) in the answer. A status read asks nobody; a
    // pay request would, but this tenant has no notification endpoint, so the billing system must
    // ask the customer, and the answer says so. No link minted by a loop of calls.
    let waiting = api.create("INV-60", 2048).await;
    for _ in 0..OPEN_LINKS_MAX + 2 {
        let a = ask(waiting["id"].as_str().unwrap().into()).await;
        assert_eq!(a["outcome"], "approval_required");
        assert!(a.get("confirmation_url").is_none(), "{a}");
        assert!(a["retry_advice"].as_str().unwrap().contains("approve"));
        assert_eq!(
            (a["amount_minor"].as_i64(), a["currency"].as_str()),
            (Some(2048), Some("usd"))
        );
        assert!(a.get("approval_request").is_none(), "{a}");
        assert!(!a.to_string().contains("/confirm/"), "{a}");
        let (p, _) = call_tool(
            &api,
            &api.assistant,
            "openai_chat",
            "call_pay",
            "pay_invoice",
            json!({"operation_id": waiting["id"]}),
        )
        .await;
        assert_eq!(p["outcome"], "approval_required");
        assert!(!p.to_string().contains("/confirm/"), "{p}");
        assert_eq!(p["approval_request"]["status"], "unavailable", "{p}");
        assert!(
            p["message"]
                .as_str()
                .unwrap()
                .contains("must confirm it through the billing system"),
            "{p}"
        );
    }
    // The service's own request is not starved by the assistant's calls.
    let granted = api
        .http
        .post(format!(
            "{}/v1/operations/{}/approval-requests",
            api.base,
            waiting["id"].as_str().unwrap()
        ))
        .bearer_auth(&api.service)
        .send()
        .await
        .unwrap();
    assert_eq!(
        granted.status(),
        201,
        "tool calls left every link slot free"
    );

    // succeeded: stored reference and a safe subset of the result.
    let op = api.create_ready("INV-61").await;
    let id = ready_id(&op);
    let fence = claim_and_submit(&api, &id).await;
    let executing = ask(id.to_string()).await;
    assert_eq!(
        (executing["status"].as_str(), executing["outcome"].as_str()),
        (Some("executing"), Some("pending"))
    );
    let result = json!({"id": "pi_123", "object": "payment_intent", "status": "succeeded", "amount": 2048,
                        "client_secret": "pi_123_secret_never_shown"});
    let outcome = Recorded::Succeeded(Paid {
        reference: "pi_123".into(),
        result,
    });
    api.ledger
        .record(&recording(&fence, &outcome, "test-worker"), now())
        .await
        .unwrap();
    let paid = ask(id.to_string()).await;
    assert_eq!(paid["outcome"], "succeeded");
    assert_eq!(paid["reference"], "pi_123");
    assert_eq!(paid["result"]["status"], "succeeded");
    assert!(
        !paid.to_string().contains("secret"),
        "the client secret never reaches a model"
    );
    assert!(paid["message"].as_str().unwrap().contains("pi_123"));

    // unknown: the fixed sentence.
    let op = api.create_ready("INV-62").await;
    let id = ready_id(&op);
    let fence = claim_and_submit(&api, &id).await;
    let outcome = rows::unknown_outcome("timeout", None, now() + Duration::from_millis(60_000));
    api.ledger
        .record(&recording(&fence, &outcome, "test-worker"), now())
        .await
        .unwrap();
    let unknown = ask(id.to_string()).await;
    assert_eq!(unknown["outcome"], "being_checked");
    assert!(
        unknown["retry_advice"]
            .as_str()
            .unwrap()
            .contains("Do not propose or start a new payment")
    );
    assert_eq!(
        unknown["message"],
        "The payment status is still being checked. I won't submit a separate payment while that check is in progress."
    );

    // needs_attention.
    api.ledger
        .escalate(
            &Escalate {
                fence: &fence,
                reason: "no lookup left",
                actor: "reconciler",
            },
            now(),
        )
        .await
        .unwrap();
    let review = ask(id.to_string()).await;
    assert_eq!(review["outcome"], "needs_attention");
    assert!(
        review["message"]
            .as_str()
            .unwrap()
            .contains("reviewed by a person")
    );

    // failed and rejected: the stored truth.
    let op = api.create_ready("INV-63").await;
    let id = ready_id(&op);
    let fence = claim_and_submit(&api, &id).await;
    let outcome = Recorded::Failed(Declined {
        code: "card_declined".into(),
        message: "Your card was declined".into(),
        reference: Some("pi_9".into()),
    });
    api.ledger
        .record(&recording(&fence, &outcome, "test-worker"), now())
        .await
        .unwrap();
    let failed = ask(id.to_string()).await;
    assert_eq!(
        (failed["outcome"].as_str(), failed["failure_code"].as_str()),
        (Some("declined"), Some("card_declined"))
    );
    assert!(
        failed["message"]
            .as_str()
            .unwrap()
            .contains("Your card was declined")
    );

    let op = api.create_ready("INV-64").await;
    let id = ready_id(&op);
    let claimed = api
        .ledger
        .claim(
            &LeaseHolder {
                owner: "test-worker",
                lease_ttl: Duration::from_secs(30),
            },
            1,
            now(),
        )
        .await
        .unwrap();
    let outcome = Recorded::Rejected {
        code: "approval_expired".into(),
        message: "the approval expired".into(),
    };
    api.ledger
        .record(
            &recording(
                &Fence {
                    id: id.clone(),
                    attempt: claimed[0].attempt,
                },
                &outcome,
                "test-worker",
            ),
            now(),
        )
        .await
        .unwrap();
    let rejected = ask(id.to_string()).await;
    assert_eq!(rejected["outcome"], "failed");

    // cancelled.
    let op = api.create_ready("INV-65").await;
    api.post(
        &format!("/v1/operations/{}/cancel", op["id"].as_str().unwrap()),
        &api.service,
        json!({}),
    )
    .await;
    let cancelled = ask(op["id"].as_str().unwrap().into()).await;
    assert_eq!(cancelled["outcome"], "conflict");

    // pay_invoice answers the same as get_payment_status, and never moves anything.
    let (pay, _) = call_tool(
        &api,
        &api.assistant,
        "anthropic",
        "toolu_pay",
        "pay_invoice",
        json!({"operation_id": op["id"]}),
    )
    .await;
    assert_eq!(pay, cancelled);
    api.stop().await;
}

#[tokio::test]
async fn an_on_call_resolution_reaches_the_assistant_as_the_merchants_without_its_note() {
    let api = spawn(sqlite_ledger().await).await;
    let now = || api.clock.now();
    let op = api.create_ready("INV-70").await;
    let id = OperationId::parse(op["id"].as_str().unwrap()).unwrap();
    let worker = rows::holder("test-worker", Duration::from_secs(30));
    let unknown = rows::unknown(&api.ledger, &id, &worker, now(), now()).await;
    rows::needs_attention(&api.ledger, &unknown, "no lookup left", "reconciler", now()).await;
    // As `reconciler resolve --as failed` and the console's resolve write it.
    let note = "checked Stripe dashboard 13:40, nothing there";
    api.ledger
        .resolve(
            &payonce_ledger::Resolve {
                id: &id,
                resolution: &payonce_ledger::Resolution::Failed,
                actor: "oncall:ann",
                reason: note,
            },
            now(),
        )
        .await
        .unwrap();
    for format in FORMATS {
        for tool in ["get_payment_status", "pay_invoice"] {
            let (a, is_error) = call_tool(
                &api,
                &api.assistant,
                format,
                "call_resolved",
                tool,
                json!({"operation_id": id.as_str()}),
            )
            .await;
            assert!(!is_error, "{a}");
            let text = a.to_string();
            assert!(!text.contains("dashboard"), "the on-call's note: {a}");
            assert!(!text.to_lowercase().contains("declined"), "{a}");
            assert_eq!(a["status"], "failed", "{a}");
            assert!(
                a["message"]
                    .as_str()
                    .unwrap()
                    .contains("resolved by the merchant"),
                "{a}"
            );
        }
    }
    api.stop().await;
}
