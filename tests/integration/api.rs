//! The API over real HTTP: an in-process router on 127.0.0.1:0, driven with reqwest; the confirmation
//! page in a real headless Chromium; the MCP server with the official Python SDK client; two `payonce
//! api` processes on one Postgres database; the API key lifecycle; the role matrix of every route.

mod agents;
mod batch;
mod browser;
mod confirm;
mod console;
mod console_queue;
mod console_refunds;
mod customer_pages;
mod group_commit;
mod keys;
mod mcp;
mod operations;
mod priority;
mod processes;
mod refund_tool;
mod refunds;
mod role_matrix;
mod slow_clients;
mod tools;
mod verification;
mod views;
mod webhooks;

use payonce_api::{ApiConfig, AppState, create_api_key, serve_listener};
use payonce_core::clock::Timestamp;
use payonce_core::clock::{Clock, ManualClock};
use payonce_core::details::RawDetails;
use payonce_core::id::TenantId;
use payonce_ledger::{Role, SharedLedger};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Where the test clock starts (2027-01-15): a fixed, realistic epoch in ms.
pub const T0_MS: i64 = 1_800_000_000_000;
/// [`T0_MS`] as an instant.
pub const T0: Timestamp = Timestamp::from_millis(T0_MS);
/// The other tenant of isolation tests.
pub const OTHER_TENANT: &str = "globex";
/// Webhook secret the test API is configured with.
pub const WEBHOOK_SECRET: &str = "whsec_test_payonce_api";
/// Adyen HMAC key (hex) the test API verifies notifications with.
pub const ADYEN_HMAC_KEY: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
/// Adyen merchant account the test API accepts notifications for.
pub const ADYEN_MERCHANT: &str = "PayonceECOM";
/// The assertion key id of the test tenant's app.
pub const ASSERTION_KEY_ID: &str = "k1";

/// A running API with keys for every role, in two tenants.
pub struct TestApi {
    pub base: String,
    pub ledger: SharedLedger,
    pub clock: Arc<ManualClock>,
    pub http: reqwest::Client,
    pub service: String,
    pub assistant: String,
    pub on_call: String,
    pub other_service: String,
    pub other_assistant: String,
    /// The test tenant's assertion key (its customers approve with signed assertions by default).
    pub assertion_key: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
    /// The Postgres database under `ledger` when this API made it ([`spawn_on_postgres`]): dropped
    /// with the API, after the fields above.
    database: Option<crate::support::postgres::TestDatabase>,
}

/// One HTTP answer, fully read.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub text: String,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text))
    }
    pub fn code(&self) -> String {
        self.json()["error"]["code"]
            .as_str()
            .unwrap_or_else(|| panic!("no error code in {}", self.text))
            .to_string()
    }
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

/// An HTTP client with explicit timeouts (never library defaults).
pub fn http_client() -> reqwest::Client {
    payonce_simulator::install_crypto_provider();
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(20))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// POSTs `body` as JSON to `url` with `key` as the bearer: (status, JSON answer; `null` when the
/// answer is not JSON).
pub async fn post_json(
    http: &reqwest::Client,
    url: String,
    key: &str,
    body: Value,
) -> (u16, Value) {
    let r = http
        .post(url)
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .expect("the api answers");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// The tenant most tests use.
pub fn tenant() -> TenantId {
    crate::support::tenant()
}

/// Starts the API on `ledger` with a manual clock at [`T0_MS`].
pub async fn spawn(ledger: SharedLedger) -> TestApi {
    spawn_with(ledger, |_| {}).await
}

/// Starts the API on a Postgres ledger of its own, dropped with the API.
pub async fn spawn_on_postgres() -> TestApi {
    let (ledger, database) = crate::support::postgres_ledger().await;
    spawn(ledger).await.holding(database)
}

/// Starts the API with `tweak` applied to its config (listen and base URL are forced).
pub async fn spawn_with(ledger: SharedLedger, tweak: impl FnOnce(&mut ApiConfig)) -> TestApi {
    spawn_full(ledger, tweak, None).await
}

/// Starts the API reading payment methods' cards from `processor` (the confirmation page's card).
pub async fn spawn_with_processor(
    ledger: SharedLedger,
    processor: Arc<dyn payonce_processor::Processor>,
) -> TestApi {
    spawn_full(ledger, |_| {}, Some(processor)).await
}

async fn spawn_full(
    ledger: SharedLedger,
    tweak: impl FnOnce(&mut ApiConfig),
    processor: Option<Arc<dyn payonce_processor::Processor>>,
) -> TestApi {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut config = ApiConfig {
        listen: addr,
        public_base_url: format!("http://{addr}"),
        webhook_secrets: vec![WEBHOOK_SECRET.to_string()],
        adyen_hmac_key: Some(ADYEN_HMAC_KEY.to_string()),
        adyen_merchant_account: Some(ADYEN_MERCHANT.to_string()),
        // The secret the tests' worker and reconciler processes run with: they refuse a ledger
        // whose ids another secret derived.
        key_secret: crate::support::key_secret(),
        ..ApiConfig::default()
    };
    tweak(&mut config);
    config.listen = addr;
    config.public_base_url = format!("http://{addr}");
    let clock = ManualClock::new(Timestamp::from_millis(T0_MS));
    let other = TenantId::parse(OTHER_TENANT).unwrap();
    let key = |t: TenantId, role: Role, label: &'static str| {
        let ledger = ledger.clone();
        async move {
            create_api_key(ledger.as_ref(), &t, role, label, T0)
                .await
                .unwrap()
        }
    };
    let service = key(tenant(), Role::Service, "billing").await;
    let assistant = key(tenant(), Role::Assistant, "support-bot").await;
    let on_call = key(tenant(), Role::OnCall, "alice").await;
    let other_service = key(other.clone(), Role::Service, "globex-billing").await;
    let other_assistant = key(other, Role::Assistant, "globex-bot").await;
    let secrets = payonce_api::verify::set_tenant_verification(
        &ledger,
        &tenant(),
        &payonce_api::verify::VerificationRequest {
            method: payonce_ledger::verification::VerificationMethod::SignedAssertion,
            assertion_key_id: Some(ASSERTION_KEY_ID.into()),
            notify_url: None,
        },
        T0,
    )
    .await
    .unwrap();
    let assertion_key = secrets.assertion_key.unwrap();
    let mut state = AppState::new(ledger.clone(), clock.clone(), config);
    if let Some(processor) = processor {
        state = state.with_processor(processor);
    }
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        serve_listener(listener, state, async move {
            let _ = stopped.await;
        })
        .await
        .unwrap();
    });
    TestApi {
        base: format!("http://{addr}"),
        ledger,
        clock,
        http: http_client(),
        service,
        assistant,
        on_call,
        other_service,
        other_assistant,
        assertion_key,
        stop: Some(stop),
        task: Some(task),
        database: None,
    }
}

impl TestApi {
    /// A worker named `name` on this API's ledger and clock, paying at `sim` through the Stripe
    /// adapter; the test drives it with `run_once`.
    pub fn worker(&self, sim: &payonce_simulator::Simulator, name: &str) -> payonce_worker::Worker {
        payonce_worker::Worker::new(
            self.ledger.clone(),
            crate::support::processes::stripe(sim, None),
            self.clock.clone(),
            payonce_worker::WorkerConfig::new(name),
        )
        .unwrap()
    }

    /// This API, keeping `database` (the one under its ledger) until it is dropped.
    pub fn holding(mut self, database: crate::support::postgres::TestDatabase) -> Self {
        self.database = Some(database);
        self
    }

    /// Sends a request with an optional bearer key and JSON body.
    pub async fn send(
        &self,
        method: &str,
        path: &str,
        key: Option<&str>,
        body: Option<Value>,
    ) -> Reply {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let text = resp.text().await.unwrap();
        Reply {
            status,
            headers,
            text,
        }
    }

    pub async fn get(&self, path: &str, key: &str) -> Reply {
        self.send("GET", path, Some(key), None).await
    }

    pub async fn post(&self, path: &str, key: &str, body: Value) -> Reply {
        self.send("POST", path, Some(key), Some(body)).await
    }

    /// Creates an operation for `invoice` as the service; returns its JSON.
    pub async fn create(&self, invoice: &str, amount: i64) -> Value {
        let r = self
            .post(
                "/v1/operations",
                &self.service,
                json!({"business_key": format!("invoice:{invoice}:pay"), "details": raw_details(invoice, amount)}),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.text);
        r.json()
    }

    /// [`TestApi::create_ready`] for `invoice`, then claimed by worker "w" (a 30 s lease) with its
    /// submission started, at this API's clock: the id and the `executing` row.
    pub async fn create_executing(
        &self,
        invoice: &str,
    ) -> (payonce_core::id::OperationId, payonce_ledger::Operation) {
        let op = self.create_ready(invoice).await;
        let id = payonce_core::id::OperationId::parse(op["id"].as_str().unwrap()).unwrap();
        let worker = crate::support::rows::holder("w", Duration::from_millis(30_000));
        let row =
            crate::support::rows::executing(&self.ledger, &id, &worker, self.clock.now()).await;
        (id, row)
    }

    /// Creates and approves (as the service) an operation; returns its JSON, now `ready`.
    pub async fn create_ready(&self, invoice: &str) -> Value {
        let op = self.create(invoice, 2048).await;
        let r = self
            .post(
                &format!("/v1/operations/{}/approve", op["id"].as_str().unwrap()),
                &self.service,
                json!({"details_hash": op["details_hash"], "approved_by": "customer:cus_test"}),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        r.json()
    }

    /// A confirmation link for an operation, from the service route.
    pub async fn link(&self, id: &str) -> String {
        let r = self
            .post(
                &format!("/v1/operations/{id}/approval-requests"),
                &self.service,
                json!({}),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.text);
        r.json()["url"].as_str().unwrap().to_string()
    }

    /// An assertion the tenant's app signs for `customer` approving operation `op_id`, valid for
    /// `ttl_ms` from the test clock's now, with a fresh nonce.
    pub fn assertion(&self, op_id: &str, customer: &str, ttl_ms: i64) -> String {
        payonce_api::assertion::sign(
            &self.assertion_key,
            &payonce_api::assertion::Claims {
                kid: ASSERTION_KEY_ID.into(),
                sub: customer.into(),
                op: op_id.into(),
                exp: self.clock.now().as_millis() + ttl_ms,
                nonce: payonce_core::id::random_hex(16),
            },
        )
    }

    /// `url` as the tenant's app redirects its logged-in customer (`cus_test`) to it.
    pub fn signed_in(&self, url: &str, op_id: &str) -> String {
        format!(
            "{url}?assertion={}",
            self.assertion(op_id, "cus_test", 60_000)
        )
    }

    /// Operation rows in the test tenant (every state).
    pub async fn operation_count(&self) -> usize {
        let all = self
            .ledger
            .list(&payonce_ledger::ListFilter {
                tenant: Some(tenant()),
                limit: 1000,
                ..Default::default()
            })
            .await
            .unwrap();
        all.len()
    }

    /// Stops the server and waits for it to finish (graceful shutdown).
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(10), t)
                .await
                .expect("graceful shutdown within 10 s")
                .unwrap();
        }
    }
}

/// Details as an upstream service sends them.
pub fn raw_details(invoice: &str, amount: i64) -> Value {
    serde_json::to_value(RawDetails {
        kind: "payment".into(),
        amount,
        currency: "usd".into(),
        customer: "cus_test".into(),
        payment_method: "pm_card_visa".into(),
        invoice: invoice.into(),
        destination: None,
        description: Some(format!("Hosting <b>\"{invoice}\"</b> & support")),
        refund_of: None,
    })
    .unwrap()
}

/// The repository root (for scripts under tests/).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The token in a confirmation URL.
pub fn token_of(url: &str) -> &str {
    url.rsplit('/').next().unwrap()
}
