//! Server-rendered HTML: escaping, the one layout the confirmation pages share, and the security
//! headers every HTML page (confirmation pages and console) is served with. No JavaScript on the
//! customer's pages; every interpolated value goes through [`escape`].

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Response};

/// The pages' Content-Security-Policy: nothing but our own stylesheet, forms only to ourselves, no
/// framing, no scripts at all.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; style-src 'self'; img-src 'none'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";
/// The response header carrying a refusal's stable code.
pub const ERROR_CODE_HEADER: &str = "payonce-error-code";

/// The stylesheet, served from our own origin so the CSP can forbid inline styles.
pub const STYLESHEET: &str = r#"
:root { color-scheme: light; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; background: #f4f5f7; color: #1d2330;
       margin: 0; padding: 2.5rem 1rem; }
main { max-width: 32rem; margin: 0 auto; background: #fff; border-radius: 12px; padding: 2rem;
       box-shadow: 0 1px 3px rgba(0,0,0,.08), 0 8px 24px rgba(0,0,0,.06); }
h1 { font-size: 1.4rem; margin: 0 0 .5rem; }
p.lead { color: #4a5263; margin: 0 0 1.5rem; }
.amount { font-size: 2.2rem; font-weight: 700; margin: .25rem 0 1.25rem; letter-spacing: -.01em; }
dl { display: grid; grid-template-columns: 9rem 1fr; gap: .6rem 1rem; margin: 0 0 1.75rem; }
dt { color: #6b7385; }
dd { margin: 0; font-weight: 500; word-break: break-word; }
button { width: 100%; padding: .9rem 1rem; font-size: 1.05rem; font-weight: 600; border: 0; border-radius: 8px;
         background: #1f6feb; color: #fff; cursor: pointer; }
button:hover { background: #1a5fd0; }
.actions { display: flex; gap: .75rem; }
.actions button { flex: 1 1 0; }
button.secondary { background: #fff; color: #1d2330; border: 1px solid #8a91a0; }
button.secondary:hover { background: #eef0f4; }
.merchant { font-weight: 600; color: #4a5263; margin: 0 0 .75rem; }
.error { border-left: 4px solid #cf222e; background: #fff5f5; padding: .5rem 1rem; margin: 0 0 1.25rem; }
.error p { margin: .25rem 0; }
.error .fine { margin-top: .25rem; color: #4a5263; }
a { color: #0b57d0; }
@media (max-width: 480px) {
  body { padding: 1rem .5rem; }
  main { padding: 1.25rem; }
  dl { grid-template-columns: 1fr; gap: .15rem; }
  dd { margin-bottom: .6rem; }
  .actions { flex-direction: column; }
}
.result { border-left: 4px solid #6b7385; padding: .25rem 0 .25rem 1rem; }
.result.ok { border-color: #1a7f37; }
.result.warn { border-color: #bf8700; }
.result.bad { border-color: #cf222e; }
.fine { color: #6b7385; font-size: .85rem; margin-top: 1.5rem; }
label { display: block; font-weight: 600; margin: 0 0 .4rem; }
input.code { width: 100%; box-sizing: border-box; padding: .7rem; font-size: 1.3rem; letter-spacing: .3em;
             border: 1px solid #c4c9d4; border-radius: 8px; margin: 0 0 1rem; }
"#;

/// Path the stylesheet is served at.
pub const STYLESHEET_PATH: &str = "/static/confirm.css";

/// Escapes text for HTML element content and double- or single-quoted attribute values.
pub fn escape(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for c in raw.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#x27;"),
            other => out.push(other),
        }
    }
    out
}

/// A whole page: `title` is escaped here; `body_html` must already be built from escaped parts.
pub fn render(status: StatusCode, title: &str, body_html: &str) -> Response {
    let html = format!(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta name=\"referrer\" content=\"no-referrer\">\n<title>{title}</title>\n\
         <link rel=\"stylesheet\" href=\"{STYLESHEET_PATH}\">\n</head>\n<body>\n<main>\n{body_html}\n</main>\n</body>\n</html>\n",
        title = escape(title),
    );
    (status, Html(html)).into_response()
}

/// `GET /static/confirm.css`.
pub async fn stylesheet() -> Response {
    let mut response = STYLESHEET.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/css; charset=utf-8"),
    );
    response
}

/// The page security headers (CSP, no framing, no caching, no referrer), for every HTML page.
pub async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let h = response.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // The token (and an assertion) is in the URL: never send it onwards.
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(
        HeaderName::from_static("cross-origin-opener-policy"),
        HeaderValue::from_static("same-origin"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_covers_markup_and_both_quotes() {
        assert_eq!(
            escape(r#"<a href="x" onclick='y'>&</a>"#),
            "&lt;a href=&quot;x&quot; onclick=&#x27;y&#x27;&gt;&amp;&lt;/a&gt;"
        );
        assert_eq!(escape("plain 20.48 USD"), "plain 20.48 USD");
    }
}
