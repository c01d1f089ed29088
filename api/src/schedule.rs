//! When a new operation may run and who waits for it, as callers write them: the optional
//! `priority`, `not_before` (RFC 3339) and `not_before_ms` (milliseconds since the epoch, the form
//! every other time of the API takes) of `POST /v1/operations`, each item of its batch, and
//! `payonce enqueue`'s lines. Each is read from its raw JSON value, so a wrong type is answered
//! `invalid_request` naming the field, as an out-of-range value is (`docs/api.md`).

use payonce_core::clock::Timestamp;
use payonce_core::priority::{Priority, check_not_before};
use serde_json::Value;

/// An RFC 3339 time as [`parse_rfc3339`] reads it, for the messages.
pub const RFC3339_EXAMPLE: &str = "2027-02-01T00:00:00Z";

/// The schedule fields of a create body, unread (`null` is taken as absent).
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct ScheduleFields {
    /// `"interactive"` or `"bulk"`.
    #[serde(default)]
    pub priority: Option<Value>,
    /// An RFC 3339 time with its offset.
    #[serde(default)]
    pub not_before: Option<Value>,
    /// Milliseconds since the Unix epoch (at most one of `not_before` and this).
    #[serde(default)]
    pub not_before_ms: Option<Value>,
}

/// A new operation's schedule, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    /// Who waits for it.
    pub priority: Priority,
    /// Not claimed before this; `None` when it may run now.
    pub not_before: Option<Timestamp>,
}

/// The milliseconds since the epoch of an RFC 3339 time with its offset
/// (`2027-02-01T00:00:00Z`, `2027-02-01T09:00:00+09:00`); `None` when it is not one.
pub fn parse_rfc3339(text: &str) -> Option<Timestamp> {
    chrono::DateTime::parse_from_rfc3339(text.trim())
        .ok()
        .map(|t| Timestamp::from_millis(t.timestamp_millis()))
}

/// The priority a field names: `Ok(None)` when absent; the message names `field` otherwise.
pub fn parse_priority(field: &str, raw: Option<&Value>) -> Result<Option<Priority>, String> {
    match raw {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(name)) => Priority::parse(name)
            .map(Some)
            .ok_or_else(|| format!("{field}: must be \"interactive\" or \"bulk\"; got {name:?}")),
        Some(other) => Err(format!(
            "{field}: must be the string \"interactive\" or \"bulk\"; got {}",
            kind_of(other)
        )),
    }
}

/// Reads and checks `fields` against `now` (`priority::check_not_before`: at most
/// `NOT_BEFORE_PAST_TOLERANCE` back, `NOT_BEFORE_HORIZON` ahead), `default` when no priority is
/// given. The message names the field, after `prefix` (`""`, or an item's place).
pub fn parse_schedule(
    fields: &ScheduleFields,
    default: Priority,
    now: Timestamp,
    prefix: &str,
) -> Result<Schedule, String> {
    let priority = parse_priority(&format!("{prefix}priority"), fields.priority.as_ref())?;
    let given = |v: &Option<Value>| v.as_ref().filter(|v| !v.is_null()).cloned();
    let (field, at) = match (given(&fields.not_before), given(&fields.not_before_ms)) {
        (None, None) => ("", None),
        (Some(_), Some(_)) => {
            return Err(format!(
                "{prefix}not_before, {prefix}not_before_ms: give at most one of them"
            ));
        }
        (Some(Value::String(text)), None) => match parse_rfc3339(&text) {
            Some(at) => ("not_before", Some(at)),
            None => {
                return Err(format!(
                    "{prefix}not_before: must be an RFC 3339 time with its offset, like \
                     {RFC3339_EXAMPLE:?}; got {text:?}"
                ));
            }
        },
        (Some(other), None) => {
            return Err(format!(
                "{prefix}not_before: must be an RFC 3339 string, like {RFC3339_EXAMPLE:?}; got {}",
                kind_of(&other)
            ));
        }
        (None, Some(ms)) => match ms.as_i64() {
            Some(ms) => ("not_before_ms", Some(Timestamp::from_millis(ms))),
            None => {
                return Err(format!(
                    "{prefix}not_before_ms: must be an integer of milliseconds since the Unix \
                     epoch; got {}",
                    kind_of(&ms)
                ));
            }
        },
    };
    let not_before = match at {
        None => None,
        Some(at) => check_not_before(at, now).map_err(|e| format!("{prefix}{field}: {e}"))?,
    };
    Ok(Schedule {
        priority: priority.unwrap_or(default),
        not_before,
    })
}

/// A JSON value's type, for a message.
fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use payonce_core::priority::{NOT_BEFORE_HORIZON, NOT_BEFORE_PAST_TOLERANCE};
    use serde_json::json;

    const NOW: Timestamp = Timestamp::from_millis(1_800_000_000_000);

    fn schedule(fields: Value) -> Result<Schedule, String> {
        let fields: ScheduleFields = serde_json::from_value(fields).unwrap();
        parse_schedule(&fields, Priority::Bulk, NOW, "")
    }

    #[test]
    fn absent_fields_take_the_default_and_run_now() {
        assert_eq!(
            schedule(json!({})),
            Ok(Schedule {
                priority: Priority::Bulk,
                not_before: None
            })
        );
        assert_eq!(
            schedule(json!({"priority": null, "not_before": null})),
            Ok(Schedule {
                priority: Priority::Bulk,
                not_before: None
            })
        );
    }

    #[test]
    fn both_time_forms_name_the_same_instant() {
        // 2027-01-15T08:00:00Z is NOW; a day later:
        let later = NOW + std::time::Duration::from_secs(86_400);
        let rfc =
            schedule(json!({"priority": "interactive", "not_before": "2027-01-16T08:00:00Z"}));
        assert_eq!(
            rfc,
            Ok(Schedule {
                priority: Priority::Interactive,
                not_before: Some(later)
            })
        );
        let offset = schedule(json!({"not_before": "2027-01-16T17:00:00+09:00"}));
        assert_eq!(offset.map(|s| s.not_before), Ok(Some(later)));
        let ms = schedule(json!({"not_before_ms": later.as_millis()}));
        assert_eq!(ms.map(|s| s.not_before), Ok(Some(later)));
    }

    #[test]
    fn every_bad_value_names_its_field() {
        let tol = NOT_BEFORE_PAST_TOLERANCE.as_millis() as i64;
        let horizon = NOT_BEFORE_HORIZON.as_millis() as i64;
        let now = NOW.as_millis();
        let cases = [
            (json!({"priority": "urgent"}), "priority: must be"),
            (json!({"priority": 1}), "priority: must be the string"),
            (
                json!({"not_before": "2027-01-16"}),
                "not_before: must be an RFC 3339 time",
            ),
            (
                json!({"not_before": now}),
                "not_before: must be an RFC 3339 string",
            ),
            (
                json!({"not_before_ms": "soon"}),
                "not_before_ms: must be an integer",
            ),
            (
                json!({"not_before_ms": 1.5}),
                "not_before_ms: must be an integer",
            ),
            (
                json!({"not_before_ms": now - tol - 1_000}),
                "not_before_ms: not_before lies 601 s in the past",
            ),
            (
                json!({"not_before_ms": now + horizon + 1}),
                "not_before_ms: not_before lies more than 366 days ahead",
            ),
            (
                json!({"not_before": "2026-01-01T00:00:00Z"}),
                "not_before: not_before lies",
            ),
            (
                json!({"not_before": "2027-01-16T08:00:00Z", "not_before_ms": now}),
                "not_before, not_before_ms: give at most one",
            ),
        ];
        for (fields, start) in cases {
            let e = schedule(fields.clone()).unwrap_err();
            assert!(e.starts_with(start), "{fields}: {e}");
        }
        let fields: ScheduleFields = serde_json::from_value(json!({"priority": "x"})).unwrap();
        let e = parse_schedule(&fields, Priority::Bulk, NOW, "operations[3].").unwrap_err();
        assert!(e.starts_with("operations[3].priority: "), "{e}");
    }

    #[test]
    fn a_time_a_little_behind_is_now() {
        let behind = NOW.as_millis() - NOT_BEFORE_PAST_TOLERANCE.as_millis() as i64;
        assert_eq!(
            schedule(json!({"not_before_ms": behind})).map(|s| s.not_before),
            Ok(None)
        );
    }
}
