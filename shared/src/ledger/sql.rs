//! Statements valid in both stores (Postgres and SQLite accept the same `$n` placeholders, `ON
//! CONFLICT`, `RETURNING` and `CASE`). Store-specific ones live in `postgres.rs` and `sqlite.rs`.
//! Every UPDATE sets `last_event` (NULL when nothing should be logged): the audit trigger reads it.

pub const INSERT_OPERATION: &str = "INSERT INTO operations (id, tenant_id, business_key, kind, amount_minor, currency, \
     customer, payment_method, invoice, destination, description, details_hash, status, attempt, idempotency_key, \
     available_at, last_event, last_actor, last_detail, created_at, updated_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, 'awaiting_approval', 0, $13, $14, 'create', $15, NULL, $14, $14) \
     ON CONFLICT (tenant_id, business_key) DO NOTHING RETURNING *";

pub const SELECT_BY_BUSINESS_KEY: &str =
    "SELECT * FROM operations WHERE tenant_id = $1 AND business_key = $2";
pub const SELECT_BY_ID_IN_TENANT: &str =
    "SELECT * FROM operations WHERE id = $1 AND tenant_id = $2";
pub const SELECT_BY_ID: &str = "SELECT * FROM operations WHERE id = $1";
pub const SELECT_EVENTS: &str =
    "SELECT * FROM operation_events WHERE operation_id = $1 ORDER BY id";

pub const APPROVE: &str = "UPDATE operations SET status = 'ready', approved_hash = $3, approved_by = $4, \
     approval_expires_at = $5, available_at = $6, updated_at = $6, last_event = 'approve', last_actor = $4, \
     last_detail = $7 \
     WHERE id = $1 AND tenant_id = $2 AND status = 'awaiting_approval' AND details_hash = $3 RETURNING *";
pub const INSERT_APPROVAL: &str = "INSERT INTO approvals (id, operation_id, details_hash, approved_by, method, \
     approved_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7)";
pub const LATEST_APPROVAL: &str = "SELECT * FROM approvals WHERE operation_id = $1 AND revoked_at IS NULL \
     ORDER BY approved_at DESC, id DESC LIMIT 1";
pub const CANCEL: &str = "UPDATE operations SET status = 'cancelled', updated_at = $3, last_event = 'cancel', \
     last_actor = $4, last_detail = NULL \
     WHERE id = $1 AND tenant_id = $2 AND status IN ('awaiting_approval', 'ready') RETURNING *";

/// Renews only the leases named in `$4` (a JSON array of ids): an owner-wide renewal would keep alive
/// a lease whose work the owner gave up on (an outcome it could not record through an outage).
pub const RENEW: &str = "UPDATE operations SET lease_expires_at = $3, last_event = NULL \
     WHERE status = 'executing' AND lease_owner = $1 AND lease_expires_at > $2 \
     AND id IN (SELECT value FROM json_each($4)) RETURNING id, attempt";
pub const MARK_SUBMITTING: &str = "UPDATE operations SET first_submitted_at = COALESCE(first_submitted_at, $3), \
     first_submitted_attempt = COALESCE(first_submitted_attempt, $2), last_submitted_at = $3, \
     submit_count = submit_count + 1, updated_at = $3, last_event = 'submission_started', last_actor = lease_owner, \
     last_detail = NULL \
     WHERE id = $1 AND attempt = $2 AND status = 'executing' AND lease_expires_at > $3";
/// Gives a lease back: to `ready` if nothing was ever submitted, else to `unknown` (an earlier
/// attempt's request may have reached the processor).
pub const RELEASE: &str = "UPDATE operations SET \
     status = CASE WHEN first_submitted_at IS NULL THEN 'ready' ELSE 'unknown' END, \
     next_check_at = CASE WHEN first_submitted_at IS NULL THEN NULL ELSE $3 END, \
     lease_owner = NULL, lease_expires_at = NULL, available_at = $3, updated_at = $3, \
     last_event = CASE WHEN first_submitted_at IS NULL THEN 'release' ELSE 'outcome_unknown' END, \
     last_actor = $4, last_detail = 'lease given back before submitting' \
     WHERE id = $1 AND attempt = $2 AND status = 'executing'";

pub const RECORD_SUCCEEDED: &str = "UPDATE operations SET status = 'succeeded', external_ref = $3, result = $4, \
     failure_code = NULL, failure_message = NULL, lease_owner = NULL, lease_expires_at = NULL, next_check_at = NULL, \
     updated_at = $6, last_event = 'processor_succeeded', last_actor = $5, last_detail = $3 \
     WHERE id = $1 AND attempt = $2 AND status = 'executing' RETURNING *";
pub const RECORD_FAILED: &str = "UPDATE operations SET status = 'failed', external_ref = COALESCE($3, external_ref), \
     failure_code = $4, failure_message = $5, lease_owner = NULL, lease_expires_at = NULL, next_check_at = NULL, \
     updated_at = $7, last_event = 'processor_failed', last_actor = $6, last_detail = $4 \
     WHERE id = $1 AND attempt = $2 AND status = 'executing' RETURNING *";
/// Nothing was sent by this attempt and no earlier attempt sent anything: back to `ready`.
pub const RECORD_RETRY: &str = "UPDATE operations SET status = 'ready', available_at = $3, failure_message = $4, \
     first_submitted_at = NULL, first_submitted_attempt = NULL, lease_owner = NULL, lease_expires_at = NULL, \
     updated_at = $6, last_event = 'not_submitted_retry', last_actor = $5, last_detail = $4 \
     WHERE id = $1 AND attempt = $2 AND status = 'executing' \
     AND (first_submitted_attempt IS NULL OR first_submitted_attempt = $2) RETURNING *";
pub const RECORD_EXHAUSTED: &str = "UPDATE operations SET status = 'needs_attention', failure_code = 'attempts_exhausted', \
     failure_message = $3, lease_owner = NULL, lease_expires_at = NULL, next_check_at = NULL, updated_at = $5, \
     last_event = 'not_submitted_exhausted', last_actor = $4, last_detail = $3 \
     WHERE id = $1 AND attempt = $2 AND status = 'executing' RETURNING *";
pub const RECORD_UNKNOWN: &str = "UPDATE operations SET status = 'unknown', next_check_at = $3, \
     external_ref = COALESCE($4, external_ref), failure_message = $5, lease_owner = NULL, lease_expires_at = NULL, \
     updated_at = $7, last_event = 'outcome_unknown', last_actor = $6, last_detail = $5 \
     WHERE id = $1 AND attempt = $2 AND status = 'executing' RETURNING *";
/// Rejected only if nothing was ever submitted; otherwise the caller escalates.
pub const RECORD_REJECTED: &str = "UPDATE operations SET status = 'rejected', failure_code = $3, failure_message = $4, \
     lease_owner = NULL, lease_expires_at = NULL, updated_at = $6, last_event = 'reject_before_submit', \
     last_actor = $5, last_detail = $3 \
     WHERE id = $1 AND attempt = $2 AND status = 'executing' AND first_submitted_at IS NULL RETURNING *";
pub const RECORD_ATTENTION: &str = "UPDATE operations SET status = 'needs_attention', failure_message = $3, \
     lease_owner = NULL, lease_expires_at = NULL, next_check_at = NULL, updated_at = $5, last_event = 'escalate', \
     last_actor = $4, last_detail = $3 \
     WHERE id = $1 AND attempt = $2 AND status = 'executing' RETURNING *";

pub const EXPIRED_LEASES: &str = "SELECT id, attempt, lease_owner, lease_expires_at, first_submitted_at \
     FROM operations WHERE status = 'executing' AND lease_expires_at <= $1 ORDER BY lease_expires_at LIMIT $2";
pub const EXPIRE_UNSUBMITTED: &str = "UPDATE operations SET status = 'ready', lease_owner = NULL, \
     lease_expires_at = NULL, available_at = $3, updated_at = $3, last_event = 'lease_expired_unsubmitted', \
     last_actor = $4, last_detail = $5 \
     WHERE id = $1 AND attempt = $2 AND status = 'executing' AND lease_expires_at <= $3 AND first_submitted_at IS NULL";
pub const EXPIRE_SUBMITTED: &str = "UPDATE operations SET status = 'unknown', next_check_at = $6, lease_owner = NULL, \
     lease_expires_at = NULL, updated_at = $3, last_event = 'lease_expired_submitted', last_actor = $4, last_detail = $5 \
     WHERE id = $1 AND attempt = $2 AND status = 'executing' AND lease_expires_at <= $3 \
     AND first_submitted_at IS NOT NULL";

pub const DUE_FOR_CHECK: &str = "SELECT * FROM operations WHERE status = 'unknown' AND next_check_at <= $1 \
     ORDER BY next_check_at LIMIT $2";
pub const DEFER_CHECK: &str = "UPDATE operations SET next_check_at = $3, check_count = check_count + 1, \
     failure_message = $4, updated_at = $6, last_event = 'check_deferred', last_actor = $5, last_detail = $4 \
     WHERE id = $1 AND attempt = $2 AND status = 'unknown'";
pub const CLAIM_UNKNOWN: &str = "UPDATE operations SET status = 'executing', attempt = attempt + 1, lease_owner = $3, \
     lease_expires_at = $4, next_check_at = NULL, updated_at = $5, last_event = 'claim', last_actor = $3, \
     last_detail = $6 \
     WHERE id = $1 AND attempt = $2 AND status = 'unknown' RETURNING *";
pub const ESCALATE_UNKNOWN: &str = "UPDATE operations SET status = 'needs_attention', failure_message = $3, \
     next_check_at = NULL, updated_at = $5, last_event = 'escalate', last_actor = $4, last_detail = $3 \
     WHERE id = $1 AND attempt = $2 AND status = 'unknown'";

/// Report or resolution: the row becomes `succeeded` from the state the caller saw.
pub const SET_SUCCEEDED: &str = "UPDATE operations SET status = 'succeeded', external_ref = $4, \
     result = COALESCE($5, result), failure_code = NULL, lease_owner = NULL, lease_expires_at = NULL, \
     next_check_at = NULL, updated_at = $8, last_event = $6, last_actor = $7, last_detail = $9 \
     WHERE id = $1 AND attempt = $2 AND status = $3 RETURNING *";
/// Report or resolution: the row becomes `failed` from the state the caller saw.
pub const SET_FAILED: &str = "UPDATE operations SET status = 'failed', external_ref = COALESCE($4, external_ref), \
     failure_code = $5, failure_message = $6, lease_owner = NULL, lease_expires_at = NULL, next_check_at = NULL, \
     updated_at = $9, last_event = $7, last_actor = $8, last_detail = $10 \
     WHERE id = $1 AND attempt = $2 AND status = $3 RETURNING *";
/// A contradicting report: `needs_attention`, the stored result and reference kept.
pub const SET_CONFLICT: &str = "UPDATE operations SET status = 'needs_attention', failure_message = $4, \
     lease_owner = NULL, lease_expires_at = NULL, next_check_at = NULL, updated_at = $6, \
     last_event = 'conflicting_report', last_actor = $5, last_detail = $4 \
     WHERE id = $1 AND attempt = $2 AND status = $3 RETURNING *";
/// On-call retry with the same key.
pub const SET_RETRY: &str = "UPDATE operations SET status = 'ready', available_at = $4, next_check_at = NULL, \
     updated_at = $4, last_event = 'resolve_retry', last_actor = $5, last_detail = $6 \
     WHERE id = $1 AND attempt = $2 AND status = $3 RETURNING *";
/// An event with no state change (ignored report, note).
pub const NOTE: &str = "UPDATE operations SET updated_at = $2, last_event = $3, last_actor = $4, last_detail = $5 \
     WHERE id = $1";

pub const LIST: &str = "SELECT * FROM operations WHERE status = $1 AND updated_at < $2 \
     AND ($3 IS NULL OR tenant_id = $3) ORDER BY updated_at LIMIT $4";
pub const PING: &str = "SELECT 1";
pub const COUNT_BY_STATUS: &str = "SELECT status, COUNT(*) AS n, MIN(updated_at) AS oldest, \
     MIN(first_submitted_at) AS oldest_submitted FROM operations GROUP BY status";

/// Inserts a service link only while the operation has fewer than `$6` unused, unexpired service
/// links (links payonce minted for an assistant's request have their own budget: `verification.rs`).
pub const INSERT_LINK: &str = "INSERT INTO approval_links (token_hash, operation_id, details_hash, created_at, \
     expires_at) SELECT $1, $2, $3, $4, $5 WHERE (SELECT COUNT(*) FROM approval_links WHERE operation_id = $2 \
     AND used_at IS NULL AND expires_at > $4 AND origin = 'service') < $6";
pub const SELECT_LINK: &str = "SELECT * FROM approval_links WHERE token_hash = $1";
pub const USE_LINK: &str = "UPDATE approval_links SET used_at = $2 WHERE token_hash = $1 AND used_at IS NULL \
     AND expires_at > $2";

pub const INSERT_PROCESSOR_EVENT: &str = "INSERT INTO processor_events (processor, event_id, event_type, \
     operation_id, payload, received_at) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (processor, event_id) DO NOTHING";
/// Hints still to check: not applied, next check due (served by `processor_events_pending_idx`).
pub const PENDING_PROCESSOR_EVENTS: &str = "SELECT processor, event_id, event_type, operation_id, payload, \
     checks FROM processor_events WHERE applied_at IS NULL AND (check_after IS NULL OR check_after <= $1) \
     ORDER BY received_at LIMIT $2";
pub const DEFER_PROCESSOR_EVENT: &str = "UPDATE processor_events SET check_after = $3, checks = checks + 1, \
     outcome = $4 WHERE processor = $1 AND event_id = $2 AND applied_at IS NULL";
pub const MARK_PROCESSOR_EVENT: &str = "UPDATE processor_events SET applied_at = $3, outcome = $4 WHERE processor = $1 AND event_id = $2";
pub const INSERT_TOOL_CALL: &str = "INSERT INTO tool_calls (tenant_id, operation_id, provider, provider_call_id, \
     tool, at) VALUES ($1, $2, $3, $4, $5, $6)";
pub const SELECT_TOOL_CALLS: &str =
    "SELECT provider, provider_call_id, tool FROM tool_calls WHERE operation_id = $1 ORDER BY id";
pub const KEEP_TOOL_ANSWER: &str = "INSERT INTO tool_call_keys (tenant_id, idempotency_key, fingerprint, answer, \
     created_at) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (tenant_id, idempotency_key) DO NOTHING";
pub const SELECT_TOOL_ANSWER: &str =
    "SELECT fingerprint, answer FROM tool_call_keys WHERE tenant_id = $1 AND idempotency_key = $2";
pub const INSERT_API_KEY: &str = "INSERT INTO api_keys (key_id, key_hash, tenant_id, role, label, created_at, \
     expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7)";
pub const FIND_API_KEY: &str = "SELECT * FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL \
     AND (expires_at IS NULL OR expires_at > $2)";
pub const SELECT_API_KEY: &str = "SELECT * FROM api_keys WHERE key_id = $1";
pub const LIST_API_KEYS: &str = "SELECT * FROM api_keys WHERE ($1 IS NULL OR tenant_id = $1) \
     ORDER BY created_at DESC, key_id LIMIT $2";
pub const REVOKE_API_KEY: &str = "UPDATE api_keys SET revoked_at = $2, revoked_by = $3, revoked_reason = $4 \
     WHERE key_id = $1 AND revoked_at IS NULL";
pub const RETIRE_API_KEY: &str = "UPDATE api_keys SET replaced_by = $2, \
     expires_at = CASE WHEN expires_at IS NULL OR expires_at > $3 THEN $3 ELSE expires_at END \
     WHERE key_id = $1 AND revoked_at IS NULL AND replaced_by IS NULL \
     AND (expires_at IS NULL OR expires_at > $4)";
pub const TOUCH_API_KEY: &str = "UPDATE api_keys SET last_used_at = $2 WHERE key_id = $1 \
     AND (last_used_at IS NULL OR last_used_at <= $3)";
pub const TRY_MAINTENANCE_LEASE: &str = "INSERT INTO maintenance_leases (name, owner, expires_at) VALUES ($1, $2, $3) \
     ON CONFLICT (name) DO UPDATE SET owner = $2, expires_at = $3 \
     WHERE maintenance_leases.expires_at <= $4 OR maintenance_leases.owner = $2";
pub const DROP_MAINTENANCE_LEASE: &str =
    "DELETE FROM maintenance_leases WHERE name = $1 AND owner = $2";
