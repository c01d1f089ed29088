//! The console's live refresh: one static script from the console's own origin (the CSP allows
//! `script-src 'self'`, never inline script) that re-fetches the overview or a list every
//! [`REFRESH`] and swaps only its `data-live` regions. Its path carries a hash of its text, so a
//! browser may cache it for a year and still never runs an old copy after an upgrade.

use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use std::sync::LazyLock;
use std::time::Duration;

/// How often the overview and the lists update themselves while their tab is visible.
pub const REFRESH: Duration = Duration::from_secs(30);
/// How long a browser may keep the script (its path changes with its text).
pub const SCRIPT_MAX_AGE: Duration = Duration::from_secs(365 * 24 * 3600);
/// Where the console's static files live.
pub const ASSETS_PREFIX: &str = "/console/assets/";
/// Hex digits of the script's SHA-256 in its file name.
const NAME_HASH_LEN: usize = 16;

/// The script.
pub const SCRIPT: &str = include_str!("refresh.js");

static SCRIPT_FILE: LazyLock<String> = LazyLock::new(|| {
    let hash = crate::auth::sha256_hex(SCRIPT);
    format!("refresh-{}.js", &hash[..NAME_HASH_LEN])
});

/// The script's path, e.g. `/console/assets/refresh-0123456789abcdef.js`.
pub fn script_path() -> String {
    format!("{ASSETS_PREFIX}{}", SCRIPT_FILE.as_str())
}

/// `GET /console/assets/{file}`: the script under its current name, long-cacheable; anything else
/// is not found.
pub async fn asset(Path(file): Path<String>) -> Response {
    if file != *SCRIPT_FILE {
        return StatusCode::NOT_FOUND.into_response();
    }
    let mut r = (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        SCRIPT,
    )
        .into_response();
    let h = r.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&format!(
        "public, max-age={}, immutable",
        SCRIPT_MAX_AGE.as_secs()
    )) {
        h.insert(header::CACHE_CONTROL, v);
    }
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_path_changes_with_its_text() {
        let path = script_path();
        assert!(path.starts_with("/console/assets/refresh-") && path.ends_with(".js"));
        assert_eq!(
            path.len(),
            ASSETS_PREFIX.len() + "refresh-.js".len() + NAME_HASH_LEN
        );
        assert!(path.contains(&crate::auth::sha256_hex(SCRIPT)[..NAME_HASH_LEN]));
    }
}
