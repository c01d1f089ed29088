//! The create path every Stripe `POST` shares (`/v1/payment_intents`, `/v1/refunds`), written once:
//! before execution, the request's context, its `Idempotency-Key` claimed (or the saved answer
//! replayed, or the request refused), the faults that strike before commit, and the parameters
//! parsed; after execution, the answer `error_500_after_commit` replaces, the key's record as the
//! contract saves it, and the answer sent once the work committed.
//!
//! Bound: a key's claim is held from [`Creation::begin`] until the caller's commit ends, even if the
//! client hangs up first. Failure: a store error is logged once and answered with an opaque 500 that
//! is never saved under the key.

use crate::app::App;
use crate::connection::ConnHandle;
use crate::context::Ctx;
use crate::error::ApiError;
use crate::faults::FaultKind;
use crate::form::{self, Pairs};
use crate::idempotency::{self, Held, KeyState};
use crate::store::KeyRecord;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

/// A create request that is executing: its context and, when it sent a key, the key's claim.
pub(crate) struct Creation {
    /// The request's context.
    pub(crate) ctx: Ctx,
    /// The key's claim, if the request sent a key; the caller holds it until its commit ends.
    pub(crate) held: Option<Held>,
}

impl Creation {
    /// Everything before execution, in Stripe's order: the context ([`Ctx::begin`]), the form body,
    /// the key (a replay, a mismatch and a key in use end the request here), the `hang` and
    /// `error_500_before_commit` faults, then `parse` on the parameters. `Err` is the response to send.
    pub(crate) async fn begin<P>(
        app: &App,
        conn: ConnHandle,
        headers: &HeaderMap,
        path: &str,
        body: &[u8],
        parse: impl FnOnce(&Pairs) -> Result<P, ApiError>,
    ) -> Result<(Creation, P), Response> {
        let pairs = form::parse_pairs(body);
        let ctx = Ctx::begin(app, conn, headers, "POST", path, pairs.as_ref().ok())?;
        let pairs = pairs.map_err(|e| ctx.error(&e))?;
        let held = match &ctx.key {
            None => None,
            Some(key) => {
                let fp = idempotency::fingerprint("POST", path, &pairs);
                match app.key_state(key, &fp, ctx.now_ms).await {
                    Ok(KeyState::Fresh(claim)) => Some(Held::new(claim, fp)),
                    Ok(KeyState::Replay(saved)) => return Err(ctx.finish(ctx.replay(saved))),
                    Ok(KeyState::Mismatch) => {
                        return Err(ctx.error(&ApiError::idempotency_mismatch(key)));
                    }
                    Ok(KeyState::InUse) => return Err(ctx.error(&ApiError::key_in_use())),
                    Err(e) => return Err(ctx.internal("idempotency lookup", &e)),
                }
            }
        };
        match ctx.fault {
            Some(FaultKind::Hang) => return Err(ctx.hang(app).await),
            Some(FaultKind::Error500BeforeCommit) => {
                return Err(ctx.error(&ApiError::internal("An unknown error occurred.")));
            }
            _ => {}
        }
        let params = parse(&pairs).map_err(|e| ctx.error(&e))?;
        Ok((Creation { ctx, held }, params))
    }

    /// The answer to save and send: the executed one, or, under `error_500_after_commit`, Stripe's
    /// 500 (Stripe remembers a 500 from a request that began executing, and replays it).
    pub(crate) fn answer(&self, executed: (StatusCode, Vec<u8>)) -> (StatusCode, Vec<u8>) {
        if self.ctx.fault == Some(FaultKind::Error500AfterCommit) {
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                ApiError::internal("An unknown error occurred.").body(),
            )
        } else {
            executed
        }
    }

    /// What to remember under the key with this answer: every answer of a request that began
    /// executing (Stripe), or only 2xx ones (`only-2xx-saved`: a retry executes it again).
    pub(crate) fn key_record(
        &self,
        app: &App,
        status: StatusCode,
        body: &[u8],
    ) -> Option<KeyRecord> {
        self.held
            .as_ref()
            .filter(|_| app.config.contract.saves(status.as_u16()))
            .map(|held| held.record(status.as_u16(), body, self.ctx.now_ms))
    }

    /// The answer, once the work (with its events) committed: wakes webhook delivery, then sends it.
    pub(crate) fn committed(&self, app: &App, status: StatusCode, body: Vec<u8>) -> Response {
        app.webhook_wake.notify_one();
        self.ctx.finish(self.ctx.respond(status, body, false))
    }
}
