//! The request audit: the most recent API requests with the parameter names they sent, so tests can check
//! every parameter a client sends against Stripe's spec.

use crate::limits::REQUEST_AUDIT_MAX;
use serde::Serialize;
use std::collections::VecDeque;
use std::sync::Mutex;

/// One audited request.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct AuditedRequest {
    pub(crate) request_id: String,
    pub(crate) method: String,
    pub(crate) path: String,
    pub(crate) idempotency_key: Option<String>,
    pub(crate) stripe_version: Option<String>,
    /// Parameter names in the order sent (form body for POST, query string for GET).
    pub(crate) param_keys: Vec<String>,
    pub(crate) at_ms: i64,
}

/// The last [`REQUEST_AUDIT_MAX`] requests.
#[derive(Debug, Default)]
pub(crate) struct RequestAudit {
    entries: Mutex<VecDeque<AuditedRequest>>,
}

impl RequestAudit {
    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<AuditedRequest>> {
        match self.entries.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Records one request, forgetting the oldest beyond the bound.
    pub(crate) fn record(&self, entry: AuditedRequest) {
        let mut entries = self.lock();
        if entries.len() >= REQUEST_AUDIT_MAX {
            entries.pop_front();
        }
        entries.push_back(entry);
    }

    /// The audited requests, oldest first.
    pub(crate) fn all(&self) -> Vec<AuditedRequest> {
        self.lock().iter().cloned().collect()
    }
}
