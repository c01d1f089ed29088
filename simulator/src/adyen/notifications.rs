//! Adyen's standard notifications: one signed `NotificationRequestItem` per event (`AUTHORISATION`,
//! `REFUND`), its `hmacSignature` the base64 HMAC-SHA256 of Adyen's signing string under the
//! configured hex key, queued in the same outbox as Stripe's events. A key that is not hex signs with
//! an empty key (start-up refuses one, so this never happens while serving).

use crate::app::Shared;
use crate::store::{NewEvent, PaymentRow};
use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::json;
use sha2::Sha256;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_dates_are_iso_8601() {
        assert_eq!(event_date(0), "1970-01-01T00:00:00+00:00");
        assert_eq!(event_date(1_700_000_000_000), "2023-11-14T22:13:20+00:00");
    }
}
