//! Adyen Checkout v71 on the simulator (started with `--adyen`): `POST /v71/payments` and
//! `POST /v71/payments/{pspReference}/refunds`, authenticated by `X-API-Key`, with Adyen's idempotency
//! (`Idempotency-Key` of at most 64 characters, remembered `key_retention`; another body under a used
//! key: 422 `704`; the same key while its first request runs: 409 `704` with `Transient-Error: true`;
//! the saved result replayed otherwise), and standard notifications (`AUTHORISATION`, `REFUND`)
//! HMAC-signed as Adyen signs them, delivered through the same outbox as Stripe's events.
//!
//! Payments and refunds are stored in the same tables as Stripe's, so the audits under `/_sim/audit`
//! count them (a payment's id is its `pspReference`). Cards are the simulator's test payment methods,
//! named by `storedPaymentMethodId`; a declining card answers `Refused` with a refusal reason.
//! Fault rules apply as on the Stripe wire.

use crate::cards::{self, CardOutcome};
use crate::connection::ConnHandle;
use crate::faults::FaultKind;
use crate::idempotency::{self, KeyState};
use crate::routes::Shared;
use crate::store::{KeyRecord, NewEvent, PaymentCommit, PaymentRow, RefundCommit, RefundRow};
use axum::body::Bytes;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Map, Value, json};
use sha2::Sha256;

/// Adyen's longest `Idempotency-Key`, in characters.
pub(crate) const ADYEN_KEY_LEN_MAX: usize = 64;
/// Adyen's most metadata entries (more is error 177).
const METADATA_ENTRIES_MAX: usize = 20;
/// Adyen's longest metadata key.
const METADATA_KEY_LEN_MAX: usize = 20;
/// Adyen's longest metadata value.
const METADATA_VALUE_LEN_MAX: usize = 80;
/// Adyen's longest `reference`.
const REFERENCE_LEN_MAX: usize = 80;
/// The marker in a stored payment's `client_secret` column that says it was made on Adyen's wire.
pub(crate) const ADYEN_ROW: &str = "adyen";
/// Adyen's "request already processed or in progress".
const IN_PROGRESS: &str = "704";

const PAYMENTS_PATH: &str = "/v71/payments";
/// The top-level fields a payment may carry here (Adyen refuses unknown fields with 702).
const PAYMENT_FIELDS: [&str; 9] = [
    "merchantAccount",
    "amount",
    "reference",
    "shopperReference",
    "paymentMethod",
    "shopperInteraction",
    "recurringProcessingModel",
    "returnUrl",
    "metadata",
];
/// The top-level fields a refund may carry here.
const REFUND_FIELDS: [&str; 4] = [
    "merchantAccount",
    "amount",
    "reference",
    "merchantRefundReason",
];

/// An Adyen `ServiceError`.
#[derive(Debug, Clone)]
struct ServiceError {
    status: StatusCode,
    code: &'static str,
    kind: &'static str,
    message: String,
    transient: bool,
}

impl ServiceError {
    fn new(
        status: StatusCode,
        code: &'static str,
        kind: &'static str,
        message: impl Into<String>,
    ) -> Self {
        ServiceError {
            status,
            code,
            kind,
            message: message.into(),
            transient: false,
        }
    }

    fn validation(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            code,
            "validation",
            message,
        )
    }

    fn body(&self) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "status": self.status.as_u16(),
            "errorCode": self.code,
            "message": self.message,
            "errorType": self.kind,
        }))
        .unwrap_or_default()
    }
}

/// One Adyen request's context.
struct Ctx {
    key: Option<String>,
    fault: Option<FaultKind>,
    now_ms: i64,
    request_id: String,
    conn: ConnHandle,
}

impl Ctx {
    fn respond(&self, status: StatusCode, body: Vec<u8>) -> Response {
        let mut response = (status, body).into_response();
        let h = response.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        // Adyen echoes the key: "check the Idempotency-Key HTTP header returned in the response".
        if let Some(key) = &self.key
            && let Ok(v) = HeaderValue::from_str(key)
        {
            h.insert("idempotency-key", v);
        }
        response
    }

    fn error(&self, e: &ServiceError) -> Response {
        let mut response = self.respond(e.status, e.body());
        if e.transient {
            response
                .headers_mut()
                .insert("transient-error", HeaderValue::from_static("true"));
        }
        response
    }

    fn internal(&self, what: &str, e: &dyn std::fmt::Display) -> Response {
        tracing::error!(request_id = %self.request_id, error = %e, "simulator adyen {what} failed");
        self.error(&ServiceError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "000",
            "internal",
            "An unknown error occurred.",
        ))
    }

    fn finish(&self, response: Response) -> Response {
        if self.fault == Some(FaultKind::DropAfterCommit) {
            self.conn.kill();
        }
        response
    }

    async fn hang(&self, app: &Shared) -> Response {
        let mut shutdown = app.shutdown.clone();
        let _ = shutdown.wait_for(|stop| *stop).await;
        self.conn.kill();
        StatusCode::SERVICE_UNAVAILABLE.into_response()
    }
}

/// JSON paths of every leaf (`amount.value`), for the request audit.
fn leaf_paths(prefix: &str, v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                leaf_paths(&path, child, out);
            }
        }
        _ => out.push(prefix.to_string()),
    }
}

/// The body with every object's keys sorted: the same JSON however its fields were ordered.
fn canonical(v: &Value) -> String {
    fn sort(v: &Value) -> Value {
        match v {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                let mut out = Map::new();
                for k in keys {
                    out.insert(k.clone(), sort(&map[k]));
                }
                Value::Object(out)
            }
            Value::Array(items) => Value::Array(items.iter().map(sort).collect()),
            other => other.clone(),
        }
    }
    sort(v).to_string()
}

/// Authenticates, applies `reset` and `rate_limit_429`, reads the key and the JSON body, and claims the
/// key. `Err` is the response to send at once.
async fn begin(
    app: &Shared,
    conn: ConnHandle,
    headers: &HeaderMap,
    path: &str,
    body: &[u8],
    fields: &[&str],
) -> Result<(Ctx, Value, Option<(idempotency::Claim, String)>), Response> {
    let request_id = app.ids.id("req");
    let now = app.now_ms();
    let raw_key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let parsed: Result<Value, _> = serde_json::from_slice(body);
    let mut params = Vec::new();
    if let Ok(v) = &parsed {
        leaf_paths("", v, &mut params);
    }
    app.audit.record(crate::audit::AuditedRequest {
        request_id: request_id.clone(),
        method: "POST".into(),
        path: path.to_string(),
        idempotency_key: raw_key.clone(),
        stripe_version: None,
        param_keys: params,
        at_ms: now,
    });
    let mut ctx = Ctx {
        key: None,
        fault: app.faults.decide(raw_key.as_deref()),
        now_ms: now,
        request_id,
        conn,
    };
    match ctx.fault {
        Some(FaultKind::Reset) => {
            ctx.conn.kill();
            return Err(StatusCode::INTERNAL_SERVER_ERROR.into_response());
        }
        Some(FaultKind::RateLimit429) => return Err(ctx.error(&rate_limited())),
        _ => {}
    }
    let authorized = headers
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|k| k == app.config.adyen.api_key);
    if !authorized {
        return Err(ctx.error(&ServiceError::new(
            StatusCode::UNAUTHORIZED,
            "000",
            "security",
            "HTTP Status Response - Unauthorized",
        )));
    }
    if !app.limiter.admit("POST", path, now) {
        return Err(ctx.error(&rate_limited()));
    }
    if let Some(key) = &raw_key {
        if key.is_empty() || key.chars().count() > ADYEN_KEY_LEN_MAX {
            return Err(ctx.error(&ServiceError::validation(
                "000",
                format!("Idempotency-Key must be 1 to {ADYEN_KEY_LEN_MAX} characters"),
            )));
        }
        ctx.key = Some(key.clone());
    }
    let body = match parsed {
        Ok(v @ Value::Object(_)) => v,
        _ => {
            return Err(ctx.error(&ServiceError::new(
                StatusCode::BAD_REQUEST,
                "702",
                "validation",
                "Unable to parse the JSON request",
            )));
        }
    };
    if let Some(unknown) = body
        .as_object()
        .and_then(|m| m.keys().find(|k| !fields.contains(&k.as_str())))
    {
        return Err(ctx.error(&ServiceError::new(
            StatusCode::BAD_REQUEST,
            "702",
            "validation",
            format!("Structure of the request contains the following unknown fields: {unknown}"),
        )));
    }
    let claim = match &ctx.key {
        None => None,
        Some(key) => {
            let pairs: crate::form::Pairs = vec![("json".into(), canonical(&body))];
            let fp = idempotency::fingerprint("POST", path, &pairs);
            match idempotency::begin(
                &app.in_flight,
                &app.store,
                app.config.contract,
                key,
                &fp,
                app.key_not_before_ms(ctx.now_ms),
            )
            .await
            {
                Ok(KeyState::Fresh(claim)) => Some((claim, fp)),
                Ok(KeyState::Replay(saved)) => {
                    let status = StatusCode::from_u16(saved.status)
                        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                    return Err(ctx.finish(ctx.respond(status, saved.body)));
                }
                Ok(KeyState::Mismatch) => {
                    return Err(ctx.error(&ServiceError::validation(
                        IN_PROGRESS,
                        "request already processed or in progress: the idempotency key was used \
                         with another request body",
                    )));
                }
                Ok(KeyState::InUse) => {
                    let mut e = ServiceError::new(
                        StatusCode::CONFLICT,
                        IN_PROGRESS,
                        "validation",
                        "request already processed or in progress",
                    );
                    e.transient = true;
                    return Err(ctx.error(&e));
                }
                Err(e) => return Err(ctx.internal("idempotency lookup", &e)),
            }
        }
    };
    match ctx.fault {
        Some(FaultKind::Hang) => return Err(ctx.hang(app).await),
        Some(FaultKind::Error500BeforeCommit) => {
            // Nothing reached an issuer: Adyen marks it transient, and the key runs afresh.
            let mut e = ServiceError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "000",
                "internal",
                "An unknown error occurred.",
            );
            e.transient = true;
            return Err(ctx.error(&e));
        }
        _ => {}
    }
    Ok((ctx, body, claim))
}

fn rate_limited() -> ServiceError {
    ServiceError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "000",
        "internal",
        "Too many requests",
    )
}

fn text<'a>(v: &'a Value, field: &str) -> Option<&'a str> {
    v.get(field).and_then(Value::as_str)
}

/// The checked amount: a positive value and a three-letter upper-case currency.
fn amount_of(body: &Value) -> Result<(i64, String), ServiceError> {
    let amount = body
        .get("amount")
        .ok_or_else(|| ServiceError::validation("100", "No amount specified"))?;
    let value = amount
        .get("value")
        .and_then(Value::as_i64)
        .ok_or_else(|| ServiceError::validation("100", "No amount specified"))?;
    let currency = text(amount, "currency").unwrap_or("");
    if currency.len() != 3 || !currency.chars().all(|c| c.is_ascii_uppercase()) {
        return Err(ServiceError::validation(
            "702",
            format!("Invalid currency {currency:?}: three upper-case letters expected"),
        ));
    }
    if value <= 0 {
        return Err(ServiceError::validation("137", "Invalid amount specified"));
    }
    Ok((value, currency.to_ascii_lowercase()))
}

fn metadata_of(body: &Value) -> Result<Map<String, Value>, ServiceError> {
    let Some(m) = body.get("metadata") else {
        return Ok(Map::new());
    };
    let Some(map) = m.as_object() else {
        return Err(ServiceError::validation(
            "702",
            "metadata must be an object",
        ));
    };
    let fits = map.len() <= METADATA_ENTRIES_MAX
        && map.iter().all(|(k, v)| {
            k.chars().count() <= METADATA_KEY_LEN_MAX
                && v.as_str()
                    .is_some_and(|s| s.chars().count() <= METADATA_VALUE_LEN_MAX)
        });
    if !fits {
        return Err(ServiceError::validation(
            "177",
            "Metadata size exceeds limit",
        ));
    }
    Ok(map.clone())
}

fn merchant_of(app: &Shared, body: &Value) -> Result<String, ServiceError> {
    let account = text(body, "merchantAccount").unwrap_or("");
    if account.is_empty() {
        return Err(ServiceError::validation("901", "Invalid Merchant Account"));
    }
    if account != app.config.adyen.merchant_account {
        return Err(ServiceError::new(
            StatusCode::FORBIDDEN,
            "010",
            "security",
            "Not allowed",
        ));
    }
    Ok(account.to_string())
}

fn reference_of(body: &Value) -> Result<String, ServiceError> {
    let reference = text(body, "reference").unwrap_or("");
    if reference.is_empty() || reference.chars().count() > REFERENCE_LEN_MAX {
        return Err(ServiceError::validation(
            "130",
            format!("reference must be 1 to {REFERENCE_LEN_MAX} characters"),
        ));
    }
    Ok(reference.to_string())
}

/// A fresh `pspReference`: 16 upper-case letters and digits.
fn psp_reference(app: &Shared) -> String {
    app.ids
        .id("psp")
        .trim_start_matches("psp_")
        .chars()
        .map(|c| c.to_ascii_uppercase())
        .take(16)
        .collect()
}

/// ISO 8601 UTC of a simulator time, for `eventDate`.
fn event_date(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}+00:00",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// What a notification says.
pub(crate) struct Notice<'a> {
    pub(crate) event_code: &'static str,
    pub(crate) psp_reference: &'a str,
    pub(crate) original_reference: Option<&'a str>,
    pub(crate) merchant_reference: &'a str,
    pub(crate) value: i64,
    /// Upper case.
    pub(crate) currency: &'a str,
    pub(crate) success: bool,
    pub(crate) reason: Option<&'a str>,
}

/// Adyen's signing string and base64 HMAC-SHA256 under the hex key.
pub(crate) fn sign(hex_key: &str, fields: [&str; 8]) -> String {
    let key = hex::decode(hex_key).unwrap_or_default();
    let Ok(mut mac) = <Hmac<Sha256> as KeyInit>::new_from_slice(&key) else {
        return String::new();
    };
    mac.update(fields.join(":").as_bytes());
    base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
}

/// A standard notification request with one signed item, as Adyen sends it.
pub(crate) fn notification(app: &Shared, notice: &Notice<'_>, now_ms: i64) -> NewEvent {
    let account = app.config.adyen.merchant_account.as_str();
    let value = notice.value.to_string();
    let success = if notice.success { "true" } else { "false" };
    let signature = sign(
        &app.config.adyen.hmac_key_hex,
        [
            notice.psp_reference,
            notice.original_reference.unwrap_or(""),
            account,
            notice.merchant_reference,
            &value,
            notice.currency,
            notice.event_code,
            success,
        ],
    );
    let mut item = json!({
        "additionalData": { "hmacSignature": signature },
        "amount": { "currency": notice.currency, "value": notice.value },
        "eventCode": notice.event_code,
        "eventDate": event_date(now_ms),
        "merchantAccountCode": account,
        "merchantReference": notice.merchant_reference,
        "pspReference": notice.psp_reference,
        "reason": notice.reason.unwrap_or(""),
        "success": success,
    });
    if let Some(original) = notice.original_reference {
        item["originalReference"] = json!(original);
    }
    if notice.event_code == "AUTHORISATION" {
        item["paymentMethod"] = json!("visa");
    }
    let body = json!({
        "live": "false",
        "notificationItems": [ { "NotificationRequestItem": item } ],
    });
    NewEvent {
        id: app.ids.id("evt"),
        created: now_ms / 1000,
        kind: notice.event_code,
        body: serde_json::to_vec(&body).unwrap_or_default(),
    }
}

fn refusal_of(outcome: &CardOutcome) -> Option<(&'static str, &'static str)> {
    match outcome {
        CardOutcome::Declined(e) => Some(match e.decline_code {
            Some("insufficient_funds") => ("Not enough balance", "12"),
            Some("authentication_required") => ("Authentication required", "38"),
            _ => ("Refused", "2"),
        }),
        _ => None,
    }
}

/// `POST /v71/payments`.
pub(crate) async fn payments(
    State(app): State<Shared>,
    ConnectInfo(conn): ConnectInfo<ConnHandle>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (ctx, body, claim) =
        match begin(&app, conn, &headers, PAYMENTS_PATH, &body, &PAYMENT_FIELDS).await {
            Ok(begun) => begun,
            Err(response) => return response,
        };
    let checked = (|| -> Result<_, ServiceError> {
        merchant_of(&app, &body)?;
        let amount = amount_of(&body)?;
        let reference = reference_of(&body)?;
        let metadata = metadata_of(&body)?;
        let method = body
            .get("paymentMethod")
            .and_then(|m| text(m, "storedPaymentMethodId"))
            .unwrap_or("");
        if !cards::is_known(method) {
            return Err(ServiceError::validation("800", "Contract not found"));
        }
        let shopper = text(&body, "shopperReference").unwrap_or("");
        if shopper.chars().count() < 3 {
            return Err(ServiceError::validation(
                "702",
                "shopperReference must be at least 3 characters",
            ));
        }
        Ok((
            amount,
            reference,
            metadata,
            method.to_string(),
            shopper.to_string(),
        ))
    })();
    let ((value, currency), reference, metadata, method, shopper) = match checked {
        Ok(c) => c,
        Err(e) => return ctx.error(&e),
    };
    let psp = psp_reference(&app);
    let off_session = body.get("shopperInteraction").and_then(Value::as_str) == Some("ContAuth");
    let outcome = cards::confirm(&method, off_session);
    let refusal = refusal_of(&outcome);
    let (result_code, status) = match (&outcome, refusal) {
        (_, Some(_)) => ("Refused", "requires_payment_method"),
        (CardOutcome::RequiresAction(_), None) => ("RedirectShopper", "requires_action"),
        // Authorised later: the AUTHORISATION notification says so `processing_settle` after.
        (CardOutcome::Processing, None) => ("Received", "processing"),
        (CardOutcome::Succeeded | CardOutcome::Declined(_), None) => ("Authorised", "succeeded"),
    };
    let authorised = result_code == "Authorised";
    let row = PaymentRow {
        seq: 0,
        id: psp.clone(),
        created: ctx.now_ms / 1000,
        created_ms: ctx.now_ms,
        amount: value,
        currency: currency.clone(),
        customer: Some(shopper),
        // Adyen's `reference` (a settling payment's notification names it).
        description: Some(reference.clone()),
        payment_method: Some(method),
        status: status.to_string(),
        metadata: Value::Object(metadata).to_string(),
        transfer_destination: None,
        latest_charge: authorised.then(|| psp.clone()),
        last_payment_error: None,
        next_action: None,
        amount_received: if authorised { value } else { 0 },
        amount_refunded: 0,
        client_secret: ADYEN_ROW.to_string(),
        idempotency_key: ctx.key.clone(),
        request_id: ctx.request_id.clone(),
        settle_at_ms: (status == "processing")
            .then(|| ctx.now_ms + app.config.processing_settle.as_millis() as i64),
    };
    let upper = currency.to_ascii_uppercase();
    let mut answer = json!({
        "pspReference": psp,
        "resultCode": result_code,
        "merchantReference": reference,
        "amount": { "currency": upper, "value": value },
    });
    if let Some((reason, code)) = refusal {
        answer["refusalReason"] = json!(reason);
        answer["refusalReasonCode"] = json!(code);
    }
    // Adyen notifies refused authorisations too (success false); a redirect is not an authorisation
    // yet, and a received payment is notified when it settles.
    let events = if matches!(result_code, "RedirectShopper" | "Received") {
        Vec::new()
    } else {
        vec![notification(
            &app,
            &Notice {
                event_code: "AUTHORISATION",
                psp_reference: &psp,
                original_reference: None,
                merchant_reference: &reference,
                value,
                currency: &upper,
                success: authorised,
                reason: refusal.map(|(r, _)| r),
            },
            ctx.now_ms,
        )]
    };
    let (status, answer) = if ctx.fault == Some(FaultKind::Error500AfterCommit) {
        // Executed, then a non-transient error: Adyen stores it as the key's final result.
        let e = ServiceError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "000",
            "internal",
            "An unknown error occurred.",
        );
        (e.status, e.body())
    } else {
        (
            StatusCode::OK,
            serde_json::to_vec(&answer).unwrap_or_default(),
        )
    };
    let key = claim
        .as_ref()
        .zip(ctx.key.as_ref())
        .map(|((_, fp), key)| KeyRecord {
            key: key.clone(),
            fingerprint: fp.clone(),
            status: status.as_u16(),
            body: answer.clone(),
            created_ms: ctx.now_ms,
        });
    let commit = PaymentCommit {
        row,
        events,
        key,
        webhooks_due_ms: app.webhooks_due_ms(ctx.now_ms),
    };
    if let Err(e) = app.store.commit_payment(commit, claim).await {
        return ctx.internal("payment commit", &e);
    }
    app.webhook_wake.notify_one();
    ctx.finish(ctx.respond(status, answer))
}

/// The AUTHORISATION notification of a received payment that settled now (`now_ms`).
pub(crate) fn settled(app: &Shared, row: &PaymentRow, now_ms: i64) -> NewEvent {
    notification(
        app,
        &Notice {
            event_code: "AUTHORISATION",
            psp_reference: &row.id,
            original_reference: None,
            merchant_reference: row.description.as_deref().unwrap_or(""),
            value: row.amount,
            currency: &row.currency.to_ascii_uppercase(),
            success: true,
            reason: None,
        },
        now_ms,
    )
}

/// `POST /v71/payments/{pspReference}/refunds`: answered `201 received`; the REFUND notification
/// says whether it went through (a refund larger than what is left fails there, as Adyen's does).
pub(crate) async fn refunds(
    State(app): State<Shared>,
    ConnectInfo(conn): ConnectInfo<ConnHandle>,
    headers: HeaderMap,
    Path(payment): Path<String>,
    body: Bytes,
) -> Response {
    let path = format!("{PAYMENTS_PATH}/{payment}/refunds");
    let (ctx, body, claim) = match begin(&app, conn, &headers, &path, &body, &REFUND_FIELDS).await {
        Ok(begun) => begun,
        Err(response) => return response,
    };
    let checked = (|| -> Result<_, ServiceError> {
        let account = merchant_of(&app, &body)?;
        let amount = amount_of(&body)?;
        let reference = text(&body, "reference").unwrap_or("").to_string();
        Ok((account, amount, reference))
    })();
    let (account, (value, currency), reference) = match checked {
        Ok(c) => c,
        Err(e) => return ctx.error(&e),
    };
    let found = match app.store.payment(&payment).await {
        Ok(found) => found,
        Err(e) => return ctx.internal("payment read", &e),
    };
    let Some(paid) = found.filter(|p| p.client_secret == ADYEN_ROW) else {
        return ctx.error(&ServiceError::validation(
            "167",
            format!("Original pspReference {payment} not found"),
        ));
    };
    let psp = psp_reference(&app);
    let upper = currency.to_ascii_uppercase();
    let answer = json!({
        "merchantAccount": account,
        "paymentPspReference": payment,
        "pspReference": psp,
        "reference": reference,
        "status": "received",
        "amount": { "currency": upper, "value": value },
    });
    let status = if ctx.fault == Some(FaultKind::Error500AfterCommit) {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::CREATED
    };
    let answer_body = if status == StatusCode::CREATED {
        serde_json::to_vec(&answer).unwrap_or_default()
    } else {
        ServiceError::new(status, "000", "internal", "An unknown error occurred.").body()
    };
    let key = claim
        .as_ref()
        .zip(ctx.key.as_ref())
        .map(|((_, fp), key)| KeyRecord {
            key: key.clone(),
            fingerprint: fp.clone(),
            status: status.as_u16(),
            body: answer_body.clone(),
            created_ms: ctx.now_ms,
        });
    let fits = paid.currency == currency && paid.status == "succeeded";
    let notice = |success: bool, reason: Option<&'static str>| {
        notification(
            &app,
            &Notice {
                event_code: "REFUND",
                psp_reference: &psp,
                original_reference: Some(&payment),
                merchant_reference: &reference,
                value,
                currency: &upper,
                success,
                reason,
            },
            ctx.now_ms,
        )
    };
    let row = RefundRow {
        seq: 0,
        id: psp.clone(),
        payment_intent: payment.clone(),
        charge: paid.latest_charge.clone(),
        amount: value,
        status: "succeeded".into(),
        created: ctx.now_ms / 1000,
        idempotency_key: ctx.key.clone(),
        request_id: ctx.request_id.clone(),
        settle_at_ms: None,
        settle_to: None,
        body: serde_json::to_vec(&answer).unwrap_or_default(),
    };
    let due = app.webhooks_due_ms(ctx.now_ms);
    let (accepted, refused) = (
        notice(true, None),
        notice(false, Some("Insufficient balance on payment")),
    );
    let store = app.store.clone();
    // In its own task, holding the key's claim to the end: a client hanging up cannot cancel it.
    let committed = crate::payment_intents::detached(async move {
        let done = if fits {
            store
                .commit_refund(&row, &[accepted], key.as_ref(), due)
                .await?
        } else {
            RefundCommit::Exceeds
        };
        if done == RefundCommit::Exceeds {
            // Received, then refused: the answer is saved under the key and the notification says no.
            store.commit_answer(&[refused], key.as_ref(), due).await?;
        }
        drop(claim);
        Ok(())
    })
    .await;
    if let Err(e) = committed {
        return ctx.internal("refund commit", &e);
    }
    app.webhook_wake.notify_one();
    ctx.finish(ctx.respond(status, answer_body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_dates_are_iso_8601() {
        assert_eq!(event_date(0), "1970-01-01T00:00:00+00:00");
        assert_eq!(event_date(1_700_000_000_000), "2023-11-14T22:13:20+00:00");
    }

    #[test]
    fn canonical_json_ignores_field_order() {
        let a: Value = serde_json::from_str(r#"{"b":1,"a":{"y":2,"x":3}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a":{"x":3,"y":2},"b":1}"#).unwrap();
        assert_eq!(canonical(&a), canonical(&b));
    }
}
