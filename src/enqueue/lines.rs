//! Reading `payonce enqueue`'s file: one line at a time (at most [`LINE_LEN_MAX`] bytes), a CSV
//! line (RFC 4180 quoting, columns named by the header) or an NDJSON line made the batch route's
//! item, its approval given its own details' hash and its schedule checked as the API checks it.

use super::LINE_LEN_MAX;
use anyhow::{Context, bail};
use payonce_api::schedule::{ScheduleFields, parse_schedule};
use payonce_core::clock::Timestamp;
use payonce_core::details::{Details, RawDetails};
use payonce_core::priority::Priority;
use serde_json::{Map, Value, json};
use std::io::{BufRead, Read};

/// The CSV columns, in any order; the first six are required.
const CSV_COLUMNS: [&str; 13] = [
    "business_key",
    "amount",
    "currency",
    "customer",
    "payment_method",
    "invoice",
    "destination",
    "description",
    "approved_by",
    "details_hash",
    "priority",
    "not_before",
    "not_before_ms",
];
const CSV_REQUIRED: usize = 6;

/// One line of the file.
pub(super) enum Line {
    Text(String),
    TooLong,
    NotUtf8,
}

/// The next line, read at most [`LINE_LEN_MAX`] bytes at a time (the rest of a longer one is
/// skipped); `None` at the end.
pub(super) fn next_line(reader: &mut impl BufRead) -> anyhow::Result<Option<Line>> {
    let mut bytes = Vec::new();
    let limit = u64::try_from(LINE_LEN_MAX + 1).unwrap_or(u64::MAX);
    let n = Read::take(&mut *reader, limit)
        .read_until(b'\n', &mut bytes)
        .context("cannot read the file")?;
    if n == 0 {
        return Ok(None);
    }
    if bytes.last() != Some(&b'\n') && bytes.len() > LINE_LEN_MAX {
        // Skip to the end of this line.
        let mut rest = Vec::new();
        loop {
            rest.clear();
            let m = Read::take(&mut *reader, limit)
                .read_until(b'\n', &mut rest)
                .context("cannot read the file")?;
            if m == 0 || rest.last() == Some(&b'\n') {
                break;
            }
        }
        return Ok(Some(Line::TooLong));
    }
    while matches!(bytes.last(), Some(b'\n' | b'\r')) {
        bytes.pop();
    }
    Ok(Some(match String::from_utf8(bytes) {
        Ok(text) => Line::Text(text),
        Err(_) => Line::NotUtf8,
    }))
}

/// Lines in `reader` as [`next_line`] numbers them (a last line without a newline counts).
pub(super) fn count(reader: &mut impl BufRead) -> anyhow::Result<u64> {
    let mut lines = 0_u64;
    let mut ends_open = false;
    loop {
        let buffer = reader.fill_buf().context("cannot read the file")?;
        if buffer.is_empty() {
            break;
        }
        lines += buffer.iter().filter(|&&b| b == b'\n').count() as u64;
        ends_open = buffer.last() != Some(&b'\n');
        let n = buffer.len();
        reader.consume(n);
    }
    Ok(lines + u64::from(ends_open))
}

/// Splits a CSV line (RFC 4180 quoting: `"a, b"`, `""` for a quote; one record a line).
fn csv_fields(line: &str) -> Result<Vec<String>, String> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    let mut at_start = true;
    while let Some(c) = chars.next() {
        if quoted {
            match c {
                '"' if chars.peek() == Some(&'"') => {
                    chars.next();
                    field.push('"');
                }
                '"' => {
                    quoted = false;
                    if !matches!(chars.peek(), None | Some(',')) {
                        return Err("a quoted field goes on after its closing quote".into());
                    }
                }
                other => field.push(other),
            }
            continue;
        }
        match c {
            '"' if at_start => {
                quoted = true;
                at_start = false;
            }
            ',' => {
                fields.push(std::mem::take(&mut field));
                at_start = true;
            }
            other => {
                field.push(other);
                at_start = false;
            }
        }
    }
    if quoted {
        return Err("a quoted field is not closed on its line".into());
    }
    fields.push(field);
    Ok(fields)
}

/// The header row: for each of [`CSV_COLUMNS`], its position in the file (`usize::MAX`: absent).
pub(super) fn csv_header(line: &str) -> anyhow::Result<Vec<usize>> {
    let names = csv_fields(line.trim_start_matches('\u{feff}'))
        .map_err(|why| anyhow::anyhow!("the CSV header: {why}"))?;
    let mut positions = vec![usize::MAX; CSV_COLUMNS.len()];
    for (at, name) in names.iter().enumerate() {
        let name = name.trim();
        let Some(column) = CSV_COLUMNS.iter().position(|c| *c == name) else {
            bail!(
                "the CSV header names an unknown column {name:?}; the columns are {}",
                CSV_COLUMNS.join(", ")
            );
        };
        if positions[column] != usize::MAX {
            bail!("the CSV header names {name:?} twice");
        }
        positions[column] = at;
    }
    let missing: Vec<&str> = (0..CSV_REQUIRED)
        .filter(|&c| positions[c] == usize::MAX)
        .map(|c| CSV_COLUMNS[c])
        .collect();
    if !missing.is_empty() {
        bail!("the CSV header lacks {}", missing.join(", "));
    }
    Ok(positions)
}

/// A CSV line as a batch item, its schedule checked against `now`.
pub(super) fn csv_item(line: &str, columns: &[usize], now: Timestamp) -> Result<Value, String> {
    let fields = csv_fields(line)?;
    let width = columns.iter().filter(|&&c| c != usize::MAX).count();
    if fields.len() != width {
        return Err(format!(
            "{} fields where the header has {width}",
            fields.len()
        ));
    }
    let get = |name: &str| -> Option<&str> {
        let column = CSV_COLUMNS.iter().position(|c| *c == name)?;
        let at = *columns.get(column)?;
        fields.get(at).map(String::as_str).filter(|v| !v.is_empty())
    };
    let text = |name: &str| Value::from(get(name).unwrap_or_default());
    let amount: i64 = get("amount")
        .unwrap_or_default()
        .trim()
        .parse()
        .map_err(|_| "amount: not a whole number of minor units".to_string())?;
    let mut details = Map::new();
    details.insert("kind".into(), "payment".into());
    details.insert("amount".into(), amount.into());
    for name in ["currency", "customer", "payment_method", "invoice"] {
        details.insert(name.into(), text(name));
    }
    for name in ["destination", "description"] {
        if let Some(v) = get(name) {
            details.insert(name.into(), v.into());
        }
    }
    let mut item = json!({"business_key": text("business_key"), "details": details});
    match (get("approved_by"), get("details_hash")) {
        (Some(by), hash) => {
            item["approval"] = json!({"approved_by": by, "details_hash": hash.map_or_else(
                || hash_of(&item["details"]), str::to_string)});
        }
        (None, Some(_)) => return Err("details_hash without approved_by".into()),
        (None, None) => {}
    }
    for name in ["priority", "not_before"] {
        if let Some(v) = get(name) {
            item[name] = v.trim().into();
        }
    }
    if let Some(ms) = get("not_before_ms") {
        item["not_before_ms"] = match ms.trim().parse::<i64>() {
            Ok(ms) => ms.into(),
            // Sent as written: the check below names the field and its type.
            Err(_) => ms.into(),
        };
    }
    scheduled(item, now)
}

/// `item` with its schedule (`priority`, `not_before`, `not_before_ms`) checked against `now` as
/// the API checks it, so a bad value is refused here, with its line, before anything is sent; the
/// item then carries `priority` (default `bulk`) and `not_before_ms` as the batch route reads them.
fn scheduled(mut item: Value, now: Timestamp) -> Result<Value, String> {
    let Some(fields) = item.as_object_mut() else {
        return Err("not a JSON object".into());
    };
    let schedule = ScheduleFields {
        priority: fields.remove("priority"),
        not_before: fields.remove("not_before"),
        not_before_ms: fields.remove("not_before_ms"),
    };
    let schedule = parse_schedule(&schedule, Priority::Bulk, now, "")?;
    fields.insert("priority".into(), schedule.priority.as_str().into());
    if let Some(at) = schedule.not_before {
        fields.insert("not_before_ms".into(), at.as_millis().into());
    }
    Ok(item)
}

/// An NDJSON line as a batch item: a `POST /v1/operations` body; an approval without
/// `details_hash` approves the line's own details; its schedule is checked against `now`.
pub(super) fn ndjson_item(line: &str, now: Timestamp) -> Result<Value, String> {
    let mut item: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    if !item.is_object() {
        return Err("not a JSON object".into());
    }
    let details = item["details"].clone();
    if let Some(approval) = item.get_mut("approval").and_then(Value::as_object_mut)
        && !approval.contains_key("details_hash")
    {
        approval.insert("details_hash".into(), hash_of(&details).into());
    }
    scheduled(item, now)
}

/// The hash of details as the API computes it; empty when they do not parse (the API then names
/// what is wrong with them).
fn hash_of(details: &Value) -> String {
    serde_json::from_value::<RawDetails>(details.clone())
        .ok()
        .and_then(|raw| Details::parse(&raw).ok())
        .map(|d| d.hash().as_str().to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use payonce_core::priority::{NOT_BEFORE_HORIZON, NOT_BEFORE_PAST_TOLERANCE};

    /// The tests' now: 2027-01-15T08:00:00Z.
    const NOW: Timestamp = Timestamp::from_millis(1_800_000_000_000);

    #[test]
    fn csv_fields_follow_rfc_4180_quoting() {
        assert_eq!(
            csv_fields(r#"a,"b, c","say ""hi""",,"#).unwrap(),
            vec!["a", "b, c", "say \"hi\"", "", ""]
        );
        assert!(csv_fields(r#""open"#).is_err());
        assert!(csv_fields(r#""a"b,c"#).is_err());
    }

    #[test]
    fn a_csv_line_becomes_the_single_routes_body_with_its_own_hash_approved() {
        let columns =
            csv_header("business_key,amount,currency,customer,payment_method,invoice,approved_by")
                .unwrap();
        let item = csv_item(
            "inv:1:pay,2048,usd,cus_1,pm_card_visa,INV-1,mandate:cus_1",
            &columns,
            NOW,
        )
        .unwrap();
        assert_eq!(item["details"]["amount"], 2048);
        assert_eq!(item["approval"]["approved_by"], "mandate:cus_1");
        let hash = item["approval"]["details_hash"].as_str().unwrap();
        assert_eq!(hash, hash_of(&item["details"]));
        assert_eq!(hash.len(), 64);
        assert!(csv_item("inv:1:pay,20.48,usd,cus_1,pm,INV-1,x", &columns, NOW).is_err());
        assert!(csv_item("inv:1:pay,2048,usd", &columns, NOW).is_err());
        assert!(csv_header("business_key,amount").is_err());
        assert!(
            csv_header("business_key,amount,currency,customer,payment_method,invoice,colour")
                .is_err()
        );
    }

    #[test]
    fn an_ndjson_line_is_the_single_routes_body_and_an_approval_without_a_hash_gets_its_own() {
        let line = r#"{"business_key":"inv:2:pay","details":{"amount":100,"currency":"usd","customer":"c","payment_method":"pm","invoice":"I"},"approval":{"approved_by":"mandate:c"}}"#;
        let item = ndjson_item(line, NOW).unwrap();
        assert_eq!(
            item["approval"]["details_hash"].as_str().unwrap(),
            hash_of(&item["details"])
        );
        let given = r#"{"business_key":"k","details":{},"approval":{"approved_by":"m","details_hash":"abc"}}"#;
        assert_eq!(
            ndjson_item(given, NOW).unwrap()["approval"]["details_hash"],
            "abc"
        );
        assert!(ndjson_item("[1, 2]", NOW).is_err());
        assert!(ndjson_item("{not json", NOW).is_err());
    }

    #[test]
    fn csv_schedule_columns_default_to_bulk_and_are_checked_before_sending() {
        let columns = csv_header(
            "business_key,amount,currency,customer,payment_method,invoice,priority,not_before",
        )
        .unwrap();
        let line = |rest: &str| csv_item(&format!("k,100,usd,c,pm,I,{rest}"), &columns, NOW);
        let plain = line(",").unwrap();
        assert_eq!(plain["priority"], "bulk");
        assert_eq!(plain.get("not_before_ms"), None);
        assert_eq!(plain.get("not_before"), None);
        let first_of_month = line("interactive,2027-02-01T00:00:00Z").unwrap();
        assert_eq!(first_of_month["priority"], "interactive");
        assert_eq!(first_of_month["not_before_ms"], 1_801_440_000_000_i64);
        assert_eq!(first_of_month.get("not_before"), None);
        let tokyo = line("bulk,2027-02-01T09:00:00+09:00").unwrap();
        assert_eq!(tokyo["not_before_ms"], 1_801_440_000_000_i64);
        assert_eq!(
            line("urgent,").unwrap_err(),
            "priority: must be \"interactive\" or \"bulk\"; got \"urgent\""
        );
        assert!(
            line(",2027-02-01")
                .unwrap_err()
                .starts_with("not_before: must be an RFC 3339 time")
        );
        assert!(
            line(",2026-01-01T00:00:00Z")
                .unwrap_err()
                .starts_with("not_before: not_before lies")
        );

        let ms_columns = csv_header(
            "business_key,amount,currency,customer,payment_method,invoice,not_before_ms",
        )
        .unwrap();
        let ms = |v: i64| csv_item(&format!("k,100,usd,c,pm,I,{v}"), &ms_columns, NOW);
        let horizon = NOT_BEFORE_HORIZON.as_millis() as i64;
        let tolerance = NOT_BEFORE_PAST_TOLERANCE.as_millis() as i64;
        assert_eq!(
            ms(NOW.as_millis() + horizon).unwrap()["not_before_ms"],
            NOW.as_millis() + horizon
        );
        assert_eq!(
            ms(NOW.as_millis() + horizon + 1).unwrap_err(),
            "not_before_ms: not_before lies more than 366 days ahead"
        );
        assert_eq!(
            ms(NOW.as_millis() - tolerance - 1_000).unwrap_err(),
            "not_before_ms: not_before lies 601 s in the past; at most 600 s are taken as now"
        );
        assert!(
            csv_item("k,100,usd,c,pm,I,soon", &ms_columns, NOW)
                .unwrap_err()
                .starts_with("not_before_ms: must be an integer")
        );
    }

    #[test]
    fn ndjson_schedule_fields_default_to_bulk_and_are_checked_before_sending() {
        let body = r#"{"business_key":"k","details":{}"#;
        let plain = ndjson_item(&format!("{body}}}"), NOW).unwrap();
        assert_eq!(plain["priority"], "bulk");
        let given = ndjson_item(
            &format!(r#"{body},"priority":"interactive","not_before":"2027-02-01T00:00:00Z"}}"#),
            NOW,
        )
        .unwrap();
        assert_eq!(given["priority"], "interactive");
        assert_eq!(given["not_before_ms"], 1_801_440_000_000_i64);
        assert_eq!(
            ndjson_item(&format!(r#"{body},"priority":2}}"#), NOW).unwrap_err(),
            "priority: must be the string \"interactive\" or \"bulk\"; got a number"
        );
    }

    #[test]
    fn the_count_is_of_the_lines_next_line_reads() {
        for (text, lines) in [("", 0), ("a\nb\n", 2), ("a\n\nb", 3), ("\n", 1)] {
            let mut reader = std::io::BufReader::with_capacity(2, text.as_bytes());
            assert_eq!(count(&mut reader).unwrap(), lines, "{text:?}");
        }
    }

    #[test]
    fn a_line_past_the_limit_is_skipped_whole() {
        let long = "x".repeat(LINE_LEN_MAX + 10);
        let text = format!("{long}\nnext\n");
        let mut reader = std::io::Cursor::new(text.into_bytes());
        assert!(matches!(
            next_line(&mut reader).unwrap(),
            Some(Line::TooLong)
        ));
        match next_line(&mut reader).unwrap() {
            Some(Line::Text(t)) => assert_eq!(t, "next"),
            _ => panic!("the line after a long one is read"),
        }
        assert!(next_line(&mut reader).unwrap().is_none());
    }
}
