//! The ready queue as Prometheus reads it (issue 51): the api's `/metrics` by class only (it names
//! no tenant), the reconciler's by class and by tenant, the tenants past `QUEUE_TENANTS_SHOWN`
//! summed as `(other)`.

use crate::api::spawn;
use crate::support::{rows, sqlite_ledger, tenant};
use payonce_core::clock::{Clock, Timestamp};
use payonce_core::id::TenantId;
use payonce_core::metrics::Exposition;
use payonce_core::priority::Priority::{Bulk, Interactive};
use payonce_core::queue_depth::QUEUE_TENANTS_SHOWN;
use payonce_reconciler::metrics::ReconcilerMetrics;
use std::time::Duration;

/// How long the due rows have waited when the metrics are read.
const WAITED: Duration = Duration::from_secs(90);

/// Every line of `lines` is in `text`.
fn has_all(text: &str, lines: &[String]) {
    for line in lines {
        assert!(text.contains(line.as_str()), "{line} in {text}");
    }
}

#[tokio::test]
async fn the_api_exports_the_queue_by_class_and_names_no_tenant() {
    let api = spawn(sqlite_ledger().await).await;
    let start = api.clock.now();
    let ledger = &api.ledger;
    rows::ready_in_class(ledger, &tenant(), "INV-QM1", (Interactive, None), start).await;
    rows::ready_in_class(ledger, &tenant(), "INV-QM2", (Bulk, None), start).await;
    let later = Some(start + Duration::from_secs(3_600));
    rows::ready_in_class(ledger, &tenant(), "INV-QM3", (Bulk, later), start).await;
    api.clock.advance(WAITED);
    let r = api.send("GET", "/metrics", None, None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    has_all(
        &r.text,
        &[
            "payonce_ready_operations{priority=\"interactive\"} 1\n".into(),
            "payonce_ready_operations{priority=\"bulk\"} 2\n".into(),
            "payonce_ready_due_operations{priority=\"interactive\"} 1\n".into(),
            "payonce_ready_due_operations{priority=\"bulk\"} 1\n".into(),
            "payonce_ready_oldest_age_seconds{priority=\"interactive\"} 90.0\n".into(),
            "payonce_ready_oldest_age_seconds{priority=\"bulk\"} 90.0\n".into(),
        ],
    );
    assert!(!r.text.contains("payonce_ready_tenant"), "{}", r.text);
    assert!(!r.text.contains("acme"), "{}", r.text);
    api.stop().await;
}

#[tokio::test]
async fn the_reconciler_exports_the_most_loaded_tenants_and_the_rest_as_other() {
    let ledger = sqlite_ledger().await;
    let t0 = Timestamp::from_millis(1_800_000_000_000);
    // acme: two interactive; then one bulk row for each of more tenants than are named.
    for n in 0..2 {
        let invoice = format!("INV-QR-A{n}");
        rows::ready_in_class(&ledger, &tenant(), &invoice, (Interactive, None), t0).await;
    }
    let small = QUEUE_TENANTS_SHOWN + 2;
    for n in 0..small {
        let t = TenantId::parse(&format!("t{n:02}")).unwrap();
        let invoice = format!("INV-QR-T{n}");
        rows::ready_in_class(&ledger, &t, &invoice, (Bulk, None), t0).await;
    }
    let mut e = Exposition::default();
    ReconcilerMetrics::default()
        .render(ledger.as_ref(), t0 + WAITED, &mut e)
        .await
        .unwrap();
    let text = e.finish();
    let mut lines: Vec<String> = vec![
        "payonce_ready_operations{priority=\"interactive\"} 2\n".into(),
        format!("payonce_ready_operations{{priority=\"bulk\"}} {small}\n"),
        "payonce_ready_oldest_age_seconds{priority=\"bulk\"} 90.0\n".into(),
        "payonce_ready_tenant_operations{tenant=\"acme\",priority=\"interactive\"} 2\n".into(),
        "payonce_ready_tenant_due_operations{tenant=\"acme\",priority=\"interactive\"} 2\n".into(),
    ];
    // acme has the most; then the ones with one row by name, until ten tenants are named.
    let named = QUEUE_TENANTS_SHOWN - 1;
    for n in 0..named {
        lines.push(format!(
            "payonce_ready_tenant_operations{{tenant=\"t{n:02}\",priority=\"bulk\"}} 1\n"
        ));
    }
    let rest = small - named;
    lines.push(format!(
        "payonce_ready_tenant_operations{{tenant=\"(other)\",priority=\"bulk\"}} {rest}\n"
    ));
    has_all(&text, &lines);
    let series = text
        .lines()
        .filter(|l| l.starts_with("payonce_ready_tenant_operations{"))
        .count();
    // Ten named, the rest, and the interactive class's (other), 0.
    assert!(text.contains(
        "payonce_ready_tenant_operations{tenant=\"(other)\",priority=\"interactive\"} 0\n"
    ));
    assert_eq!(
        series,
        usize::try_from(QUEUE_TENANTS_SHOWN).unwrap() + 2,
        "{text}"
    );
    assert!(!text.contains(&format!("tenant=\"t{named:02}\"")), "{text}");
}
