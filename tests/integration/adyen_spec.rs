//! Adyen's wire shapes against Adyen's published OpenAPI (Checkout v71, Webhooks v1; read where they
//! are, never copied): the payment and refund requests the adapter sends, the answers the simulator
//! gives (success and errors), and the AUTHORISATION and REFUND notifications it sends. A small walk
//! over the schemas and their `$ref`s: every property named must exist, required ones must be there,
//! types and enum values must match; `oneOf`/`anyOf` pass when one branch does.

use crate::adyen_adapter::{Op, adapter, adyen_sim};
use payonce_core::details::RefundReason;
use payonce_core::id::{BusinessKey, IdempotencyKey, OperationId};
use payonce_core::money::Money;
use payonce_processor::RefundRequest;
use payonce_processor::SubmitOutcome;
use payonce_processor::adyen::RETURN_URL_DEFAULT;
use payonce_processor::adyen::wire::{payment_body, refund_body};
use payonce_simulator::config::{ADYEN_API_KEY_DEFAULT, ADYEN_MERCHANT_ACCOUNT_DEFAULT};
use serde_json::{Value, json};
use std::path::PathBuf;

/// Where Adyen's specifications are: `PAYONCE_ADYEN_SPEC_DIR`, else `<repo>/../shared/reference/adyen`,
/// else `/work/shared/reference/adyen`.
fn spec_dir() -> PathBuf {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let candidates: Vec<PathBuf> = std::env::var_os("PAYONCE_ADYEN_SPEC_DIR")
        .map(PathBuf::from)
        .into_iter()
        .chain([
            repo.join("../shared/reference/adyen"),
            PathBuf::from("/work/shared/reference/adyen"),
        ])
        .collect();
    candidates
        .iter()
        .find(|d| d.join("CheckoutService-v71.json").is_file())
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "Adyen's OpenAPI specifications (CheckoutService-v71.json, Webhooks-v1.json) are not in \
                 any of {candidates:?}; set PAYONCE_ADYEN_SPEC_DIR to the folder holding them"
            )
        })
}

fn spec(name: &str) -> Value {
    let path = spec_dir().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// The schema `$ref` points at, within `root`.
fn resolve<'a>(root: &'a Value, schema: &'a Value) -> &'a Value {
    match schema.get("$ref").and_then(Value::as_str) {
        Some(r) => {
            let pointer = r.strip_prefix('#').expect("local $ref");
            resolve(
                root,
                root.pointer(pointer)
                    .unwrap_or_else(|| panic!("dangling $ref {r}")),
            )
        }
        None => schema,
    }
}

/// Every way `value` at `path` breaks `schema`.
fn violations(root: &Value, schema: &Value, value: &Value, path: &str) -> Vec<String> {
    let schema = resolve(root, schema);
    let mut out = Vec::new();
    for key in ["oneOf", "anyOf"] {
        if let Some(branches) = schema.get(key).and_then(Value::as_array) {
            let fits = branches
                .iter()
                .any(|b| violations(root, b, value, path).is_empty());
            if !fits {
                out.push(format!("{path}: matches no branch of {key}"));
            }
            return out;
        }
    }
    if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
        for b in all {
            out.extend(violations(root, b, value, path));
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        out.push(format!("{path}: {value} is not one of {allowed:?}"));
    }
    let kind = schema.get("type").and_then(Value::as_str);
    let type_ok = match kind {
        Some("string") => value.is_string(),
        Some("integer") => value.is_i64() || value.is_u64(),
        Some("number") => value.is_number(),
        Some("boolean") => value.is_boolean(),
        Some("array") => value.is_array(),
        Some("object") => value.is_object(),
        _ => true,
    };
    if !type_ok {
        out.push(format!("{path}: {value} is not a {}", kind.unwrap_or("?")));
        return out;
    }
    if let Some(items) = schema.get("items")
        && let Some(values) = value.as_array()
    {
        for (i, v) in values.iter().enumerate() {
            out.extend(violations(root, items, v, &format!("{path}[{i}]")));
        }
    }
    if let Some(object) = value.as_object()
        && (schema.get("properties").is_some() || kind == Some("object"))
    {
        let properties = schema.get("properties").and_then(Value::as_object);
        for required in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if !object.contains_key(required) {
                out.push(format!("{path}: required {required} is missing"));
            }
        }
        for (k, v) in object {
            let at = format!("{path}.{k}");
            match (
                properties.and_then(|p| p.get(k)),
                schema.get("additionalProperties"),
            ) {
                (Some(property), _) => out.extend(violations(root, property, v, &at)),
                (None, Some(extra)) if extra.is_object() => {
                    out.extend(violations(root, extra, v, &at))
                }
                (None, Some(Value::Bool(true))) => {}
                (None, None) if properties.is_none() => {}
                (None, _) => out.push(format!("{at}: not a property the schema names")),
            }
        }
    }
    out
}

fn assert_fits(root: &Value, schema: &Value, value: &Value, what: &str) {
    let broken = violations(root, schema, value, what);
    assert!(
        broken.is_empty(),
        "{what} breaks Adyen's schema:\n{}\n{value:#}",
        broken.join("\n")
    );
}

fn request_schema<'a>(root: &'a Value, path: &str) -> &'a Value {
    &root["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
}

fn response_schema<'a>(root: &'a Value, path: &str, status: &str) -> &'a Value {
    let schema =
        &root["paths"][path]["post"]["responses"][status]["content"]["application/json"]["schema"];
    assert!(schema.is_object(), "{path} documents no {status} answer");
    schema
}

#[test]
fn the_walk_finds_what_breaks_a_schema() {
    // The checker itself must fail on bad shapes, or every test below would pass vacuously.
    let root = spec("CheckoutService-v71.json");
    let request = request_schema(&root, "/payments");
    let op = Op::new("pm_card_visa");
    let good = payment_body(&op.request(), "M", RETURN_URL_DEFAULT).unwrap();
    assert!(violations(&root, request, &good, "payment").is_empty());
    let mut unknown_field = good.clone();
    unknown_field["notAnAdyenField"] = json!(1);
    let mut wrong_type = good.clone();
    wrong_type["amount"]["value"] = json!("2048");
    let mut bad_enum = good.clone();
    bad_enum["shopperInteraction"] = json!("Telepathy");
    let mut missing = good.clone();
    missing.as_object_mut().unwrap().remove("merchantAccount");
    let mut bad_method = good;
    bad_method["paymentMethod"] = json!({"type": 7});
    for (what, bad) in [
        ("unknown field", unknown_field),
        ("wrong type", wrong_type),
        ("bad enum", bad_enum),
        ("missing required", missing),
        ("no oneOf branch", bad_method),
    ] {
        assert!(
            !violations(&root, request, &bad, "payment").is_empty(),
            "{what} passed"
        );
    }
}

#[tokio::test]
async fn payments_and_refunds_and_their_answers_fit_checkout_v71() {
    let root = spec("CheckoutService-v71.json");
    let op = Op::new("pm_card_visa");
    let payment = payment_body(
        &op.request(),
        ADYEN_MERCHANT_ACCOUNT_DEFAULT,
        RETURN_URL_DEFAULT,
    )
    .unwrap();
    assert_fits(
        &root,
        request_schema(&root, "/payments"),
        &payment,
        "payment request",
    );

    let refund_id = OperationId::generate();
    let tenant = crate::support::tenant();
    let key = IdempotencyKey::parse(&format!("po1_{}", "e".repeat(40))).unwrap();
    let bk = BusinessKey::parse("refund:spec").unwrap();
    let hash = op.details.hash();
    let refunds = "/payments/{paymentPspReference}/refunds";
    for reason in [
        RefundReason::Duplicate,
        RefundReason::Fraudulent,
        RefundReason::RequestedByCustomer,
    ] {
        let refund = refund_body(
            &RefundRequest {
                operation_id: &refund_id,
                tenant: &tenant,
                idempotency_key: &key,
                business_key: &bk,
                details_hash: &hash,
                payment_reference: "PSP0000000000001",
                payment_operation: &op.id,
                amount: Money::new(500, op.details.money().currency()).unwrap(),
                reason,
            },
            ADYEN_MERCHANT_ACCOUNT_DEFAULT,
        )
        .unwrap();
        assert_fits(
            &root,
            request_schema(&root, refunds),
            &refund,
            "refund request",
        );
    }

    // The simulator's answers: an authorisation, a refusal, a received refund, and its errors.
    let s = adyen_sim().await;
    let p = adapter(&s.base);
    let SubmitOutcome::Succeeded {
        reference: psp,
        result,
        ..
    } = op.submit(&p).await
    else {
        panic!("the payment succeeds")
    };
    assert_fits(
        &root,
        response_schema(&root, "/payments", "200"),
        &result,
        "payment answer",
    );
    let refused = s
        .http
        .post(format!("{}/v71/payments", s.base))
        .header("x-api-key", ADYEN_API_KEY_DEFAULT)
        .json(
            &payment_body(
                &Op::new("pm_card_chargeDeclined").request(),
                ADYEN_MERCHANT_ACCOUNT_DEFAULT,
                RETURN_URL_DEFAULT,
            )
            .unwrap(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 200);
    let refused: Value = refused.json().await.unwrap();
    assert_eq!(refused["resultCode"], "Refused");
    assert_fits(
        &root,
        response_schema(&root, "/payments", "200"),
        &refused,
        "refusal answer",
    );
    let answer = s
        .http
        .post(format!("{}/v71/payments/{psp}/refunds", s.base))
        .header("x-api-key", ADYEN_API_KEY_DEFAULT)
        .header("idempotency-key", "spec-refund-1")
        .json(&json!({"merchantAccount": ADYEN_MERCHANT_ACCOUNT_DEFAULT,
            "amount": {"value": 500, "currency": "USD"}, "reference": "spec-refund"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 201);
    let answer: Value = answer.json().await.unwrap();
    assert_fits(
        &root,
        response_schema(&root, refunds, "201"),
        &answer,
        "refund answer",
    );
    for (what, key, status, body) in [
        ("unauthorised", "nobody", "401", payment.clone()),
        (
            "invalid",
            ADYEN_API_KEY_DEFAULT,
            "422",
            json!({"merchantAccount": ADYEN_MERCHANT_ACCOUNT_DEFAULT,
            "amount": {"value": 0, "currency": "USD"}, "reference": "x"}),
        ),
    ] {
        let r = s
            .http
            .post(format!("{}/v71/payments", s.base))
            .header("x-api-key", key)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_str(), status, "{what}");
        let error: Value = r.json().await.unwrap();
        assert_fits(
            &root,
            response_schema(&root, "/payments", status),
            &error,
            what,
        );
    }
    s.sim.shutdown().await;
}

#[tokio::test]
async fn the_authorisation_and_refund_notifications_fit_webhooks_v1() {
    let root = spec("Webhooks-v1.json");
    // A receiver that keeps what the simulator sends and answers as Adyen requires.
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<Value>::new()));
    let kept = seen.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |body: axum::body::Bytes| {
            let kept = kept.clone();
            async move {
                kept.lock()
                    .unwrap()
                    .push(serde_json::from_slice(&body).unwrap());
                "[accepted]"
            }
        }),
    );
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let mut config = payonce_simulator::SimulatorConfig::adyen();
    config.webhook_url = Some(url);
    let s = crate::simulator::start(config).await;
    let p = adapter(&s.base);
    let op = Op::new("pm_card_visa");
    let SubmitOutcome::Succeeded { reference: psp, .. } = op.submit(&p).await else {
        panic!("the payment succeeds")
    };
    assert!(matches!(
        Op::new("pm_card_chargeDeclined").submit(&p).await,
        SubmitOutcome::Declined { .. }
    ));
    let key = IdempotencyKey::parse(&format!("po1_{}", "f".repeat(40))).unwrap();
    crate::adyen_adapter::refund(&p, &op, &psp, 500, (&OperationId::generate(), &key)).await;
    let notifications = crate::support::wait_for(
        "three notifications",
        crate::simulator::DEADLINE,
        || async {
            let seen = seen.lock().unwrap().clone();
            (seen.len() >= 3).then_some(seen)
        },
    )
    .await;
    let mut codes = Vec::new();
    for n in &notifications {
        let code = n["notificationItems"][0]["NotificationRequestItem"]["eventCode"]
            .as_str()
            .unwrap()
            .to_string();
        let schema = &root["webhooks"][format!("/{code}")]["post"]["requestBody"]["content"]["application/json"]
            ["schema"];
        assert!(schema.is_object(), "Adyen documents no {code} webhook");
        assert_fits(&root, schema, n, &code);
        codes.push(code);
    }
    codes.sort();
    assert_eq!(codes, ["AUTHORISATION", "AUTHORISATION", "REFUND"]);
    s.sim.shutdown().await;
    server.abort();
}
