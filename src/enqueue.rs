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
//! Every line number is the file's (header and blank lines counted), as an editor shows it. On a
//! terminal a progress line shows the line reached of the file's total, the percentage, an ETA and
//! the answers so far; the summary counts created, existing, conflicts and invalid lines, and lists
//! the refused lines by number. Ctrl-C stops at once and names the last line whose answer came
//! back: everything up to it is written, and running again resumes.

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use payonce_api::intake::BATCH_BODY_LIMIT_BYTES;
use payonce_core::clock::{Clock, SystemClock};
use payonce_ledger::intake::BATCH_ITEMS_MAX;
use serde::Deserialize;
use serde_json::Value;
use std::io::{BufReader, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

mod lines;

use lines::{Line, csv_header, csv_item, ndjson_item, next_line};

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
/// Exit status after Ctrl-C (128 + SIGINT, as a shell reports it).
pub const EXIT_INTERRUPTED: u8 = 130;

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
    /// Lines of the file, header and blank lines included: the numbers lines are named by.
    pub file_lines: u64,
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
    let open = || {
        std::fs::File::open(&args.file)
            .with_context(|| format!("cannot open {}", args.file.display()))
    };
    // A first pass for the total the progress line counts towards.
    let file_lines = lines::count(&mut BufReader::new(open()?))?;
    let file = open()?;
    // Ctrl-C: the sender stops where it is; the lines it had no answer for are sent again by the
    // next run, which answers what this one wrote `existing`.
    let (interrupt, interrupted) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            let _ = interrupt.send(true);
        }
    });
    let http = reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(REQUEST_TIMEOUT)
        .build()
        .context("cannot build the HTTP client")?;
    let mut sender = Sender {
        http,
        url: format!("{}/v1/operations/batch", args.api_url.trim_end_matches('/')),
        key: args.key.clone(),
        summary: Summary {
            file_lines,
            ..Summary::default()
        },
        answered_line: 0,
        interrupted,
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
        if *sender.interrupted.borrow() {
            return Ok(sender.stopped());
        }
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
            Ok(item) => {
                if !sender.push(number, item).await? {
                    return Ok(sender.stopped());
                }
            }
            Err(why) => sender.summary.invalid_line(number, why),
        }
    }
    if !sender.flush().await? {
        return Ok(sender.stopped());
    }
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

/// Sends the items in batches and counts the answers.
struct Sender {
    http: reqwest::Client,
    url: String,
    key: String,
    summary: Summary,
    /// The last file line whose answer came back (0: none yet): every line up to it is written.
    answered_line: u64,
    /// Becomes true on Ctrl-C.
    interrupted: tokio::sync::watch::Receiver<bool>,
    started: Instant,
    terminal: bool,
    /// The batch being filled: (line number, item).
    batch: Vec<(u64, String)>,
    bytes: usize,
    batch_size: usize,
}

impl Sender {
    /// Adds `item` of file line `line`, sending the batch when full; false: interrupted.
    async fn push(&mut self, line: u64, item: Value) -> anyhow::Result<bool> {
        let item = item.to_string();
        if !self.batch.is_empty()
            && self.bytes + item.len() + 1 > BATCH_BODY_LIMIT_BYTES - ENVELOPE_BYTES
            && !self.flush().await?
        {
            return Ok(false);
        }
        self.bytes += item.len() + 1;
        self.batch.push((line, item));
        if self.batch.len() >= self.batch_size {
            return self.flush().await;
        }
        Ok(true)
    }

    /// Sends the batch and counts its answers; false: interrupted before the answer came.
    async fn flush(&mut self) -> anyhow::Result<bool> {
        if self.batch.is_empty() {
            return Ok(true);
        }
        let items: Vec<&str> = self.batch.iter().map(|(_, i)| i.as_str()).collect();
        let body = format!("{{\"operations\":[{}]}}", items.join(","));
        let mut interrupted = self.interrupted.clone();
        let answer = tokio::select! {
            answer = self.send(body) => answer?,
            _ = interrupted.wait_for(|stop| *stop) => return Ok(false),
        };
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
        self.answered_line = self.batch.last().map_or(0, |(line, _)| *line);
        self.batch.clear();
        self.bytes = 0;
        self.progress();
        Ok(true)
    }

    /// Says where a Ctrl-C stopped the run and how to go on.
    fn stopped(&self) -> ExitCode {
        if self.terminal {
            eprintln!();
        }
        eprintln!(
            "stopped at line {} of {}; run again to resume (what was written is answered existing, \
             nothing is created twice)",
            self.answered_line, self.summary.file_lines
        );
        ExitCode::from(EXIT_INTERRUPTED)
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

    fn progress(&self) {
        if !self.terminal {
            return;
        }
        let s = &self.summary;
        eprint!(
            "\r\x1b[2K{}: created {}, existing {}, conflicts {}, invalid {}",
            reached(self.answered_line, s.file_lines, self.started.elapsed()),
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
                "{} lines, {} operations, in {:.1} s ({rate:.0} operations per second): created {}, \
                 existing {}, conflicts {}, invalid {}",
                s.file_lines, s.lines, s.seconds, s.created, s.existing, s.conflicts, s.invalid
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

/// How far a run is: `[  3.2s] line 4000 of 20001 (20%), ETA 13s`, the ETA from the pace so far.
fn reached(line: u64, total: u64, elapsed: Duration) -> String {
    let percent = line.saturating_mul(100) / total.max(1);
    let eta = if line == 0 {
        "ETA unknown".to_string()
    } else {
        let left = elapsed.as_secs_f64() * total.saturating_sub(line) as f64 / line as f64;
        format!("ETA {}", span(Duration::from_secs_f64(left)))
    };
    format!(
        "[{:>6.1}s] line {line} of {total} ({percent}%), {eta}",
        elapsed.as_secs_f64()
    )
}

/// A duration as a person reads an ETA: `45s`, `3m 20s`, `2h 5m`.
fn span(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=59 => format!("{s}s"),
        60..=3_599 => format!("{}m {}s", s / 60, s % 60),
        _ => format!("{}h {}m", s / 3600, s % 3600 / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_counts_file_lines_towards_the_total_with_an_eta() {
        assert_eq!(
            reached(4_000, 20_001, Duration::from_secs(4)),
            "[   4.0s] line 4000 of 20001 (19%), ETA 16s"
        );
        assert_eq!(
            reached(0, 10, Duration::ZERO),
            "[   0.0s] line 0 of 10 (0%), ETA unknown"
        );
        assert_eq!(span(Duration::from_secs(200)), "3m 20s");
        assert_eq!(span(Duration::from_secs(7_500)), "2h 5m");
    }
}
