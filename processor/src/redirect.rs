//! Redirects from a processor are never followed. A client that follows them re-sends a payment to
//! whatever host a front names: a 301/302/303 turns the POST into a GET without `Authorization`
//! (the processor then answers "Invalid API Key", a wrong instruction to on-call), and a 307/308
//! re-sends the payment POST, its body and its idempotency key to that host. Every adapter's client
//! is built with [`policy`]; a 3xx that comes back is a configuration error (the processor's URL
//! points at something that redirects), and for a write that was sent, an unknown outcome: the
//! front received the request, and nobody can say what it did with it.

/// The redirect policy of every processor client: none followed.
pub fn policy() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::none()
}

/// The sentence for a 3xx answer (`None` for any other status): the status, where it points, and
/// that the configuration is at fault.
pub fn redirected(response: &reqwest::Response) -> Option<String> {
    let status = response.status();
    if !status.is_redirection() {
        return None;
    }
    let location = response
        .headers()
        .get(reqwest::header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("nowhere");
    Some(format!(
        "HTTP {} redirect to {location:?}, not followed: a configuration error (the processor's \
         URL {} points at something that redirects; set it to the processor's own URL)",
        status.as_u16(),
        response.url().origin().ascii_serialization(),
    ))
}

/// The outcome of a write answered by a redirect: it was sent, so what became of it is unknown.
pub fn unknown_after(why: String) -> crate::SubmitOutcome {
    crate::SubmitOutcome::Unknown {
        reason: format!("{why}; the request was sent, so its outcome is unknown"),
        reference: None,
    }
}
