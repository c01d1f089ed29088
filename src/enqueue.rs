//! `payonce enqueue FILE`: an operator hands payonce a billing run's payments from a file (CSV or
//! NDJSON, one operation a line) and they are created, and those with an approval enqueued,
//! through the API's batch route (`POST /v1/operations/batch`) with a service key: the same checks,
//! the same answers and the same audit trail (the key's label) as the billing system's own calls.
//! A run that was killed is resumed by running it again: every item is idempotent by business key,
//! so what the first run wrote is answered `existing` and nothing is created twice.
//!
//! A line may schedule its payment (`not_before` as RFC 3339, or `not_before_ms`) and name its
//! `priority` (default `bulk`, as the batch route's); a bad value is refused here, with its line
//! number and field, before anything is sent (`api::schedule` checks it as the API does).
//!
//! On a terminal a progress line shows the lines sent and the answers so far; the summary counts
//! created, existing, conflicts and invalid lines, and lists the refused lines by number.

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use payonce_api::intake::BATCH_BODY_LIMIT_BYTES;
use payonce_api::schedule::{ScheduleFields, parse_schedule};
use payonce_core::clock::{Clock, SystemClock, Timestamp};
use payonce_core::details::{Details, RawDetails};
use payonce_core::priority::Priority;
use payonce_ledger::intake::BATCH_ITEMS_MAX;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::io::{BufRead, BufReader, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Longest line read from the file; a longer one is reported invalid and skipped.
pub const LINE_LEN_MAX: usize = 64 * 1024;
/// Bytes of a request kept free for the envelope around the items (`{"operations": [...]}`).
const ENVELOPE_BYTES: usize = 1024;
/// Refused lines kept for the summary (the rest are counted, not listed).
pub const REFUSED_KEPT_MAX: usize = 1_000;
/// Tries of one batch when the API cannot take it now (503, a dropped connection): safe to repeat,
/// every item is idempotent.
pub const SEND_ATTEMPTS_MAX: u32 = 6;
/// First pause before trying a batch again (doubling).
const RETRY_PAUSE_MIN: Duration = Duration::from_millis(500);
/// Connect timeout of the API client.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Whole-request timeout of the API client: above the API's own request limit.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Exit status when some lines were refused (the others were written).
pub const EXIT_REFUSED: u8 = 3;
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

/// `payonce enqueue` arguments.
#[derive(Debug, Clone, Args)]
pub struct EnqueueArgs {
    /// The file: CSV with a header row (columns: business_key, amount, currency, customer,
    /// payment_method, invoice, and optionally destination, description, approved_by, details_hash,
    /// priority (interactive or bulk; default bulk), not_before (RFC 3339) or not_before_ms)
    /// or NDJSON (one `POST /v1/operations` body a line; its priority too defaults to bulk).
    pub file: PathBuf,
    /// The API's base URL.
    #[arg(long, env = "PAYONCE_API_URL", default_value = "http://127.0.0.1:8080")]
    pub api_url: String,
    /// A service key of the tenant (from the environment, so it stays out of shell history).
    #[arg(long, env = "PAYONCE_API_KEY", hide_env_values = true)]
    pub key: String,
    /// The file's format (auto: by its extension, `.csv` or `.ndjson`/`.jsonl`).
    #[arg(long, value_enum, default_value_t = FileFormat::Auto)]
    pub format: FileFormat,
    /// Operations per request.
    #[arg(long, default_value_t = BATCH_ITEMS_MAX as u32,
          value_parser = clap::value_parser!(u32).range(1..=BATCH_ITEMS_MAX as i64))]
    pub batch_size: u32,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

/// A file's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FileFormat {
    /// By the file's extension.
    Auto,
    /// Comma-separated with a header row.
    Csv,
    /// One JSON object a line.
    Ndjson,
}

/// A refused line.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Refused {
    /// Its number in the file, from 1.
    pub line: u64,
    /// The status the API gave it (400 for a line that could not be read).
    pub status: u16,
    /// The error code.
    pub code: String,
    /// Why.
    pub message: String,
}

/// What a run did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Summary {
    /// Lines holding an operation (blank lines and the CSV header excluded).
    pub lines: u64,
    /// Created by this run.
    pub created: u64,
    /// Already there with the same details (a resumed run's earlier part).
    pub existing: u64,
    /// Refused with 409.
    pub conflicts: u64,
    /// Refused as malformed or outside a limit, here or by the API.
    pub invalid: u64,
    /// The first [`REFUSED_KEPT_MAX`] refused lines.
    pub refused: Vec<Refused>,
    /// Seconds the run took.
    pub seconds: f64,
}

impl Summary {
    fn refuse(&mut self, refused: Refused) {
        if refused.status == 409 {
            self.conflicts += 1;
        } else {
            self.invalid += 1;
        }
        if self.refused.len() < REFUSED_KEPT_MAX {
            self.refused.push(refused);
        }
    }

    fn invalid_line(&mut self, line: u64, message: impl Into<String>) {
        self.refuse(Refused {
            line,
            status: 400,
            code: "invalid_line".into(),
            message: message.into(),
        });
    }
}

/// The batch route's answer, as far as the command reads it.
#[derive(Debug, Deserialize)]
struct Answer {
    results: Vec<ItemAnswer>,
}

#[derive(Debug, Deserialize)]
struct ItemAnswer {
    index: usize,
    status: u16,
    #[serde(default)]
    error: Option<ItemError>,
}

#[derive(Debug, Deserialize)]
struct ItemError {
    code: String,
    message: String,
}

/// Runs the command: exit 0 when every line was written (created or existing), [`EXIT_REFUSED`]
/// when some were refused.
pub async fn run(args: EnqueueArgs) -> anyhow::Result<ExitCode> {
    let format = match args.format {
        FileFormat::Auto => by_extension(&args.file)?,
        other => other,
    };
    let file = std::fs::File::open(&args.file)
        .with_context(|| format!("cannot open {}", args.file.display()))?;
    let http = reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(REQUEST_TIMEOUT)
        .build()
        .context("cannot build the HTTP client")?;
    let mut sender = Sender {
        http,
        url: format!("{}/v1/operations/batch", args.api_url.trim_end_matches('/')),
        key: args.key.clone(),
        summary: Summary::default(),
        started: Instant::now(),
        terminal: std::io::stderr().is_terminal(),
        batch: Vec::new(),
        bytes: 0,
        batch_size: args.batch_size as usize,
    };
    let mut reader = BufReader::new(file);
    let mut header: Option<Vec<usize>> = None;
    let mut number = 0_u64;
    while let Some(line) = next_line(&mut reader)? {
        number += 1;
        let text = match line {
            Line::Text(text) => text,
            Line::TooLong => {
                sender.summary.lines += 1;
                sender
                    .summary
                    .invalid_line(number, format!("longer than {LINE_LEN_MAX} bytes"));
                continue;
            }
            Line::NotUtf8 => {
                sender.summary.lines += 1;
                sender.summary.invalid_line(number, "not UTF-8");
                continue;
            }
        };
        if text.trim().is_empty() {
            continue;
        }
        let item = match format {
            FileFormat::Csv => match &header {
                None => {
                    header = Some(csv_header(&text)?);
                    continue;
                }
                Some(columns) => csv_item(&text, columns, SystemClock.now()),
            },
            _ => ndjson_item(&text, SystemClock.now()),
        };
        sender.summary.lines += 1;
        match item {
            Ok(item) => sender.push(number, item).await?,
            Err(why) => sender.summary.invalid_line(number, why),
        }
    }
    sender.flush().await?;
    sender.finish(args.json)
}

fn by_extension(path: &Path) -> anyhow::Result<FileFormat> {
    match path.extension().and_then(|e| e.to_str()) {
        Some("csv") => Ok(FileFormat::Csv),
        Some("ndjson" | "jsonl") => Ok(FileFormat::Ndjson),
        _ => bail!(
            "cannot tell the format of {} from its extension; pass --format csv or --format ndjson",
            path.display()
        ),
    }
}

/// One line of the file.
enum Line {
    Text(String),
    TooLong,
    NotUtf8,
}

/// The next line, read at most [`LINE_LEN_MAX`] bytes at a time (the rest of a longer one is
/// skipped); `None` at the end.
fn next_line(reader: &mut impl BufRead) -> anyhow::Result<Option<Line>> {
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
fn csv_header(line: &str) -> anyhow::Result<Vec<usize>> {
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
fn csv_item(line: &str, columns: &[usize], now: Timestamp) -> Result<Value, String> {
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
fn ndjson_item(line: &str, now: Timestamp) -> Result<Value, String> {
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

/// Sends the items in batches and counts the answers.
struct Sender {
    http: reqwest::Client,
    url: String,
    key: String,
    summary: Summary,
    started: Instant,
    terminal: bool,
    /// The batch being filled: (line number, item).
    batch: Vec<(u64, String)>,
    bytes: usize,
    batch_size: usize,
}

impl Sender {
    async fn push(&mut self, line: u64, item: Value) -> anyhow::Result<()> {
        let item = item.to_string();
        if !self.batch.is_empty()
            && self.bytes + item.len() + 1 > BATCH_BODY_LIMIT_BYTES - ENVELOPE_BYTES
        {
            self.flush().await?;
        }
        self.bytes += item.len() + 1;
        self.batch.push((line, item));
        if self.batch.len() >= self.batch_size {
            self.flush().await?;
        }
        Ok(())
    }

    async fn flush(&mut self) -> anyhow::Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let items: Vec<&str> = self.batch.iter().map(|(_, i)| i.as_str()).collect();
        let body = format!("{{\"operations\":[{}]}}", items.join(","));
        let answer = self.send(body).await?;
        if answer.results.len() != self.batch.len() {
            bail!(
                "the API answered {} items for a batch of {}",
                answer.results.len(),
                self.batch.len()
            );
        }
        for result in answer.results {
            let Some((line, _)) = self.batch.get(result.index) else {
                bail!(
                    "the API answered an item index {} out of its batch",
                    result.index
                );
            };
            match (result.status, result.error) {
                (201, _) => self.summary.created += 1,
                (200, _) => self.summary.existing += 1,
                (status, error) => {
                    let (code, message) = error
                        .map_or_else(|| (String::new(), String::new()), |e| (e.code, e.message));
                    self.summary.refuse(Refused {
                        line: *line,
                        status,
                        code,
                        message,
                    });
                }
            }
        }
        let last = self.batch.last().map_or(0, |(line, _)| *line);
        self.batch.clear();
        self.bytes = 0;
        self.progress(last);
        Ok(())
    }

    /// Sends one batch, trying again while the API cannot take it now.
    async fn send(&self, body: String) -> anyhow::Result<Answer> {
        let mut pause = RETRY_PAUSE_MIN;
        let mut attempt = 1;
        loop {
            let sent = self
                .http
                .post(&self.url)
                .bearer_auth(&self.key)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.clone())
                .send()
                .await;
            let why = match sent {
                Ok(response) if response.status().is_success() => {
                    return response
                        .json::<Answer>()
                        .await
                        .context("the API's answer to a batch is not the documented shape");
                }
                Ok(response)
                    if response.status().is_server_error()
                        || response.status() == reqwest::StatusCode::TOO_MANY_REQUESTS =>
                {
                    format!("the API answered {}", response.status())
                }
                Ok(response) => {
                    let status = response.status();
                    let text = response.text().await.unwrap_or_default();
                    bail!("the API refused the batch with {status}: {text}");
                }
                Err(e) => format!("the request failed: {e}"),
            };
            if attempt >= SEND_ATTEMPTS_MAX {
                bail!(
                    "{why}; gave up after {attempt} tries (run the command again to resume: nothing is created twice)"
                );
            }
            tracing::warn!(attempt, %why, "a batch was not taken; trying it again");
            tokio::time::sleep(pause).await;
            pause *= 2;
            attempt += 1;
        }
    }

    fn progress(&self, line: u64) {
        if !self.terminal {
            return;
        }
        let s = &self.summary;
        eprint!(
            "\r\x1b[2K[{:>6.1}s] line {line}: created {}, existing {}, conflicts {}, invalid {}",
            self.started.elapsed().as_secs_f64(),
            s.created,
            s.existing,
            s.conflicts,
            s.invalid
        );
        let _ = std::io::stderr().flush();
    }

    fn finish(mut self, json: bool) -> anyhow::Result<ExitCode> {
        if self.terminal {
            eprintln!();
        }
        self.summary.seconds = self.started.elapsed().as_secs_f64();
        self.summary.refused.sort_by_key(|r| r.line);
        let s = &self.summary;
        if json {
            println!("{}", serde_json::to_string(s)?);
        } else {
            let rate = s.lines as f64 / s.seconds.max(0.001);
            println!(
                "{} lines in {:.1} s ({rate:.0} per second): created {}, existing {}, conflicts {}, invalid {}",
                s.lines, s.seconds, s.created, s.existing, s.conflicts, s.invalid
            );
            for r in &s.refused {
                println!("line {}: {} {}: {}", r.line, r.status, r.code, r.message);
            }
            let listed = u64::try_from(s.refused.len()).unwrap_or(u64::MAX);
            if s.conflicts + s.invalid > listed {
                println!(
                    "... and {} more refused lines",
                    s.conflicts + s.invalid - listed
                );
            }
        }
        Ok(if s.conflicts + s.invalid == 0 {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(EXIT_REFUSED)
        })
    }
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
