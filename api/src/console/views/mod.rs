//! The console's HTML, rendered server-side with `maud` (every interpolation is escaped by the
//! template engine). One stylesheet from our own origin; the chart is inline SVG; no inline script.
//! The overview and the lists load the live refresh (`super::live`) and mark what it may swap with
//! `data-live`; without it they show a Refresh link.

use super::PAGE_SIZE_DEFAULT;
use maud::{DOCTYPE, Markup, html};
use payonce_core::queue_depth::ClassDepth;
use payonce_core::state::{ALL_STATUSES, Status};
use payonce_ledger::Operation;
use payonce_ledger::console::{Bucket, Overview};

mod operation_page;

pub use operation_page::{
    Attention, Extras, ProcessorFacts, ResolveForm, operation, resolve_many, resolved_many,
};

/// Path of the console's stylesheet.
pub const STYLESHEET_PATH: &str = "/static/console.css";

/// The stylesheet.
pub const STYLESHEET: &str = r#"
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0; background: #f4f5f7; color: #1d2330; }
header { background: #1d2330; color: #fff; padding: .7rem 1.5rem; display: flex; gap: 1.5rem; align-items: center; }
header a { color: #cfd6e4; text-decoration: none; } header a:hover { color: #fff; }
header form { margin-left: auto; } header button { background: transparent; color: #cfd6e4; border: 1px solid #4a5263; }
main { max-width: 72rem; margin: 1.5rem auto; padding: 0 1rem; }
section { background: #fff; border-radius: 10px; padding: 1.2rem 1.5rem; margin-bottom: 1.2rem; box-shadow: 0 1px 3px rgba(0,0,0,.08); }
h1 { font-size: 1.3rem; margin: 0 0 1rem; } h2 { font-size: 1.05rem; margin: 0 0 .8rem; }
table { border-collapse: collapse; width: 100%; font-size: .9rem; }
th, td { text-align: left; padding: .4rem .6rem; border-bottom: 1px solid #e4e7ec; vertical-align: top; }
th { color: #6b7385; font-weight: 600; }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: .85rem; }
.state { display: inline-block; padding: .05rem .5rem; border-radius: 999px; background: #e4e7ec; font-size: .8rem; }
.state.needs_attention, .state.unknown { background: #fde7c2; } .state.succeeded { background: #d3f0dc; }
.state.failed, .state.rejected { background: #fbd5d5; }
.figures { display: flex; gap: 1rem; flex-wrap: wrap; }
.figure { border: 1px solid #e4e7ec; border-radius: 8px; padding: .6rem 1rem; min-width: 9rem; }
.figure b { display: block; font-size: 1.4rem; }
a.figure { color: inherit; text-decoration: none; } a.figure.lead b { font-size: 2rem; }
a.figure.alert { border: 2px solid #cf222e; background: #fff5f5; }
.fine { color: #4a5263; font-size: .85rem; }
form.filters { display: flex; gap: .6rem; flex-wrap: wrap; align-items: end; margin-bottom: 1rem; }
label { display: block; font-size: .8rem; color: #6b7385; }
input, select, textarea { font: inherit; padding: .35rem .5rem; border: 1px solid #c4c9d4; border-radius: 6px; }
textarea { width: 100%; box-sizing: border-box; min-height: 4rem; }
button { font: inherit; padding: .4rem .9rem; border: 0; border-radius: 6px; background: #1f6feb; color: #fff; cursor: pointer; }
.error { border-left: 4px solid #cf222e; padding-left: 1rem; }
#reason-lead, #attention-reason { font-size: 1.05rem; }
#side-by-side caption { text-align: left; color: #4a5263; font-size: .85rem; padding-bottom: .4rem; }
details summary { cursor: pointer; color: #0b57d0; margin-top: .8rem; }
h3 { font-size: .95rem; margin: .8rem 0 .4rem; }
.visually-hidden { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); white-space: nowrap; }
pre { background: #f6f8fa; padding: .6rem; border-radius: 6px; overflow-x: auto; font-size: .8rem; }
.legend span { margin-right: 1rem; font-size: .85rem; }
.sw { display: inline-block; width: .8rem; height: .8rem; margin-right: .3rem; vertical-align: middle; }
.sw.sub { background: #1f6feb; } .sw.ok { background: #1a7f37; } .sw.bad { background: #cf222e; }
"#;

/// Milliseconds since the epoch as `YYYY-MM-DD HH:MM:SS UTC`.
pub fn utc(ms: i64) -> String {
    let rfc3339 = payonce_core::clock::Timestamp::from_millis(ms).rfc3339();
    format!("{} {} UTC", &rfc3339[..10], &rfc3339[11..19])
}

/// A duration in ms as on-call reads it: `45s`, `12m`, `3h`, `2d`.
pub fn age(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match s {
        0..=119 => format!("{s}s"),
        120..=7_199 => format!("{}m", s / 60),
        7_200..=172_799 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

fn layout(title: &str, csrf: Option<&str>, body: Markup) -> Markup {
    page(title, csrf, None, body)
}

/// A console page; `live`: the page updates itself (the live refresh's script and interval), and
/// its Refresh link reloads this URL.
fn page(title: &str, csrf: Option<&str>, live: Option<&str>, body: Markup) -> Markup {
    let refresh_ms = live.map(|_| super::live::REFRESH.as_millis());
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · payonce console" }
                link rel="stylesheet" href=(STYLESHEET_PATH);
                @if live.is_some() { script src=(super::live::script_path()) defer {} }
            }
            body {
                header {
                    strong { "payonce on-call" }
                    @if let Some(csrf) = csrf {
                        a href="/console" { "Overview" }
                        a href="/console/operations" { "Operations" }
                        form method="post" action="/console/sign-out" {
                            input type="hidden" name="csrf" value=(csrf);
                            button type="submit" id="sign-out" { "Sign out" }
                        }
                    }
                }
                main data-refresh-ms=[refresh_ms] {
                    @if csrf.is_some() { div id="outage" data-live { (super::outage::banner()) } }
                    @if let Some(href) = live {
                        p.fine id="refresh-bar" {
                            a id="refresh-link" href=(href) { "Refresh" }
                            " · "
                            span id="refresh-status" { "Figures as of loading this page." }
                        }
                    }
                    (body)
                }
            }
        }
    }
}

/// The sign-in page (`message`: why the last attempt was refused).
pub fn sign_in(form_token: &str, message: Option<&str>) -> Markup {
    layout(
        "Sign in",
        None,
        html! {
            section {
                h1 { "Sign in with an on-call key" }
                @if let Some(m) = message { p.error id="error" { (m) } }
                form method="post" action="/console/sign-in" {
                    input type="hidden" name="csrf" value=(form_token);
                    label for="key" { "On-call API key (po_on_call_…)" }
                    p { input type="password" id="key" name="key" autocomplete="off" size="72" required; }
                    button type="submit" id="sign-in" { "Sign in" }
                }
                p { "Only on-call keys sign in. The session ends after 8 hours, at sign-out, or when the key is revoked or expires." }
            }
        },
    )
}

/// A refusal page.
pub fn refusal(csrf: Option<&str>, code: &str, message: &str) -> Markup {
    layout(
        "Refused",
        csrf,
        html! {
            section.error {
                h1 { "Refused" }
                p { (message) }
                p { "Error code: " code id="error-code" { (code) } }
            }
        },
    )
}

fn state_badge(s: &str) -> Markup {
    html! { span class=(format!("state {s}")) { (s) } }
}

/// The last hour as grouped bars, one group per bucket.
fn chart(buckets: &[Bucket]) -> Markup {
    const W: i64 = 720;
    const H: i64 = 160;
    let n = i64::try_from(buckets.len()).unwrap_or(1).max(1);
    let max = buckets
        .iter()
        .map(|b| b.submissions.max(b.successes).max(b.failures))
        .max()
        .unwrap_or(0)
        .max(1);
    let group = W / n;
    let bar = (group - 6) / 3;
    html! {
        svg id="chart" xmlns="http://www.w3.org/2000/svg" width=(W) height=(H + 20) viewBox=(format!("0 0 {W} {}", H + 20)) role="img" aria-label="Submissions, successes and failures over the last hour" {
            line x1="0" y1=(H) x2=(W) y2=(H) stroke="#c4c9d4" {}
            @for (i, b) in buckets.iter().enumerate() {
                @let x = i64::try_from(i).unwrap_or(0) * group + 3;
                @for (k, (v, colour, what)) in [(b.submissions, "#1f6feb", "submissions"), (b.successes, "#1a7f37", "successes"), (b.failures, "#cf222e", "failures")].into_iter().enumerate() {
                    @let h = v * (H - 10) / max;
                    rect x=(x + i64::try_from(k).unwrap_or(0) * bar) y=(H - h) width=(bar) height=(h) fill=(colour) {
                        title { (v) " " (what) }
                    }
                }
            }
            text x="0" y=(H + 15) font-size="11" fill="#6b7385" { "60 min ago" }
            text x=(W - 30) y=(H + 15) font-size="11" fill="#6b7385" { "now" }
        }
        p.legend {
            span { span.sw.sub {} "submissions " (buckets.iter().map(|b| b.submissions).sum::<i64>()) }
            span { span.sw.ok {} "successes " (buckets.iter().map(|b| b.successes).sum::<i64>()) }
            span { span.sw.bad {} "failures " (buckets.iter().map(|b| b.failures).sum::<i64>()) }
        }
    }
}

/// The tenant's ready operations by class: how many, how many are due, how long the oldest due one
/// has waited (docs/runbook.md, "Interactive payments wait").
fn queue_section(classes: &[ClassDepth], now_ms: i64) -> Markup {
    html! {
        section {
            h2 { "Waiting to run" }
            table id="queue" {
                thead { tr { th { "Class" } th { "Ready" } th { "Due now" } th { "Oldest wait" } } }
                tbody {
                    @for c in classes {
                        tr id=(format!("queue-{}", c.priority.as_str())) {
                            td { (c.priority.as_str()) }
                            td { (c.ready) }
                            td { (c.due) }
                            td { (c.oldest_due.map_or_else(|| "none due".to_string(), |at| age(now_ms - at.as_millis()))) }
                        }
                    }
                }
            }
            p.fine { "Ready but not due: scheduled for later (not_before) or put off before a retry. Interactive work is claimed before bulk; tenants take turns by their shares." }
        }
    }
}

/// The overview.
pub fn overview(csrf: &str, o: &Overview, now_ms: i64, webhooks_refused: u64) -> Markup {
    let oldest = |s: Status| {
        o.by_status
            .iter()
            .find(|(st, _, _)| *st == s)
            .and_then(|(_, _, at)| *at)
            .map_or_else(|| "none".to_string(), |at| age(now_ms - at.as_millis()))
    };
    let count = |s: Status| {
        o.by_status
            .iter()
            .find(|(st, _, _)| *st == s)
            .map_or(0, |(_, n, _)| *n)
    };
    page(
        "Overview",
        Some(csrf),
        Some("/console"),
        html! {
          div id="live-overview" data-live {
            section {
                h1 { "Overview" }
                div.figures id="needs-you" {
                    @for (s, id, label) in [(Status::NeedsAttention, "needs-attention", "Need attention"), (Status::Unknown, "unknown", "Unknown outcome")] {
                        @let n = count(s);
                        a.figure.lead.alert[n > 0] id=(format!("count-{id}")) href=(format!("/console/operations?status={}", s.as_str())) {
                            (label) b { (n) } span.fine { "oldest " (oldest(s)) }
                        }
                    }
                    div.figure id="oldest-needs-attention" { "Oldest needs_attention" b { (oldest(Status::NeedsAttention)) } }
                    div.figure id="oldest-unknown" { "Oldest unknown" b { (oldest(Status::Unknown)) } }
                    div.figure id="webhooks-refused" { "Webhooks refused (this api process)" b { (webhooks_refused) } }
                }
            }
            (queue_section(&o.queue, now_ms))
            section {
                h2 { "Operations by state" }
                table id="by-state" {
                    thead { tr { th { "State" } th { "Operations" } th { "Oldest update" } } }
                    tbody {
                        @for s in ALL_STATUSES {
                            @let row = o.by_status.iter().find(|(st, _, _)| *st == s);
                            tr {
                                td { a href=(format!("/console/operations?status={}", s.as_str())) { (state_badge(s.as_str())) } }
                                td { (row.map_or(0, |r| r.1)) }
                                td { (row.and_then(|r| r.2).map_or_else(String::new, |at| format!("{} ago", age(now_ms - at.as_millis())))) }
                            }
                        }
                    }
                }
            }
            @if !o.lost_rows.is_empty() {
                section id="lost-rows" {
                    h2 { "Paid by a row the ledger had lost" }
                    p.fine { "The processor replayed these operations' first submissions: a row the ledger no longer has (a restore or a failover) had paid them. The money is right; the loss is what to investigate (runbook, \"Database failover\")." }
                    table {
                        thead { tr { th { "Operation" } th { "Payment" } th { "Learned" } } }
                        tbody {
                            @for l in &o.lost_rows {
                                tr {
                                    td { a href=(format!("/console/operations/{}", l.operation)) { (l.operation.as_str()) } }
                                    td { (l.reference) }
                                    td { (age(now_ms - l.found_at.as_millis())) " ago" }
                                }
                            }
                        }
                    }
                }
            }
            section {
                h2 { "Last hour (5-minute buckets)" }
                (chart(&o.buckets))
            }
          }
        },
    )
}

/// The list's filter values, echoed into the form and the next-page link.
#[derive(Debug, Clone, Default)]
pub struct Filters {
    /// The state filter.
    pub status: String,
    /// The time window (`1h`, `24h`, …).
    pub since: String,
    /// The search text.
    pub q: String,
    /// The page size.
    pub limit: u32,
    /// The cursor of this page (empty: the first).
    pub after: String,
}

impl Filters {
    fn query(&self) -> String {
        let enc = |s: &str| {
            s.bytes()
                .map(|b| match b {
                    b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                        (b as char).to_string()
                    }
                    _ => format!("%{b:02X}"),
                })
                .collect::<String>()
        };
        let mut q = format!(
            "status={}&since={}&q={}",
            enc(&self.status),
            enc(&self.since),
            enc(&self.q)
        );
        if self.limit != PAGE_SIZE_DEFAULT {
            q.push_str(&format!("&limit={}", self.limit));
        }
        q
    }
}

/// A page of operations with its filters and the link to the next page.
pub fn list(
    csrf: &str,
    f: &Filters,
    ops: &[Operation],
    next: Option<String>,
    now_ms: i64,
) -> Markup {
    let mut href = format!("/console/operations?{}", f.query());
    if !f.after.is_empty() {
        href.push_str(&format!("&after={}", f.after));
    }
    page(
        "Operations",
        Some(csrf),
        Some(&href),
        html! {
            section {
                h1 { "Operations" }
                form.filters method="get" action="/console/operations" {
                    div { label for="status" { "State" }
                        select id="status" name="status" {
                            option value="" selected[f.status.is_empty()] { "any" }
                            @for s in ALL_STATUSES {
                                option value=(s.as_str()) selected[f.status == s.as_str()] { (s.as_str()) }
                            }
                        }
                    }
                    div { label for="since" { "Created within" }
                        select id="since" name="since" {
                            @for (v, t) in [("", "any time"), ("1h", "1 hour"), ("24h", "24 hours"), ("7d", "7 days"), ("30d", "30 days")] {
                                option value=(v) selected[f.since == v] { (t) }
                            }
                        }
                    }
                    div { label for="q" { "Operation id, business key, invoice, customer or processor reference" }
                        input id="q" name="q" value=(f.q) size="48";
                    }
                    button type="submit" id="filter" { "Filter" }
                }
              div id="live-list" data-live {
                @let selectable = f.status == Status::NeedsAttention.as_str() && !ops.is_empty();
                @if selectable {
                    form method="get" action="/console/resolve-many" id="select-many" {
                        p { button type="submit" id="review-many" { "Review the selected ones for one resolution" } }
                    }
                }
                table id="operations" {
                    thead { tr { @if selectable { th { span.visually-hidden { "Select" } } } th { "Operation" } th { "State" } th { "Priority" } th { "Amount" } th { "Invoice" } th { "Customer" } th { "Reference" } th { "Created" } th { "Updated" } } }
                    tbody {
                        @for o in ops {
                            tr {
                                @if selectable {
                                    td { input type="checkbox" name="id" form="select-many" value=(o.id.as_str()) id=(format!("pick-{}", o.id)) aria-label=(format!("select {}", o.id)); }
                                }
                                td { a.mono href=(format!("/console/operations/{}", o.id)) { (o.id.as_str()) } }
                                td { (state_badge(o.status.as_str())) }
                                td { (o.priority.as_str()) }
                                td { (o.details.money().display()) }
                                td { (o.details.invoice()) }
                                td { (o.details.customer()) }
                                td.mono { (o.external_ref.as_deref().unwrap_or("")) }
                                td { (utc(o.created_at.as_millis())) }
                                td { (age(now_ms - o.updated_at.as_millis())) " ago" }
                            }
                        }
                    }
                }
                @if ops.is_empty() { p id="empty" { "No operations match." } }
                @if let Some(after) = next {
                    p { a id="next" href=(format!("/console/operations?{}&after={after}", f.query())) { "Older →" } }
                }
              }
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_utc_and_ages_naturally() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(1_764_765_296_000), "2025-12-03 12:34:56 UTC");
        assert_eq!(age(5_000), "5s");
        assert_eq!(age(600_000), "10m");
        assert_eq!(age(-1), "0s");
    }

    #[test]
    fn interpolations_are_escaped() {
        let page = refusal(None, "x", "<script>alert(1)</script>").into_string();
        assert!(!page.contains("<script>"));
        assert!(page.contains("&lt;script&gt;"));
    }
}
