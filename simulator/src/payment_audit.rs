//! Reading the payment audit from outside the simulator (tests, the chaos soak, benchmarks, the
//! demo): every page of `GET /_sim/audit/payments`, following `starting_after` while `has_more`.

use serde_json::Value;

/// Most payments one page holds (the audit's default page size): what callers ask for unless they
/// test the paging itself.
pub const PAGE_SIZE_MAX: i64 = crate::limits::AUDIT_PAYMENTS_MAX;
/// Most pages one read follows: far past any run's payments at [`PAGE_SIZE_MAX`] a page. More is an
/// error, never a silent stop.
pub const PAGES_MAX: usize = 1_000;

/// Why the audit could not be read whole.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The request failed, or was answered with an error status.
    #[error("reading the payment audit: {0}")]
    Http(#[from] reqwest::Error),
    /// A page is not the audit's shape (`data`, `has_more`, an id on the last row).
    #[error("the payment audit answered a page of another shape: {0}")]
    Shape(String),
    /// Still more after [`PAGES_MAX`] pages.
    #[error("the payment audit has more than {PAGES_MAX} pages of {0} payments")]
    TooManyPages(i64),
}

/// Every PaymentIntent the simulator at `base_url` holds, oldest first, read `page_size` (1 to
/// [`PAGE_SIZE_MAX`]) at a time with `http` (whose timeouts apply to each page).
pub async fn read_all(
    http: &reqwest::Client,
    base_url: &str,
    page_size: i64,
) -> Result<Vec<Value>, AuditError> {
    let mut all = Vec::new();
    let mut after: Option<String> = None;
    for _ in 0..PAGES_MAX {
        let mut params = vec![("limit", page_size.to_string())];
        if let Some(id) = after.take() {
            params.push(("starting_after", id));
        }
        let query = serde_urlencoded::to_string(&params)
            .map_err(|e| AuditError::Shape(format!("unencodable query: {e}")))?;
        let page: Value = http
            .get(format!("{base_url}/_sim/audit/payments?{query}"))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        let (Some(data), Some(has_more)) = (page["data"].as_array(), page["has_more"].as_bool())
        else {
            return Err(AuditError::Shape(page.to_string()));
        };
        all.extend(data.iter().cloned());
        if !has_more {
            return Ok(all);
        }
        let last = data.last().and_then(|p| p["id"].as_str());
        after = Some(
            last.ok_or_else(|| AuditError::Shape(page.to_string()))?
                .to_string(),
        );
    }
    Err(AuditError::TooManyPages(page_size))
}
