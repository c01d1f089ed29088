//! Adyen standard notifications on the wire: the JSON body (`notificationItems[].NotificationRequestItem`),
//! each item's HMAC signature (`additionalData.hmacSignature`) verified per Adyen's documented algorithm,
//! and the item parsed into what payonce checks. Pure: storing is [`crate::ingest::ingest_adyen`].
//!
//! Signature: base64 of HMAC-SHA256 over `pspReference:originalReference:merchantAccountCode:
//! merchantReference:value:currency:eventCode:success` (an absent field is empty), keyed by the
//! hex-decoded HMAC key from Adyen's Customer Area.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit, Mac};
use payonce_core::id::OperationId;
use payonce_ledger::LedgerError;
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// The processor name notifications are stored under.
pub const PROCESSOR: &str = "adyen";
/// Largest notification body accepted.
pub const PAYLOAD_LEN_MAX: usize = 512 * 1024;
/// Most items in one notification request (Adyen sends one per request today).
pub const ITEMS_MAX: usize = 100;
/// Longest HMAC key accepted, in hex characters (Adyen's keys are 64 bytes: 128 hex characters).
pub const HMAC_KEY_HEX_LEN_MAX: usize = 256;
/// What Adyen requires a receiver to answer once it has stored a notification.
pub const ACCEPTED: &str = "[accepted]";
/// The event codes that may carry an outcome payonce checks.
pub const OUTCOME_EVENT_CODES: [&str; 2] = ["AUTHORISATION", "REFUND"];

/// Why a notification was refused or could not be stored.
#[derive(Debug, thiserror::Error)]
pub enum AdyenWebhookError {
    /// An item carries no `hmacSignature`.
    #[error("a notification item has no additionalData.hmacSignature")]
    MissingSignature,
    /// An item's signature does not match.
    #[error("a notification item's signature does not match")]
    BadSignature,
    /// An item names another merchant account than the configured one.
    #[error("a notification item names another merchant account")]
    WrongMerchantAccount,
    /// The body is larger than [`PAYLOAD_LEN_MAX`].
    #[error("payload larger than {PAYLOAD_LEN_MAX} bytes")]
    PayloadTooLarge,
    /// The body is not an Adyen notification.
    #[error("payload is not an Adyen notification: {0}")]
    MalformedPayload(String),
    /// No HMAC key or merchant account is configured: every notification is refused.
    #[error("no Adyen HMAC key configured")]
    NoKey,
    /// The ledger failed; Adyen will redeliver.
    #[error("ledger error")]
    Ledger(#[from] LedgerError),
}

impl AdyenWebhookError {
    /// The HTTP status to answer with: 4xx for what a redelivery won't fix, 5xx so Adyen retries.
    pub fn status_code(&self) -> u16 {
        match self {
            AdyenWebhookError::MissingSignature
            | AdyenWebhookError::BadSignature
            | AdyenWebhookError::WrongMerchantAccount
            | AdyenWebhookError::MalformedPayload(_) => 400,
            AdyenWebhookError::PayloadTooLarge => 413,
            AdyenWebhookError::NoKey | AdyenWebhookError::Ledger(_) => 503,
        }
    }

    /// Stable code for logs and API errors.
    pub fn code(&self) -> &'static str {
        match self {
            AdyenWebhookError::MissingSignature => "signature_missing",
            AdyenWebhookError::BadSignature => "signature_mismatch",
            AdyenWebhookError::WrongMerchantAccount => "merchant_account_mismatch",
            AdyenWebhookError::PayloadTooLarge => "payload_too_large",
            AdyenWebhookError::MalformedPayload(_) => "payload_malformed",
            AdyenWebhookError::NoKey => "webhook_secret_missing",
            AdyenWebhookError::Ledger(_) => "ledger_unavailable",
        }
    }
}

/// An amount as a notification carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotificationAmount {
    /// ISO 4217, upper case.
    #[serde(default)]
    pub currency: String,
    /// Minor units.
    #[serde(default)]
    pub value: i64,
}

/// One `NotificationRequestItem`, as far as payonce reads it (stored whole as the hint's payload).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NotificationItem {
    /// `additionalData`, including `hmacSignature`.
    #[serde(default)]
    pub additional_data: serde_json::Map<String, serde_json::Value>,
    /// The amount.
    pub amount: NotificationAmount,
    /// `AUTHORISATION`, `REFUND`, ...
    pub event_code: String,
    /// When it happened (ISO 8601).
    #[serde(default)]
    pub event_date: String,
    /// The merchant account.
    pub merchant_account_code: String,
    /// The `reference` of the request: payonce's operation id.
    #[serde(default)]
    pub merchant_reference: String,
    /// For a REFUND: the payment's `pspReference`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_reference: Option<String>,
    /// The payment method (e.g. `visa`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payment_method: Option<String>,
    /// The payment's (or refund's) `pspReference`.
    pub psp_reference: String,
    /// Refusal reason, when `success` is `false`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// `"true"` or `"false"`.
    pub success: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Wrapped {
    notification_request_item: NotificationItem,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Notification {
    notification_items: Vec<Wrapped>,
}

impl NotificationItem {
    /// Whether Adyen reports success.
    pub fn succeeded(&self) -> bool {
        self.success == "true"
    }

    /// The string Adyen signs.
    pub fn signing_string(&self) -> String {
        [
            self.psp_reference.as_str(),
            self.original_reference.as_deref().unwrap_or(""),
            self.merchant_account_code.as_str(),
            self.merchant_reference.as_str(),
            &self.amount.value.to_string(),
            self.amount.currency.as_str(),
            self.event_code.as_str(),
            self.success.as_str(),
        ]
        .join(":")
    }

    /// The stored event id: Adyen identifies a notification by its event code, `pspReference` and
    /// `success` (a redelivery carries the same three).
    pub fn event_id(&self) -> String {
        format!(
            "{}:{}:{}",
            self.event_code, self.psp_reference, self.success
        )
    }

    /// The operation the item names (`merchantReference`), if it is a payonce operation id.
    pub fn operation(&self) -> Option<OperationId> {
        OperationId::parse(&self.merchant_reference).ok()
    }

    /// Whether the item may carry an outcome payonce checks.
    pub fn claims_outcome(&self) -> bool {
        OUTCOME_EVENT_CODES.contains(&self.event_code.as_str())
    }
}

/// Decodes Adyen's hex HMAC key; `None` if it is not even-length hex of at most
/// [`HMAC_KEY_HEX_LEN_MAX`] characters.
pub fn decode_key(hex_key: &str) -> Option<Vec<u8>> {
    if hex_key.is_empty() || hex_key.len() > HMAC_KEY_HEX_LEN_MAX {
        return None;
    }
    hex::decode(hex_key).ok()
}

/// The base64 signature of an item under `key` (hex-decoded already).
pub fn sign(key: &[u8], item: &NotificationItem) -> String {
    // HMAC takes keys of any length; this never fails.
    let Ok(mut mac) = <Hmac<Sha256> as KeyInit>::new_from_slice(key) else {
        return String::new();
    };
    mac.update(item.signing_string().as_bytes());
    STANDARD.encode(mac.finalize().into_bytes())
}

/// Verifies one item's `hmacSignature` in constant time.
pub fn verify_item(key: &[u8], item: &NotificationItem) -> Result<(), AdyenWebhookError> {
    let Some(given) = item
        .additional_data
        .get("hmacSignature")
        .and_then(serde_json::Value::as_str)
    else {
        return Err(AdyenWebhookError::MissingSignature);
    };
    let expected = sign(key, item);
    if bool::from(expected.as_bytes().ct_eq(given.as_bytes())) {
        Ok(())
    } else {
        Err(AdyenWebhookError::BadSignature)
    }
}

/// Parses a notification body and verifies every item: signature, then merchant account. Any item
/// refused refuses the whole delivery (nothing is stored; Adyen redelivers it).
pub fn verify_notification(
    hex_key: Option<&str>,
    merchant_account: Option<&str>,
    body: &[u8],
) -> Result<Vec<NotificationItem>, AdyenWebhookError> {
    let (Some(key), Some(account)) = (hex_key.and_then(decode_key), merchant_account) else {
        return Err(AdyenWebhookError::NoKey);
    };
    if body.len() > PAYLOAD_LEN_MAX {
        return Err(AdyenWebhookError::PayloadTooLarge);
    }
    let parsed: Notification = serde_json::from_slice(body)
        .map_err(|e| AdyenWebhookError::MalformedPayload(e.to_string()))?;
    if parsed.notification_items.is_empty() || parsed.notification_items.len() > ITEMS_MAX {
        return Err(AdyenWebhookError::MalformedPayload(format!(
            "expected 1 to {ITEMS_MAX} notification items, got {}",
            parsed.notification_items.len()
        )));
    }
    let items: Vec<NotificationItem> = parsed
        .notification_items
        .into_iter()
        .map(|w| w.notification_request_item)
        .collect();
    for item in &items {
        verify_item(&key, item)?;
        if item.merchant_account_code != account {
            return Err(AdyenWebhookError::WrongMerchantAccount);
        }
    }
    Ok(items)
}

/// A stored item read back (the hint's payload); `None` if it is not one.
pub fn item_of(payload: &str) -> Option<NotificationItem> {
    serde_json::from_str(payload).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Adyen's own documented example: key, item and expected signature.
    fn example() -> (Vec<u8>, NotificationItem) {
        let key =
            decode_key("44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056").unwrap();
        let item: NotificationItem = serde_json::from_value(json!({
            "additionalData": {},
            "amount": {"currency": "EUR", "value": 1130},
            "eventCode": "AUTHORISATION",
            "eventDate": "2019-05-06T17:15:34.121+02:00",
            "merchantAccountCode": "TestMerchant",
            "merchantReference": "TestPayment-1407325143704",
            "paymentMethod": "visa",
            "pspReference": "7914073381342284",
            "success": "true"
        }))
        .unwrap();
        (key, item)
    }

    #[test]
    fn the_signing_string_has_eight_fields_and_an_empty_original_reference() {
        let (_, item) = example();
        assert_eq!(
            item.signing_string(),
            "7914073381342284::TestMerchant:TestPayment-1407325143704:1130:EUR:AUTHORISATION:true"
        );
    }

    #[test]
    fn signatures_verify_and_any_change_breaks_them() {
        let (key, mut item) = example();
        let sig = sign(&key, &item);
        assert_eq!(sig.len(), 44, "base64 of 32 bytes");
        item.additional_data
            .insert("hmacSignature".into(), json!(sig));
        assert!(verify_item(&key, &item).is_ok());
        let mut changed = item.clone();
        changed.amount.value += 1;
        assert!(matches!(
            verify_item(&key, &changed),
            Err(AdyenWebhookError::BadSignature)
        ));
        item.additional_data.remove("hmacSignature");
        assert!(matches!(
            verify_item(&key, &item),
            Err(AdyenWebhookError::MissingSignature)
        ));
    }

    #[test]
    fn keys_are_hex_within_the_limit() {
        assert!(decode_key("zz").is_none());
        assert!(decode_key("abc").is_none());
        assert!(decode_key("").is_none());
        assert!(decode_key(&"a".repeat(HMAC_KEY_HEX_LEN_MAX)).is_some());
        assert!(decode_key(&"a".repeat(HMAC_KEY_HEX_LEN_MAX + 2)).is_none());
    }
}
