//! Resolving several `needs_attention` operations with one reason: allowed only when they share
//! the runbook's reason and get the same outcome, after on-call has seen each one's facts; the
//! ledger's `resolve` runs once per operation, so each gets its own event.

use super::advice::Reason;
use super::session::OnCall;
use super::{ERROR_CODE_HEADER, attention, caller, html, invalid, refuse, views};
use crate::errors::{ErrorCode, HttpError};
use crate::state::AppState;
use axum::extract::rejection::{FormRejection, QueryRejection};
use axum::extract::{Form, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use payonce_core::id::OperationId;
use payonce_core::state::Status;
use payonce_ledger::{DETAIL_LEN_MAX, Operation, Resolution, Resolve};

/// Most operations one bulk resolution covers: each is shown with its facts first, and a page of
/// more than this is not read.
pub const BULK_RESOLVE_MAX: usize = 20;

/// One operation as the review shows it.
pub struct Reviewed {
    /// The operation.
    pub op: Operation,
    /// Its reason.
    pub reason: Reason,
    /// Its decision aid.
    pub attention: Option<views::Attention>,
}

/// The ids a query or form names (`id`, repeated), checked: 1 to [`BULK_RESOLVE_MAX`], distinct.
fn ids_of(pairs: &[(String, String)]) -> Result<Vec<OperationId>, HttpError> {
    let mut ids: Vec<OperationId> = Vec::new();
    for (k, v) in pairs {
        if k == "id" {
            let id = OperationId::parse(v).map_err(|_| HttpError::not_found())?;
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
    }
    if ids.is_empty() {
        return Err(invalid("choose at least one operation"));
    }
    if ids.len() > BULK_RESOLVE_MAX {
        return Err(invalid(format!(
            "at most {BULK_RESOLVE_MAX} operations can be resolved together"
        )));
    }
    Ok(ids)
}

/// Reads each operation in the caller's tenant; all must be `needs_attention` with one reason.
async fn review(
    state: &AppState,
    who: &OnCall,
    ids: &[OperationId],
) -> Result<Vec<Reviewed>, HttpError> {
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        let op = state.ledger().get(&who.tenant, id).await?;
        if op.status != Status::NeedsAttention {
            return Err(HttpError::new(
                ErrorCode::WrongState,
                format!(
                    "{id} is {}: only needs_attention operations are resolved together",
                    op.status.as_str()
                ),
            ));
        }
        let events = state.ledger().events(&who.tenant, id).await?;
        let reason = Reason::of(&events);
        let attention = attention(state, &op, &events).await;
        out.push(Reviewed {
            op,
            reason,
            attention,
        });
    }
    if let Some(first) = out.first()
        && let Some(other) = out.iter().find(|r| r.reason != first.reason)
    {
        return Err(invalid(format!(
            "{} and {} need attention for different reasons; resolve them one by one",
            first.op.id, other.op.id
        )));
    }
    Ok(out)
}

/// `GET /console/resolve-many?id=…&id=…`: each operation's facts, then one form for all of them.
pub async fn show(
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Response {
    let who = match caller(&state, &headers).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    let pairs = query.map(|Query(q)| q).unwrap_or_default();
    page(&state, &who, &pairs, None).await
}

async fn page(
    state: &AppState,
    who: &OnCall,
    pairs: &[(String, String)],
    error: Option<HttpError>,
) -> Response {
    let reviewed = match ids_of(pairs) {
        Ok(ids) => review(state, who, &ids).await,
        Err(e) => Err(e),
    };
    match reviewed {
        Ok(reviewed) => {
            let typed = |k: &str| {
                pairs
                    .iter()
                    .find(|(key, _)| key == k)
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default()
            };
            let form = views::ResolveForm {
                error: error
                    .as_ref()
                    .map(|e| (e.code().code().to_string(), e.message().to_string())),
                outcome: typed("as"),
                reference: String::new(),
                reason: typed("reason"),
            };
            let status = error.as_ref().map_or(StatusCode::OK, |e| e.code().status());
            let mut r = html(
                status,
                views::resolve_many(&who.csrf, &reviewed, &form, who.read_only),
            );
            if let Some(e) = &error {
                r.headers_mut()
                    .insert(ERROR_CODE_HEADER, HeaderValue::from_static(e.code().code()));
            }
            r
        }
        Err(e) => refuse(state, Some(&who.csrf), e),
    }
}

/// `POST /console/resolve-many` (form: `csrf`, `id` repeated, `as` `failed` or `retry`, `reason`):
/// one `resolve` per operation, with the same outcome and reason. A refused form (no reason, an
/// outcome that needs a per-operation reference) keeps on-call on the review.
pub async fn resolve(
    State(state): State<AppState>,
    headers: HeaderMap,
    form: Result<Form<Vec<(String, String)>>, FormRejection>,
) -> Response {
    let who = match caller(&state, &headers).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    let pairs = form.map(|Form(f)| f).unwrap_or_default();
    let field = |k: &str| {
        pairs
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.trim())
            .filter(|v| !v.is_empty())
    };
    if let Err(e) = who.check_csrf(field("csrf")) {
        return refuse(&state, Some(&who.csrf), e);
    }
    if let Err(e) = who.require_writer("resolve operations") {
        return refuse(&state, Some(&who.csrf), e);
    }
    let checked = match ids_of(&pairs) {
        Ok(ids) => review(&state, &who, &ids).await,
        Err(e) => Err(e),
    };
    let reviewed = match checked {
        Ok(r) => r,
        Err(e) => return refuse(&state, Some(&who.csrf), e),
    };
    let resolution = match field("as") {
        Some("failed") => Resolution::Failed,
        Some("retry") => Resolution::RetrySameKey,
        Some("succeeded") => {
            let e = invalid(
                "succeeded needs each operation's own processor reference: resolve them one by one",
            );
            return page(&state, &who, &pairs, Some(e)).await;
        }
        _ => {
            let e = invalid("as must be failed or retry");
            return page(&state, &who, &pairs, Some(e)).await;
        }
    };
    let Some(reason) = field("reason") else {
        let e = invalid("a reason is required: say what you checked (nothing was changed)");
        return page(&state, &who, &pairs, Some(e)).await;
    };
    if reason.chars().count() > DETAIL_LEN_MAX {
        let e = invalid(format!(
            "the reason is longer than {DETAIL_LEN_MAX} characters"
        ));
        return page(&state, &who, &pairs, Some(e)).await;
    }
    let actor = who.actor();
    let mut results = Vec::with_capacity(reviewed.len());
    for r in &reviewed {
        let request = Resolve {
            id: &r.op.id,
            resolution: &resolution,
            actor: &actor,
            reason,
        };
        let outcome = state
            .ledger()
            .resolve_in_tenant(&who.tenant, &request, state.now())
            .await
            .map(|op| op.status.as_str().to_string())
            .map_err(|e| HttpError::from(e).message().to_string());
        results.push((r.op.id.clone(), outcome));
    }
    html(StatusCode::OK, views::resolved_many(&who.csrf, &results))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_bounded_distinct_and_well_formed() {
        let id = OperationId::generate();
        let pair = |v: &str| ("id".to_string(), v.to_string());
        assert_eq!(
            ids_of(&[pair(id.as_str()), pair(id.as_str())]).unwrap(),
            vec![id]
        );
        assert!(ids_of(&[]).is_err());
        assert!(ids_of(&[pair("not-an-id")]).is_err());
        let many: Vec<_> = (0..=BULK_RESOLVE_MAX)
            .map(|_| pair(OperationId::generate().as_str()))
            .collect();
        assert_eq!(
            ids_of(&many).unwrap_err().message(),
            format!("at most {BULK_RESOLVE_MAX} operations can be resolved together")
        );
        assert_eq!(
            ids_of(&many[..BULK_RESOLVE_MAX]).unwrap().len(),
            BULK_RESOLVE_MAX
        );
    }
}
