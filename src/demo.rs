//! The quick start. `payonce demo` starts the all-in-one [`Stack`] (api, simulator, ledger on SQLite),
//! walks invoice INV-2048 through its front door, stages a worker crash after the processor accepted
//! the payment (a real child process, aborted at a failure point), then lets the stack's own worker and
//! reconciler converge, and prints the one payment and the operation's full history.

use crate::progress::Progress;
use crate::serve::{Plan, Stack};
use crate::settings::{ApiArgs, Common, ReconcilerArgs, WorkerArgs, builtin_defaults};
use anyhow::Context;
use clap::Args;
use payonce_core::clock::{Clock, SystemClock};
use payonce_core::id::{OperationId, TenantId};
use payonce_core::state::Status;
use payonce_ledger::{Operation, Role, SharedLedger};
use payonce_reconciler::Reconciler;
use payonce_reconciler::oncall::{self, Format};
use payonce_simulator::{SimulatorConfig, payment_audit};
use payonce_worker::Worker;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest the demo waits for the crashed payment to be reconciled: the worker's lease (1.5 s) must
/// lapse and the first check (2 s) come due; ten times that is a sick machine, not a slow one.
const CONVERGE_DEADLINE: Duration = Duration::from_secs(30);
/// Longest the demo waits for the duplicate webhook deliveries to reach the api.
const WEBHOOK_DEADLINE: Duration = Duration::from_secs(10);
/// How long the simulator holds each webhook before its first delivery: twice the crashed worker's
/// lease (1.5 s), so the story shows the lookup path resolving the crash and the late, duplicated
/// webhooks changing nothing. Should a slow machine let a webhook win instead, the demo says so; the
/// outcome is the same.
const WEBHOOK_DELAY: Duration = Duration::from_secs(3);
/// How often the demo looks at the ledger or the api's metrics while waiting.
const POLL: Duration = Duration::from_millis(100);
/// The demo's last line: where a newcomer goes from here.
const NEXT_STEP: &str = "Next: `payonce serve` (from a clone: cargo run --release -- serve) keeps the same \
     stack running for you to drive; its banner prints every command to paste, from a new invoice to \
     on-call's resolve (README, \"Your first hour\").";
/// Every step the demo prints, for the progress display's "n/total".
const STEPS: u32 = 11;

/// `payonce demo` settings.
#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// The demo's ledger file (created fresh).
    #[arg(long, default_value = "payonce-demo.db")]
    pub database: String,
    /// The processor contract the demo's simulator runs and its adapter declares
    /// (`payonce simulator --list-contracts`, those on Stripe's wire;
    /// `--processor adyen` runs Adyen's).
    #[arg(long = "contract", default_value = "stripe",
          value_parser = clap::builder::PossibleValuesParser::new(payonce_processor::contract::names()))]
    pub processor_contract: String,
    /// The processor wire the built-in simulator speaks and the adapter uses: `stripe` or `adyen`.
    #[arg(long, default_value = "stripe", value_parser = ["stripe", "adyen"])]
    pub processor: String,
}

/// The all-in-one plan the demo runs: built-in defaults (never the environment, so the demo runs the
/// same everywhere), a fresh SQLite file, free ports, a fast sweep, every webhook delivered twice.
fn plan(db_url: &str, processor: &str, processor_contract: &str) -> anyhow::Result<Plan> {
    let mut common: Common = builtin_defaults()?;
    common.database_url = db_url.to_string();
    common.processor = processor.to_string();
    common.processor_contract = processor_contract.to_string();
    let mut api: ApiArgs = builtin_defaults()?;
    api.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    let mut reconciler: ReconcilerArgs = builtin_defaults()?;
    reconciler.sweep_interval_ms = 250;
    Ok(Plan {
        common,
        api,
        worker: builtin_defaults::<WorkerArgs>()?,
        reconciler,
        simulator: Some(SimulatorConfig {
            webhook_duplicates_per_mille: 1000,
            webhook_delay: WEBHOOK_DELAY,
            ..SimulatorConfig::default()
        }),
    })
}

/// Waits until `check` yields a value, polling every [`POLL`], failing with `what` after `deadline`.
async fn until<T, F, Fut>(what: &str, deadline: Duration, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    let started = Instant::now();
    loop {
        if let Some(v) = check().await? {
            return Ok(v);
        }
        anyhow::ensure!(
            started.elapsed() < deadline,
            "timed out after {deadline:?} waiting for {what}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Reads one unlabelled-or-labelled sample from a Prometheus text page.
fn sample(page: &str, series: &str) -> u64 {
    page.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0)
}

/// The demo story for invoice INV-2048: each step below prints its own line(s).
pub async fn run(args: DemoArgs) -> anyhow::Result<ExitCode> {
    let mut story = Story::start(args).await?;
    let op_id = story.billing_creates_the_invoice().await?;
    let assertion_key = story.acme_signs_its_customers_in().await?;
    let url = story.send_the_confirmation_link(&op_id).await?;
    story
        .customer_approves(&op_id, &url, &assertion_key)
        .await?;
    story.crash_a_worker_after_submitting().await?;
    let daemons = story.start_the_stacks_worker_and_reconciler()?;
    story.assistant_pays_and_retries(&op_id).await?;
    let done = story.reconciler_converges(&op_id, &daemons).await?;
    let deliveries = story.webhooks_arrive_twice().await?;
    let payments = story.count_payments(&op_id, &done).await?;
    story.assistant_asks_for_the_status(&op_id).await?;
    story.finish(&op_id, &done, payments, deliveries).await
}

/// What every step of the story shares: the running stack, the clients that talk to it, and acme's
/// keys.
struct Story {
    args: DemoArgs,
    p: Progress,
    stack: Stack,
    db_url: String,
    adyen: bool,
    api_base: String,
    http: reqwest::Client,
    clock: SystemClock,
    tenant: TenantId,
    ledger: SharedLedger,
    /// acme's billing system's key.
    service: String,
    /// acme's assistant's key.
    assistant: String,
}

/// The stack's own worker and reconciler, started once the crashing worker has claimed the payment.
struct Daemons {
    worker: Arc<Worker>,
    reconciler: Arc<Reconciler>,
}

impl Story {
    /// Starts the all-in-one stack on a fresh ledger file and issues acme's keys.
    async fn start(args: DemoArgs) -> anyhow::Result<Story> {
        let mut p = Progress::new(STEPS);
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", args.database));
        }
        let db_url = format!("sqlite:{}", args.database);
        let adyen = args.processor == "adyen";
        let stack = Stack::start(plan(&db_url, &args.processor, &args.processor_contract)?).await?;
        let api_base = stack.api_url.clone();
        let clock = SystemClock;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()?;
        p.done(&format!(
            "all-in-one stack up: api {api_base}, simulator ({}) {}, ledger {db_url}",
            if adyen {
                "Adyen Checkout v71 wire"
            } else {
                "Stripe-compatible"
            },
            stack.processor_url
        ));
        let tenant = TenantId::parse("acme")?;
        let ledger = stack.ledger.clone();
        let service = payonce_api::create_api_key(
            ledger.as_ref(),
            &tenant,
            Role::Service,
            "billing",
            clock.now(),
        )
        .await?;
        let assistant = payonce_api::create_api_key(
            ledger.as_ref(),
            &tenant,
            Role::Assistant,
            "assistant",
            clock.now(),
        )
        .await?;
        Ok(Story {
            args,
            p,
            stack,
            db_url,
            adyen,
            api_base,
            http,
            clock,
            tenant,
            ledger,
            service,
            assistant,
        })
    }

    /// acme's billing creates the operation for invoice INV-2048.
    async fn billing_creates_the_invoice(&mut self) -> anyhow::Result<OperationId> {
        let created: serde_json::Value = self
            .http
            .post(format!("{}/v1/operations", self.api_base))
            .bearer_auth(&self.service)
            .json(&serde_json::json!({
                "business_key": "invoice:INV-2048:pay",
                "details": {"amount": 2048, "currency": "usd", "customer": "cus_demo", "payment_method": "pm_card_visa",
                            "invoice": "INV-2048", "description": "Hosting, March"}
            }))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        let op_id = OperationId::parse(created["id"].as_str().context("no operation id")?)?;
        self.p.done(&format!(
            "billing created {op_id} for 20.48 USD, invoice INV-2048 (status {})",
            created["status"]
        ));
        Ok(op_id)
    }

    /// The demo plays acme's own app too: acme's customers approve with an assertion its app signs
    /// once they are logged in (a link alone approves nothing). Returns the app's signing key.
    async fn acme_signs_its_customers_in(&self) -> anyhow::Result<String> {
        let secrets = payonce_api::verify::set_tenant_verification(
            &self.ledger,
            &self.tenant,
            &payonce_api::verify::VerificationRequest {
                method: payonce_ledger::verification::VerificationMethod::SignedAssertion,
                assertion_key_id: Some("acme-app".into()),
                notify_url: None,
            },
            self.clock.now(),
        )
        .await?;
        secrets
            .assertion_key
            .context("a signed-assertion tenant has a key")
    }

    /// Billing asks for the customer's confirmation link.
    async fn send_the_confirmation_link(&mut self, op_id: &OperationId) -> anyhow::Result<String> {
        let link: serde_json::Value = self
            .http
            .post(format!(
                "{}/v1/operations/{op_id}/approval-requests",
                self.api_base
            ))
            .bearer_auth(&self.service)
            .json(&serde_json::json!({}))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        let url = link["url"]
            .as_str()
            .context("no confirmation link")?
            .to_string();
        self.p.done(
            "confirmation link for the customer (it approves nothing without the customer's sign-in):",
        );
        self.p.detail(&url);
        Ok(url)
    }

    /// The customer, signed in to acme's app, opens the link and approves what the page shows.
    async fn customer_approves(
        &mut self,
        op_id: &OperationId,
        url: &str,
        assertion_key: &str,
    ) -> anyhow::Result<()> {
        let assertion = payonce_api::assertion::sign(
            assertion_key,
            &payonce_api::assertion::Claims {
                kid: "acme-app".into(),
                sub: "cus_demo".into(),
                op: op_id.as_str().into(),
                exp: self.clock.now().as_millis() + 60_000,
                nonce: payonce_core::id::random_hex(16),
            },
        );
        let page = self
            .http
            // An assertion is base64url and dots: safe in a query as it is.
            .get(format!("{url}?assertion={assertion}"))
            .send()
            .await?
            .error_for_status()?
            .text()
            .await?;
        let marker = "name=\"details_hash\" value=\"";
        let at = page
            .find(marker)
            .context("the confirmation page has no approval form")?
            + marker.len();
        let shown_hash = page[at..].chars().take(64).collect::<String>();
        let approved = self
            .http
            .post(url)
            .form(&[
                ("details_hash", shown_hash.as_str()),
                ("assertion", assertion.as_str()),
            ])
            .send()
            .await?;
        anyhow::ensure!(
            approved.status().is_success(),
            "approval failed: {}",
            approved.status()
        );
        self.p.done("the customer signed in to acme's app (signed assertion), saw 20.48 USD for INV-2048 and approved exactly that; the operation is enqueued");
        Ok(())
    }

    /// A worker in its own process, armed to die right after the processor accepts the payment. The
    /// stack's own worker starts only afterwards, so this one is the one that claims the payment.
    async fn crash_a_worker_after_submitting(&mut self) -> anyhow::Result<()> {
        let exe = std::env::current_exe().context("locating the payonce binary")?;
        let mut worker_cmd = tokio::process::Command::new(exe);
        // Like the stack, the crashing worker ignores the caller's settings: only what the story sets.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("PAYONCE_") {
                worker_cmd.env_remove(name);
            }
        }
        let crash = worker_cmd
            .arg("worker")
            .env("PAYONCE_DATABASE_URL", &self.db_url)
            .env("PAYONCE_PROCESSOR_URL", &self.stack.processor_url)
            .env("PAYONCE_PROCESSOR_KIND", &self.args.processor)
            .env("PAYONCE_LEASE_TTL_MS", "1500")
            .env("PAYONCE_LEASE_RENEW_MS", "500")
            .env("PAYONCE_SUBMIT_TIMEOUT_MS", "5000")
            .env("PAYONCE_SHUTDOWN_GRACE_MS", "5000")
            .env(payonce_core::failpoint::ENV, "after_processor_accepted")
            .env("RUST_LOG", "error")
            .stdin(std::process::Stdio::null())
            // Its last words ("failure point … hit; aborting") are the next step's line.
            .stderr(std::process::Stdio::null())
            .status();
        let status = self
            .p
            .wait(
                "a worker process claims the payment and submits it",
                crash,
                |s| match s {
                    Ok(s) => format!(
                        "the worker submitted the payment and crashed before recording it ({s})"
                    ),
                    Err(e) => format!("the worker process could not run: {e}"),
                },
            )
            .await?;
        anyhow::ensure!(
            !status.success(),
            "the worker was meant to crash, but exited cleanly"
        );
        Ok(())
    }

    /// The stack's own worker and reconciler start, now that the crashed worker holds the lease.
    fn start_the_stacks_worker_and_reconciler(&mut self) -> anyhow::Result<Daemons> {
        let worker = self.stack.start_worker()?;
        let reconciler = self.stack.start_reconciler();
        Ok(Daemons { worker, reconciler })
    }

    /// The assistant asks to pay; the first answer is lost on the way back, so it asks again.
    async fn assistant_pays_and_retries(&mut self, op_id: &OperationId) -> anyhow::Result<()> {
        let (http, api_base, assistant) = (&self.http, &self.api_base, &self.assistant);
        let tool_call = |call_id: &'static str| {
            http.post(format!("{api_base}/v1/tool-calls")).bearer_auth(assistant).json(&serde_json::json!({
                "format": "openai_chat",
                "call": {"id": call_id, "type": "function",
                         "function": {"name": "pay_invoice", "arguments": format!("{{\"operation_id\":\"{op_id}\"}}")}}
            }))
        };
        let lost =
            tokio::time::timeout(Duration::from_millis(1), tool_call("call_first").send()).await;
        self.p.done(&format!(
            "assistant: pay_invoice, response lost on the way back ({})",
            if lost.is_err() { "dropped" } else { "arrived" }
        ));
        let retry: serde_json::Value = tool_call("call_regenerated")
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        let answer: serde_json::Value =
            serde_json::from_str(retry["content"].as_str().unwrap_or("{}"))?;
        self.p.done(&format!(
            "assistant retried with a new call id; payonce answered: \"{}\"",
            answer["message"].as_str().unwrap_or("?")
        ));
        Ok(())
    }

    /// The stack's reconciler waits out the crashed worker's lease and settles the payment; the
    /// stack's worker finds nothing left to pay.
    async fn reconciler_converges(
        &mut self,
        op_id: &OperationId,
        daemons: &Daemons,
    ) -> anyhow::Result<Operation> {
        let (ledger, tenant) = (&self.ledger, &self.tenant);
        let done: Operation = self.p
            .wait(
                "the stack's reconciler waits for the crashed worker's lease, then looks the payment up",
                until("the operation to reach a final state", CONVERGE_DEADLINE, || async {
                    let op = ledger.get(tenant, op_id).await?;
                    Ok(op.status.is_terminal().then_some(op))
                }),
                |r| match r {
                    Ok(op) => format!("reconciled: {} ({})", op.status.as_str(), op.external_ref.as_deref().unwrap_or("-")),
                    Err(e) => format!("not reconciled: {e:#}"),
                },
            )
            .await?;
        let m = daemons.reconciler.metrics();
        if self.adyen {
            // Adyen has no lookup of a payment by id: the same key within its 31 days replays the result.
            self.p.detail(&format!(
                "reconciler: {} expired lease(s) with a submission recorded -> unknown; {} resubmitted with the SAME key (Adyen replayed its saved result: no lookup by id exists, no new key)",
                m.marked_unknown.get(),
                m.retried_same_key.get(),
            ));
        } else {
            self.p.detail(&format!(
                "reconciler: {} expired lease(s) with a submission recorded -> unknown; {} resolved by looking the payment up ({})",
                m.marked_unknown.get(),
                m.resolved_succeeded.get(),
                if m.resolved_succeeded.get() > 0 { "no retry, no new key" } else { "a webhook got there first" }
            ));
        }
        self.p.detail(&format!(
            "the stack's own worker claimed {} operation(s): nothing was left to pay",
            daemons.worker.metrics().claimed.get()
        ));
        Ok(done)
    }

    /// The simulator delivers every webhook twice; the api stores each event once. Returns how many
    /// deliveries the api accepted.
    async fn webhooks_arrive_twice(&mut self) -> anyhow::Result<u64> {
        let (http, api_base) = (&self.http, &self.api_base);
        self.p
            .wait(
                if self.adyen { "the simulator delivers each signed Adyen notification twice" } else { "the simulator delivers each webhook twice" },
                until("two webhook deliveries at the api", WEBHOOK_DEADLINE, || async {
                    let page = http.get(format!("{api_base}/metrics")).send().await?.text().await?;
                    let n = sample(&page, "payonce_api_webhook_deliveries_total{result=\"accepted\"}");
                    Ok((n >= 2).then_some(n))
                }),
                |r| match r {
                    Ok(n) => format!("{n} webhook deliveries accepted; each event is stored once, as a hint the reconciler checks against the processor"),
                    Err(e) => format!("webhooks: {e:#}"),
                },
            )
            .await
    }

    /// The simulator's audit says how many payments the processor took for the operation.
    async fn count_payments(
        &mut self,
        op_id: &OperationId,
        done: &Operation,
    ) -> anyhow::Result<usize> {
        let audit = payment_audit::read_all(
            &self.http,
            &self.stack.processor_url,
            payment_audit::PAGE_SIZE_MAX,
        )
        .await
        .context("reading the simulator audit")?;
        let payments = audit_count(&audit, op_id.as_str());
        self.p.done(&format!(
            "outcome: {} ({}); payments at the processor for this operation: {payments}",
            done.status.as_str(),
            done.external_ref.as_deref().unwrap_or("-")
        ));
        Ok(payments)
    }

    /// The assistant asks for the payment's status, in Anthropic's tool-use format this time.
    async fn assistant_asks_for_the_status(&mut self, op_id: &OperationId) -> anyhow::Result<()> {
        let status: serde_json::Value = self
            .http
            .post(format!("{}/v1/tool-calls", self.api_base))
            .bearer_auth(&self.assistant)
            .json(&serde_json::json!({"format": "anthropic", "call": {"type": "tool_use", "id": "toolu_status",
                "name": "get_payment_status", "input": {"operation_id": op_id.as_str()}}}))
            .send()
            .await?
            .json()
            .await?;
        let answer: serde_json::Value =
            serde_json::from_str(status["content"].as_str().unwrap_or("{}"))?;
        self.p.done(&format!(
            "assistant asks again: \"{}\"",
            answer["message"].as_str().unwrap_or("?")
        ));
        Ok(())
    }

    /// Prints the operation's full history, stops the stack, and checks the story's one claim:
    /// exactly one payment.
    async fn finish(
        self,
        op_id: &OperationId,
        done: &Operation,
        payments: usize,
        deliveries: u64,
    ) -> anyhow::Result<ExitCode> {
        println!(
            "\n{}",
            oncall::show(
                self.ledger.as_ref(),
                None,
                op_id,
                self.clock.now(),
                Format::Table
            )
            .await?
        );
        self.stack.shutdown().await;
        anyhow::ensure!(
            payments == 1 && done.status == Status::Succeeded && deliveries >= 2,
            "expected exactly one successful payment"
        );
        println!(
            "One approved intention, one payment. Ledger kept in {}.",
            self.args.database
        );
        println!("{NEXT_STEP}");
        Ok(ExitCode::SUCCESS)
    }
}

/// Counts audit entries whose metadata names the operation.
fn audit_count(audit: &[serde_json::Value], operation: &str) -> usize {
    audit
        .iter()
        .filter(|r| {
            r.pointer("/metadata/payonce_operation_id")
                .and_then(|v| v.as_str())
                == Some(operation)
        })
        .count()
}
