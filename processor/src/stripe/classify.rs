//! From what came back (or did not) to one of the four outcomes.
//!
//! | what happened | outcome | why |
//! | --- | --- | --- |
//! | connect error: refused, DNS, TLS handshake, connect timeout (`is_connect()`) | Unreachable | no byte of the request left this process; the payment waits while its approval holds |
//! | request could not be built (`is_builder()`) | NotSubmitted | nothing was sent |
//! | timeout after connecting, reset or close after sending, unreadable body | Unknown | Stripe may have executed it |
//! | 200, `status: succeeded` | Succeeded | |
//! | 200, `status: processing` | Unknown (with reference) | settles later; lookup by reference resolves it |
//! | 200, `requires_payment_method` / `requires_action` / `canceled` | Declined (with reference) | off-session, nobody can act on it |
//! | 200, any other status or an unparseable body | Unknown | |
//! | 402 `card_error` | Declined (with `error.payment_intent.id`) | Stripe's definitive card failure |
//! | 400 `idempotency_error` | KeyReused | the key names the business action: an earlier request under it carried other parameters (another amount), so the processor holds another request for this business key; a human sees both |
//! | 400 naming a PaymentIntent | Unknown (with reference) | something was created |
//! | 401, 403, 404 | Misconfigured | Stripe answered, refusing payonce's key, its permissions or its URL: a configuration error a human mends, then retries with the same key |
//! | 409 (`idempotency_key_in_use`, `lock_timeout`) | Unknown | the key's first request is still executing |
//! | 429 (`rate_limit`, `lock_timeout`) | RateLimited | Stripe's limiters run before execution and before the idempotency layer: nothing ran, nothing is stored under the key; send the same request again after a pause |
//! | any other 4xx (`invalid_request_error` `resource_missing`, `parameter_*`, `amount_too_small`, …) | Declined (code: Stripe's `code`, else `http_<status>`) | the request reached Stripe and was refused for what it says: the same request fails the same way every time, so one submission ends it `failed` with Stripe's message (a request that got an answer is never "not submitted") |
//! | 3xx | Unknown | a redirect is never followed ([`crate::redirect`]): a configuration error, and the request was sent |
//! | 5xx | Unknown | Stripe may have executed it (and replays the 500 under the key) |
//! | any other status | Unknown | unknown means "ask lookup", never "retry with a new key" |
//!
//! A replayed response (`Idempotent-Replayed: true`) is classified like the original: it *is* the original.

use crate::SubmitOutcome;
use serde_json::Value;

/// Classifies a request that got no HTTP response.
pub fn classify_transport(e: &reqwest::Error) -> SubmitOutcome {
    if e.is_connect() {
        return SubmitOutcome::Unreachable {
            reason: format!("could not connect to the processor: {}", chain(e)),
        };
    }
    if e.is_builder() {
        return SubmitOutcome::NotSubmitted {
            reason: format!("request could not be built: {}", chain(e)),
        };
    }
    let what = if e.is_timeout() {
        "timed out after sending"
    } else {
        "failed after sending"
    };
    SubmitOutcome::Unknown {
        reason: format!("request {what}: {}", chain(e)),
        reference: None,
    }
}

fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    let mut cur = v;
    for p in path {
        cur = cur.get(p)?;
    }
    cur.as_str()
}

/// The code and message of a PaymentIntent's `last_payment_error`, or of its status.
pub(crate) fn failure_of(pi: &Value, status: &str) -> (String, String) {
    let code = str_at(pi, &["last_payment_error", "code"])
        .unwrap_or(status)
        .to_string();
    let mut message = str_at(pi, &["last_payment_error", "message"])
        .unwrap_or("")
        .to_string();
    if message.is_empty() {
        message = format!("payment intent is {status}");
    }
    if let Some(decline) = str_at(pi, &["last_payment_error", "decline_code"]) {
        message.push_str(&format!(" (decline_code: {decline})"));
    }
    (code, message)
}

fn classify_success(body: &[u8]) -> SubmitOutcome {
    let Ok(pi) = serde_json::from_slice::<Value>(body) else {
        return SubmitOutcome::Unknown {
            reason: "HTTP 200 with an unparseable body".into(),
            reference: None,
        };
    };
    let Some(id) = str_at(&pi, &["id"]).map(str::to_string) else {
        return SubmitOutcome::Unknown {
            reason: "HTTP 200 without a PaymentIntent id".into(),
            reference: None,
        };
    };
    let status = str_at(&pi, &["status"]).unwrap_or("").to_string();
    match status.as_str() {
        "succeeded" => SubmitOutcome::Succeeded {
            reference: id,
            result: pi,
            replayed: false,
        },
        "requires_payment_method" | "requires_action" | "canceled" => {
            let (code, message) = failure_of(&pi, &status);
            SubmitOutcome::Declined {
                code,
                message,
                reference: Some(id),
            }
        }
        "processing" => SubmitOutcome::Unknown {
            reason: "payment is processing".into(),
            reference: Some(id),
        },
        other => SubmitOutcome::Unknown {
            reason: format!("unexpected payment status {other:?}"),
            reference: Some(id),
        },
    }
}

/// Classifies an HTTP response to `POST /v1/payment_intents`.
pub fn classify_response(status: u16, body: &[u8]) -> SubmitOutcome {
    if (200..300).contains(&status) {
        return classify_success(body);
    }
    let parsed: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let error = parsed.get("error").cloned().unwrap_or(Value::Null);
    let kind = str_at(&error, &["type"]).unwrap_or("").to_string();
    let code = str_at(&error, &["code"]).unwrap_or("").to_string();
    let message = str_at(&error, &["message"]).unwrap_or("").to_string();
    let reference = str_at(&error, &["payment_intent", "id"]).map(str::to_string);
    let described = format!("HTTP {status} {kind} {code}: {message}");
    match (status, kind.as_str()) {
        (402, "card_error") => {
            let mut message = message;
            if let Some(decline) = str_at(&error, &["decline_code"]) {
                message.push_str(&format!(" (decline_code: {decline})"));
            }
            let code = if code.is_empty() {
                "card_declined".to_string()
            } else {
                code
            };
            SubmitOutcome::Declined {
                code,
                message,
                reference,
            }
        }
        (400, "idempotency_error") => SubmitOutcome::KeyReused { reason: described },
        (400, _) if reference.is_some() => SubmitOutcome::Unknown {
            reason: described,
            reference,
        },
        (409, _) => SubmitOutcome::Unknown {
            reason: described,
            reference,
        },
        (429, _) => SubmitOutcome::RateLimited {
            reason: described,
            retry_after_ms: None,
        },
        (401 | 403 | 404, _) => SubmitOutcome::misconfigured(&described),
        (400..=499, _) => SubmitOutcome::Declined {
            code: if code.is_empty() {
                format!("http_{status}")
            } else {
                code
            },
            message: if message.is_empty() {
                described
            } else {
                message
            },
            reference,
        },
        _ => SubmitOutcome::Unknown {
            reason: described,
            reference,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err(kind: &str, code: &str) -> Vec<u8> {
        serde_json::to_vec(&json!({"error": {"type": kind, "code": code, "message": "m"}})).unwrap()
    }

    #[test]
    fn the_table() {
        let pi =
            |status: &str| serde_json::to_vec(&json!({"id": "pi_1", "status": status})).unwrap();
        assert!(matches!(
            classify_response(200, &pi("succeeded")),
            SubmitOutcome::Succeeded { .. }
        ));
        assert!(matches!(
            classify_response(200, &pi("processing")),
            SubmitOutcome::Unknown {
                reference: Some(_),
                ..
            }
        ));
        for s in ["requires_payment_method", "requires_action", "canceled"] {
            assert!(
                matches!(
                    classify_response(200, &pi(s)),
                    SubmitOutcome::Declined {
                        reference: Some(_),
                        ..
                    }
                ),
                "{s}"
            );
        }
        assert!(matches!(
            classify_response(200, &pi("requires_capture")),
            SubmitOutcome::Unknown { .. }
        ));
        assert!(matches!(
            classify_response(200, b"not json"),
            SubmitOutcome::Unknown {
                reference: None,
                ..
            }
        ));
        let declined = serde_json::to_vec(
            &json!({"error": {"type": "card_error", "code": "card_declined",
            "decline_code": "generic_decline", "message": "no", "payment_intent": {"id": "pi_9"}}}),
        )
        .unwrap();
        match classify_response(402, &declined) {
            SubmitOutcome::Declined {
                code,
                reference,
                message,
            } => {
                assert_eq!(code, "card_declined");
                assert_eq!(reference.as_deref(), Some("pi_9"));
                assert!(message.contains("generic_decline"));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            classify_response(400, &err("idempotency_error", "")),
            SubmitOutcome::KeyReused { .. }
        ));
        // An answered request is never "not submitted": a 4xx is a failure by its code.
        for code in [
            "resource_missing",
            "parameter_invalid_integer",
            "amount_too_small",
            "parameter_missing",
            "parameter_unknown",
        ] {
            assert_eq!(
                classify_response(400, &err("invalid_request_error", code)),
                SubmitOutcome::Declined {
                    code: code.into(),
                    message: "m".into(),
                    reference: None
                },
                "{code}"
            );
        }
        // The same code at 404 (a path that names no object) is payonce's configuration, not the
        // operation's details.
        assert!(matches!(
            classify_response(404, &err("invalid_request_error", "resource_missing")),
            SubmitOutcome::Misconfigured { .. }
        ));
        assert_eq!(
            classify_response(410, b""),
            SubmitOutcome::Declined {
                code: "http_410".into(),
                message: "HTTP 410  : ".into(),
                reference: None
            }
        );
        assert!(matches!(
            classify_response(429, &err("invalid_request_error", "rate_limit")),
            SubmitOutcome::RateLimited {
                retry_after_ms: None,
                ..
            }
        ));
        for s in [401, 403, 404] {
            assert!(matches!(
                classify_response(s, &err("invalid_request_error", "x")),
                SubmitOutcome::Misconfigured { .. }
            ));
        }
        for s in [301, 307, 409, 500, 502, 503, 504] {
            assert!(
                matches!(
                    classify_response(s, &err("api_error", "")),
                    SubmitOutcome::Unknown { .. }
                ),
                "{s}"
            );
        }
        assert!(matches!(
            classify_response(502, b"<html>bad gateway</html>"),
            SubmitOutcome::Unknown { .. }
        ));
    }
}
