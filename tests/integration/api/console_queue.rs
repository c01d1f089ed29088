//! The console's view of the ready queue (issue 51): the overview's "Waiting to run" by class (ready,
//! due now, the oldest due one's wait), the tenant's own rows only; the operation page's priority and
//! schedule; the list's Priority column.

use super::console::{get, sign_in};
use super::{OTHER_TENANT, spawn, tenant};
use crate::support::{rows, sqlite_ledger};
use payonce_api::console::views::utc;
use payonce_core::clock::Clock;
use payonce_core::id::TenantId;
use payonce_core::priority::Priority::{Bulk, Interactive};
use std::time::Duration;

/// How far ahead the scheduled payment is.
const SCHEDULED_IN: Duration = Duration::from_secs(3_600);
/// How long the due rows have waited when the page is read.
const WAITED: Duration = Duration::from_secs(90);

#[tokio::test]
async fn the_overview_shows_the_queue_by_class_and_the_operation_its_priority_and_schedule() {
    let api = spawn(sqlite_ledger().await).await;
    let session = sign_in(&api, &api.on_call).await;
    let start = api.clock.now();
    let scheduled_at = start + SCHEDULED_IN;
    let ledger = &api.ledger;
    rows::ready_in_class(ledger, &tenant(), "INV-CQ1", (Interactive, None), start).await;
    rows::ready_in_class(ledger, &tenant(), "INV-CQ2", (Bulk, None), start).await;
    let scheduled = rows::ready_in_class(
        ledger,
        &tenant(),
        "INV-CQ3",
        (Bulk, Some(scheduled_at)),
        start,
    )
    .await;
    // Another tenant's ready row is not this tenant's queue.
    let other = TenantId::parse(OTHER_TENANT).unwrap();
    rows::ready_in_class(ledger, &other, "INV-CQ4", (Interactive, None), start).await;
    api.clock.advance(WAITED);

    let overview = get(&api, "/console", Some(&session)).await;
    assert_eq!(overview.status, 200);
    let text = &overview.text;
    assert!(text.contains("<h2>Waiting to run</h2>"), "{text}");
    assert!(
        text.contains(
            "<thead><tr><th>Class</th><th>Ready</th><th>Due now</th><th>Oldest wait</th></tr></thead>"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "<tr id=\"queue-interactive\"><td>interactive</td><td>1</td><td>1</td><td>90s</td></tr>"
        ),
        "{text}"
    );
    assert!(
        text.contains("<tr id=\"queue-bulk\"><td>bulk</td><td>2</td><td>1</td><td>90s</td></tr>"),
        "{text}"
    );

    let page = get(
        &api,
        &format!("/console/operations/{}", scheduled.id),
        Some(&session),
    )
    .await;
    assert_eq!(page.status, 200);
    assert!(
        page.text
            .contains("<tr><th>Priority</th><td id=\"priority\">bulk</td></tr>"),
        "{}",
        page.text
    );
    // 3,600 s ahead, 90 s of it gone: 3,510 s, read as 58m.
    let expected = format!(
        "<tr><th>Scheduled for</th><td id=\"not-before\">{} (in 58m)</td></tr>",
        utc(scheduled_at.as_millis())
    );
    assert!(page.text.contains(&expected), "{expected} in {}", page.text);

    // Past its time, the schedule reads as due.
    api.clock.advance(SCHEDULED_IN);
    let page = get(
        &api,
        &format!("/console/operations/{}", scheduled.id),
        Some(&session),
    )
    .await;
    let expected = format!(
        "<td id=\"not-before\">{} (due 90s ago)</td>",
        utc(scheduled_at.as_millis())
    );
    assert!(page.text.contains(&expected), "{expected} in {}", page.text);
    let overview = get(&api, "/console", Some(&session)).await;
    assert!(
        overview
            .text
            .contains("<tr id=\"queue-bulk\"><td>bulk</td><td>2</td><td>2</td><td>61m</td></tr>"),
        "{}",
        overview.text
    );

    // An operation without a schedule shows its priority and no schedule row.
    let list = get(&api, "/console/operations", Some(&session)).await;
    assert!(
        list.text
            .contains("<th>Operation</th><th>State</th><th>Priority</th><th>Amount</th>"),
        "{}",
        list.text
    );
    let link = format!("href=\"/console/operations/{}\">", scheduled.id);
    let at = list
        .text
        .find(&link)
        .expect("the scheduled operation is listed");
    let row = list.text[at..].split("</tr>").next().unwrap();
    assert!(
        row.contains("<td><span class=\"state ready\">ready</span></td><td>bulk</td>"),
        "{row}"
    );
    api.stop().await;
}
