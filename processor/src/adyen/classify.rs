//! From what Adyen answered (or did not) to one of the outcomes. Errors are Adyen's `ServiceError`
//! (`status`, `errorCode`, `errorType`, `message`, `pspReference`); a `Transient-Error: true` header
//! marks an answer after which "a subsequent request using the same idempotency key will be processed
//! as if it was the first request".
//!
//! Payments (`POST /v71/payments`):
//!
//! | what happened | outcome | why |
//! | --- | --- | --- |
//! | connect error (refused, DNS, TLS handshake, connect timeout) | Unreachable | nothing left this process |
//! | timeout after connecting, reset after sending, unreadable body | Unknown | Adyen may have executed it |
//! | 200 `resultCode: Authorised` | Succeeded (`pspReference`) | |
//! | 200 `Refused`, `Cancelled` | Declined (`refusalReasonCode`, `refusalReason`, with reference) | Adyen's definitive answer |
//! | 200 `Error` with a `refusalReason` | Declined (with reference) | the issuer refused it |
//! | 200 `Error` without one | Unknown (with reference) | Adyen does not say what happened |
//! | 200 `Received`, `Pending` | Unknown (with reference) | settles later; the AUTHORISATION notification says how |
//! | 200 `RedirectShopper`, `IdentifyShopper`, `ChallengeShopper`, `PresentToShopper` | Declined (with reference) | merchant-initiated: no shopper is there to act |
//! | 200 any other `resultCode`, no `pspReference`, unparseable | Unknown | |
//! | 409 `704` (request already processed or in progress) | Unknown | the key's first request is still executing; retry with the same key later |
//! | 422 `704` with another body under the key | KeyReused | the key names the business action: Adyen holds another request (another amount) for this business key; a human sees both |
//! | 400, 422 naming a `pspReference` | Unknown (with reference) | something was created |
//! | 401, 403, 404 | Misconfigured | Adyen answered, refusing payonce's API key, its permissions (another merchant account) or its URL: a configuration error a human mends, then retries with the same key |
//! | any other 4xx (422 `800` "Contract not found", `137` "Invalid amount", `702`, …) | Declined (code `adyen_<errorCode>`, else `http_<status>`; no reference) | the request reached Adyen and was refused for what it says, the same way every time (a request that got an answer is never "not submitted") |
//! | 3xx | Unknown | a redirect is never followed ([`crate::redirect`]): a configuration error, and the request was sent |
//! | 429 | RateLimited | refused before execution |
//! | 5xx with `Transient-Error: true` | NotSubmitted | nothing reached the issuer; the same key runs it afresh |
//! | 5xx | Unknown | Adyen may have executed it (and stores the error under the key) |
//! | any other status | Unknown | |
//!
//! Refunds (`POST /v71/payments/{pspReference}/refunds`) answer `201 {status: received}`: Unknown
//! with the refund's `pspReference` (the REFUND notification settles it); errors as above.

use crate::SubmitOutcome;
use serde_json::Value;

/// Adyen's `errorCode` for "request already processed or in progress" under an idempotency key.
pub const IN_PROGRESS_CODE: &str = "704";

/// The result codes that need a shopper to act (redirect, 3-D Secure, a voucher): a
/// merchant-initiated payment has nobody to act on them.
pub const SHOPPER_ACTION_CODES: [&str; 4] = [
    "RedirectShopper",
    "IdentifyShopper",
    "ChallengeShopper",
    "PresentToShopper",
];

fn text<'a>(v: &'a Value, field: &str) -> Option<&'a str> {
    v.get(field).and_then(Value::as_str)
}

fn classify_payment_success(body: &[u8]) -> SubmitOutcome {
    let Ok(payment) = serde_json::from_slice::<Value>(body) else {
        return SubmitOutcome::Unknown {
            reason: "HTTP 200 with an unparseable body".into(),
            reference: None,
        };
    };
    let Some(psp) = text(&payment, "pspReference").map(str::to_string) else {
        return SubmitOutcome::Unknown {
            reason: "HTTP 200 without a pspReference".into(),
            reference: None,
        };
    };
    let result_code = text(&payment, "resultCode").unwrap_or("").to_string();
    let refusal = text(&payment, "refusalReason").map(str::to_string);
    let refusal_code = text(&payment, "refusalReasonCode").map(str::to_string);
    let declined = || SubmitOutcome::Declined {
        code: refusal_code
            .as_ref()
            .map_or_else(|| result_code.clone(), |c| format!("refusal_{c}")),
        message: match &refusal {
            Some(r) => format!("{result_code}: {r}"),
            None => format!("payment is {result_code}"),
        },
        reference: Some(psp.clone()),
    };
    match result_code.as_str() {
        "Authorised" => SubmitOutcome::Succeeded {
            reference: psp,
            result: payment,
            replayed: false,
        },
        "Refused" | "Cancelled" => declined(),
        "Error" if refusal.is_some() => declined(),
        code if SHOPPER_ACTION_CODES.contains(&code) => SubmitOutcome::Declined {
            code: code.to_string(),
            message: format!("Adyen asks the shopper to act ({code}); nobody is present"),
            reference: Some(psp),
        },
        "Received" | "Pending" => SubmitOutcome::Unknown {
            reason: format!("payment is {result_code}: the AUTHORISATION notification settles it"),
            reference: Some(psp),
        },
        other => SubmitOutcome::Unknown {
            reason: format!("unexpected resultCode {other:?}"),
            reference: Some(psp),
        },
    }
}

fn classify_refund_success(body: &[u8]) -> SubmitOutcome {
    let parsed: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let reference = text(&parsed, "pspReference").map(str::to_string);
    let status = text(&parsed, "status").unwrap_or("");
    SubmitOutcome::Unknown {
        reason: if status == "received" {
            "refund received: the REFUND notification settles it".to_string()
        } else {
            format!("unexpected refund status {status:?}")
        },
        reference,
    }
}

/// Classifies an error answer (any non-2xx), payments and refunds alike.
fn classify_error(status: u16, transient: bool, body: &[u8]) -> SubmitOutcome {
    let parsed: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let code = text(&parsed, "errorCode").unwrap_or("").to_string();
    let kind = text(&parsed, "errorType").unwrap_or("").to_string();
    let message = text(&parsed, "message").unwrap_or("").to_string();
    let reference = text(&parsed, "pspReference").map(str::to_string);
    let described = format!("HTTP {status} {kind} {code}: {message}");
    match status {
        409 => SubmitOutcome::Unknown {
            reason: format!("{described} (the key's first request is in progress)"),
            reference,
        },
        422 if code == IN_PROGRESS_CODE => SubmitOutcome::KeyReused { reason: described },
        // A validation error that names a payment: something was created.
        400 | 422 if reference.is_some() => SubmitOutcome::Unknown {
            reason: described,
            reference,
        },
        401 | 403 | 404 => SubmitOutcome::misconfigured(&described),
        429 => SubmitOutcome::RateLimited {
            reason: described,
            retry_after_ms: None,
        },
        400..=499 => SubmitOutcome::Declined {
            code: if code.is_empty() {
                format!("http_{status}")
            } else {
                format!("adyen_{code}")
            },
            message: if message.is_empty() {
                described
            } else {
                message
            },
            reference: None,
        },
        500..=599 if transient => SubmitOutcome::NotSubmitted {
            reason: format!("{described} (Transient-Error: nothing reached the issuer)"),
        },
        _ => SubmitOutcome::Unknown {
            reason: described,
            reference,
        },
    }
}

/// Classifies an HTTP response to `POST /v71/payments`.
pub fn classify_payment(status: u16, transient: bool, body: &[u8]) -> SubmitOutcome {
    if (200..300).contains(&status) {
        return classify_payment_success(body);
    }
    classify_error(status, transient, body)
}

/// Classifies an HTTP response to `POST /v71/payments/{pspReference}/refunds`.
pub fn classify_refund(status: u16, transient: bool, body: &[u8]) -> SubmitOutcome {
    if (200..300).contains(&status) {
        return classify_refund_success(body);
    }
    classify_error(status, transient, body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body(v: Value) -> Vec<u8> {
        serde_json::to_vec(&v).unwrap()
    }

    fn error(status: u16, code: &str) -> Vec<u8> {
        body(
            json!({"status": status, "errorCode": code, "errorType": "validation", "message": "m"}),
        )
    }

    #[test]
    fn the_payment_table() {
        let pay = |code: &str| body(json!({"pspReference": "PSP1", "resultCode": code}));
        assert!(matches!(
            classify_payment(200, false, &pay("Authorised")),
            SubmitOutcome::Succeeded { .. }
        ));
        let refused = body(json!({"pspReference": "PSP1", "resultCode": "Refused",
            "refusalReason": "Not enough balance", "refusalReasonCode": "12"}));
        assert_eq!(
            classify_payment(200, false, &refused),
            SubmitOutcome::Declined {
                code: "refusal_12".into(),
                message: "Refused: Not enough balance".into(),
                reference: Some("PSP1".into())
            }
        );
        assert!(matches!(
            classify_payment(200, false, &pay("Cancelled")),
            SubmitOutcome::Declined {
                reference: Some(_),
                ..
            }
        ));
        assert!(matches!(
            classify_payment(200, false, &pay("Error")),
            SubmitOutcome::Unknown {
                reference: Some(_),
                ..
            }
        ));
        for code in ["Received", "Pending", "PartiallyAuthorised"] {
            assert!(
                matches!(
                    classify_payment(200, false, &pay(code)),
                    SubmitOutcome::Unknown {
                        reference: Some(_),
                        ..
                    }
                ),
                "{code}"
            );
        }
        for code in SHOPPER_ACTION_CODES {
            assert!(matches!(
                classify_payment(200, false, &pay(code)),
                SubmitOutcome::Declined { .. }
            ));
        }
        assert!(matches!(
            classify_payment(200, false, b"{}"),
            SubmitOutcome::Unknown {
                reference: None,
                ..
            }
        ));
        assert!(matches!(
            classify_payment(409, true, &error(409, IN_PROGRESS_CODE)),
            SubmitOutcome::Unknown { .. }
        ));
        assert!(matches!(
            classify_payment(422, false, &error(422, IN_PROGRESS_CODE)),
            SubmitOutcome::KeyReused { .. }
        ));
        assert!(matches!(
            classify_payment(422, false, &error(422, "800")),
            SubmitOutcome::Declined {
                reference: None,
                ..
            }
        ));
        // An answered request is never "not submitted".
        for s in [400, 422] {
            assert_eq!(
                classify_payment(s, false, &error(s, "702")),
                SubmitOutcome::Declined {
                    code: "adyen_702".into(),
                    message: "m".into(),
                    reference: None
                },
                "{s}"
            );
        }
        for s in [401, 403, 404] {
            assert!(
                matches!(
                    classify_payment(s, false, &error(s, "010")),
                    SubmitOutcome::Misconfigured { .. }
                ),
                "{s}"
            );
        }
        assert!(matches!(
            classify_payment(429, false, &error(429, "")),
            SubmitOutcome::RateLimited { .. }
        ));
        assert!(matches!(
            classify_payment(500, true, &error(500, "")),
            SubmitOutcome::NotSubmitted { .. }
        ));
        for s in [301, 307, 500, 502, 503] {
            assert!(matches!(
                classify_payment(s, false, b"<html>"),
                SubmitOutcome::Unknown { .. }
            ));
        }
    }

    #[test]
    fn a_received_refund_waits_for_its_notification() {
        let received = body(json!({"pspReference": "RF1", "status": "received"}));
        assert_eq!(
            classify_refund(201, false, &received),
            SubmitOutcome::Unknown {
                reason: "refund received: the REFUND notification settles it".into(),
                reference: Some("RF1".into())
            }
        );
    }
}
