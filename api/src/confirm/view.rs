//! What the confirmation page shows: the review form (merchant, amount as people read it, what for,
//! the card, Approve and Decline) and the result of a submission. Every page names the merchant
//! when the link leads to one, and every refusal says how to get a new link (the merchant's support
//! contact). Customer and processor ids never appear. Every interpolated value is escaped.

use super::Outcome;
use crate::assertion::AssertionError;
use crate::page::{self, escape};
use crate::verify;
use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use payonce_core::id::TenantId;
use payonce_core::state::Status;
use payonce_ledger::profiles::TenantProfile;
use payonce_ledger::{ApprovalLink, Operation};
use payonce_processor::Card;

/// Who is asking, as the customer's pages name them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Merchant {
    /// The tenant's display name; the tenant id when it set no profile.
    pub(crate) name: String,
    /// Where the customer gets help.
    pub(crate) support_url: Option<String>,
    /// Where the customer writes for help.
    pub(crate) support_email: Option<String>,
}

impl Merchant {
    /// The merchant from its profile, or its tenant id when it has none.
    pub(crate) fn of(profile: Option<TenantProfile>, tenant: &TenantId) -> Merchant {
        match profile {
            Some(p) => Merchant {
                name: p.display_name,
                support_url: p.support_url,
                support_email: p.support_email,
            },
            None => Merchant {
                name: tenant.as_str().to_string(),
                support_url: None,
                support_email: None,
            },
        }
    }

    /// How to reach the merchant, as one escaped sentence with links.
    fn help_html(&self) -> String {
        let name = escape(&self.name);
        let mut ways = Vec::new();
        if let Some(url) = &self.support_url {
            ways.push(format!(
                "<a id=\"support-url\" href=\"{u}\">{u}</a>",
                u = escape(url)
            ));
        }
        if let Some(email) = &self.support_email {
            ways.push(format!(
                "<a id=\"support-email\" href=\"mailto:{e}\">{e}</a>",
                e = escape(email)
            ));
        }
        if ways.is_empty() {
            format!(
                "To get a new link or ask about this payment, contact {name} where you were asked to pay."
            )
        } else {
            format!(
                "To get a new link or ask about this payment, contact {name}: {}.",
                ways.join(" or ")
            )
        }
    }
}

/// The proof field the review page carries to the POST.
pub(crate) enum Proof<'a> {
    Assertion(&'a str),
    Code,
}

/// A card as a customer reads it: `Visa ending in 4242`.
fn card_line(card: &Card) -> String {
    let brand = match card.brand.as_str() {
        "amex" => "American Express".to_string(),
        "diners" => "Diners Club".to_string(),
        "jcb" => "JCB".to_string(),
        "unionpay" => "UnionPay".to_string(),
        other => {
            let spaced = other.replace('_', " ");
            let mut chars = spaced.chars();
            match chars.next() {
                Some(first) => first.to_uppercase().chain(chars).collect(),
                None => String::new(),
            }
        }
    };
    format!("{brand} ending in {}", card.last4)
}

fn merchant_line(merchant: Option<&Merchant>) -> String {
    merchant
        .map(|m| {
            format!(
                "<p class=\"merchant\" id=\"merchant\">{}</p>\n",
                escape(&m.name)
            )
        })
        .unwrap_or_default()
}

/// What the review page shows beside the operation.
pub(crate) struct Review<'a> {
    pub(crate) op: &'a Operation,
    pub(crate) link: &'a ApprovalLink,
    pub(crate) proof: Proof<'a>,
    pub(crate) merchant: &'a Merchant,
    pub(crate) card: Option<&'a Card>,
    /// A refusal that keeps the customer on the page (a wrong or missing code).
    pub(crate) error: Option<&'a Outcome>,
}

/// The review form. With an error, the same form again with the error above it and the page's
/// status set to the error's.
pub(crate) fn review_page(review: &Review<'_>) -> Response {
    let d = &review.op.details;
    let money = d.money();
    let amount = escape(&money.for_people());
    let merchant = escape(&review.merchant.name);
    let description = d
        .description()
        .map(|t| format!("<dt>For</dt><dd id=\"description\">{}</dd>\n", escape(t)))
        .unwrap_or_default();
    let card = review
        .card
        .map(|c| {
            format!(
                "<dt>Card</dt><dd id=\"card\">{}</dd>\n",
                escape(&card_line(c))
            )
        })
        .unwrap_or_default();
    let (error_html, invalid) = match review.error {
        Some(e) => (
            format!(
                "<div class=\"error\" id=\"error\" role=\"alert\"><p><strong>{}</strong> {}</p>\
                 <p class=\"fine\">Error code: <code id=\"error-code\">{}</code></p></div>\n",
                escape(&text_of(e).title),
                text_of(e).text,
                escape(e.code().unwrap_or("")),
            ),
            " aria-invalid=\"true\" aria-describedby=\"error\"",
        ),
        None => (String::new(), ""),
    };
    let proof_fields = match review.proof {
        Proof::Assertion(a) => format!(
            "<input type=\"hidden\" name=\"assertion\" value=\"{}\">\n",
            escape(a)
        ),
        Proof::Code => format!(
            "<label for=\"code\">The {digits}-digit code you were sent</label>\n\
             <input class=\"code\" id=\"code\" name=\"code\" type=\"text\" inputmode=\"numeric\" \
             autocomplete=\"one-time-code\" pattern=\"[0-9]{{{digits}}}\" maxlength=\"{digits}\" required{invalid}>\n",
            digits = verify::CODE_DIGITS
        ),
    };
    let body = format!(
        "{merchant_line}<h1>Confirm your payment</h1>\n\
         <p class=\"lead\">{merchant} asks you to approve this payment. Approving allows this exact payment, once.</p>\n\
         {error_html}\
         <div class=\"amount\" id=\"amount\">{amount}</div>\n\
         <dl>\n\
         <dt>To</dt><dd id=\"payee\">{merchant}</dd>\n\
         <dt>Invoice</dt><dd id=\"invoice\">{invoice}</dd>\n\
         {description}\
         {card}\
         <dt>Currency</dt><dd id=\"currency\">{currency}</dd>\n\
         </dl>\n\
         <form method=\"post\">\n\
         <input type=\"hidden\" name=\"details_hash\" value=\"{hash}\">\n\
         {proof_fields}\
         <div class=\"actions\">\n\
         <button type=\"submit\" name=\"action\" value=\"approve\" id=\"approve\">Approve {amount}</button>\n\
         <button type=\"submit\" name=\"action\" value=\"decline\" id=\"decline\" class=\"secondary\">Decline</button>\n\
         </div>\n\
         </form>\n\
         <p class=\"fine\">This link works once and expires soon. If you did not expect this payment, decline it. {help}</p>",
        merchant_line = merchant_line(Some(review.merchant)),
        invoice = escape(d.invoice()),
        currency = escape(&money.currency().code().to_ascii_uppercase()),
        hash = escape(&review.link.details_hash),
        help = review.merchant.help_html(),
    );
    let status = review.error.map_or(StatusCode::OK, |e| text_of(e).status);
    with_code(
        page::render(status, "Confirm your payment", &body),
        review.error,
    )
}

/// What a page says about an outcome.
struct Text {
    status: StatusCode,
    class: &'static str,
    title: String,
    /// Escaped HTML.
    text: String,
}

const ASK_AGAIN: &str = "Nothing was approved. Return to the app where you were asked to pay and start the confirmation again.";

/// A page whose words do not depend on the operation.
struct Fixed {
    status: StatusCode,
    class: &'static str,
    title: &'static str,
    /// Escaped HTML.
    text: &'static str,
}

impl Fixed {
    fn text(&self) -> Text {
        Text {
            status: self.status,
            class: self.class,
            title: self.title.to_string(),
            text: self.text.to_string(),
        }
    }

    /// The page, then [`ASK_AGAIN`]: the customer starts over from the merchant's app.
    fn asking_again(&self) -> Text {
        Text {
            text: format!("{} {ASK_AGAIN}", self.text),
            ..self.text()
        }
    }
}

const ALREADY_USED: Fixed = Fixed {
    status: StatusCode::CONFLICT,
    class: "warn",
    title: "This link was already used",
    text: "This confirmation link has already been used, so nothing more was approved. \
           If you already approved this payment, it will be collected only once.",
};
const EXPIRED: Fixed = Fixed {
    status: StatusCode::GONE,
    class: "warn",
    title: "This link has expired",
    text: "This confirmation link has expired and nothing was approved.",
};
const TAMPERED: Fixed = Fixed {
    status: StatusCode::CONFLICT,
    class: "bad",
    title: "The details did not match",
    text: "The details submitted are not the ones this link was issued for, so nothing was approved.",
};
const INVALID: Fixed = Fixed {
    status: StatusCode::NOT_FOUND,
    class: "bad",
    title: "This link is not valid",
    text: "This confirmation link is not valid. Check that you copied the whole link, or return to \
           the app or message where you were asked to pay.",
};
const UNAVAILABLE: Fixed = Fixed {
    status: StatusCode::SERVICE_UNAVAILABLE,
    class: "bad",
    title: "Please try again",
    text: "We could not process this page right now and nothing was approved. Please try again in a moment.",
};
const NOT_CONFIGURED: Fixed = Fixed {
    status: StatusCode::FORBIDDEN,
    class: "bad",
    title: "Approval is not available here",
    text: "This merchant has not set up a way to confirm that you are the customer, so payments cannot be \
           approved on this page. Nothing was approved.",
};
const ASSERTION_REQUIRED: Fixed = Fixed {
    status: StatusCode::UNAUTHORIZED,
    class: "warn",
    title: "Sign in to approve",
    text: "This page must be opened from your account in the merchant's app.",
};
const ASSERTION_REPLAYED: Fixed = Fixed {
    status: StatusCode::CONFLICT,
    class: "warn",
    title: "This sign-in was already used",
    text: "Each sign-in approves at most once.",
};
const CODE_EXHAUSTED: Fixed = Fixed {
    status: StatusCode::FORBIDDEN,
    class: "bad",
    title: "Too many wrong codes",
    text: "This code can no longer be used.",
};
const CODE_EXPIRED: Fixed = Fixed {
    status: StatusCode::GONE,
    class: "warn",
    title: "This code has expired",
    text: "This code has expired.",
};
const CODE_USED: Fixed = Fixed {
    status: StatusCode::CONFLICT,
    class: "warn",
    title: "This code was already used",
    text: "Each code approves at most once.",
};
const CODE_MISSING: Fixed = Fixed {
    status: StatusCode::CONFLICT,
    class: "warn",
    title: "No code was sent for this link",
    text: "This link cannot be confirmed with a code.",
};

fn text_of(outcome: &Outcome) -> Text {
    match outcome {
        Outcome::Approved { amount, invoice } => decided(
            "Payment approved",
            "approved",
            amount,
            invoice,
            "It will be collected once",
        ),
        Outcome::Declined { amount, invoice } => decided(
            "Payment declined",
            "declined",
            amount,
            invoice,
            "Nothing will be charged",
        ),
        Outcome::AlreadyUsed => ALREADY_USED.text(),
        Outcome::Expired => EXPIRED.text(),
        Outcome::Tampered => TAMPERED.text(),
        Outcome::Invalid => INVALID.text(),
        Outcome::NotAwaiting(s) => not_awaiting(s),
        Outcome::Unavailable => UNAVAILABLE.text(),
        Outcome::NotConfigured => NOT_CONFIGURED.text(),
        Outcome::AssertionRequired => ASSERTION_REQUIRED.asking_again(),
        Outcome::Assertion(e) => assertion_refused(e),
        Outcome::AssertionReplayed => ASSERTION_REPLAYED.asking_again(),
        Outcome::CodeRequired => Text {
            status: StatusCode::BAD_REQUEST,
            class: "warn",
            title: "Enter your code".to_string(),
            text: format!(
                "Enter the {}-digit code you were sent. Nothing was approved.",
                verify::CODE_DIGITS
            ),
        },
        Outcome::CodeWrong { remaining } => Text {
            status: StatusCode::UNAUTHORIZED,
            class: "bad",
            title: "That code is not right.".to_string(),
            text: format!(
                "Nothing was approved. Check the code and try again: {remaining} attempt{} left.",
                if *remaining == 1 { "" } else { "s" }
            ),
        },
        Outcome::CodeExhausted => CODE_EXHAUSTED.asking_again(),
        Outcome::CodeExpired => CODE_EXPIRED.asking_again(),
        Outcome::CodeUsed => CODE_USED.asking_again(),
        Outcome::CodeMissing => CODE_MISSING.asking_again(),
    }
}

/// The page after the customer decided (`verb`: approved or declined), naming the amount and the
/// invoice, then what follows (`then`).
fn decided(title: &str, verb: &str, amount: &str, invoice: &str, then: &str) -> Text {
    Text {
        status: StatusCode::OK,
        class: "ok",
        title: title.to_string(),
        text: format!(
            "You {verb} the payment of <strong>{}</strong> for invoice <strong>{}</strong>. \
             {then}; you can close this page.",
            escape(amount),
            escape(invoice)
        ),
    }
}

/// The page for an operation that no longer waits for approval (`status`: where it is now).
fn not_awaiting(status: &Status) -> Text {
    Text {
        status: StatusCode::CONFLICT,
        class: "warn",
        title: "Nothing to approve".to_string(),
        text: format!(
            "This payment is no longer waiting for approval (it is {}), so nothing was approved.",
            escape(&status.as_str().replace('_', " "))
        ),
    }
}

/// The page for a refused assertion: its status and what went wrong, then [`ASK_AGAIN`].
fn assertion_refused(e: &AssertionError) -> Text {
    let (status, why) = match e {
        AssertionError::Expired => (
            StatusCode::UNAUTHORIZED,
            "Your sign-in for this approval has expired.",
        ),
        AssertionError::WrongCustomer => (
            StatusCode::FORBIDDEN,
            "You are signed in as a different customer than the one this payment is for.",
        ),
        AssertionError::WrongOperation => (
            StatusCode::FORBIDDEN,
            "Your sign-in was for a different payment.",
        ),
        AssertionError::BadSignature | AssertionError::UnknownKey => (
            StatusCode::UNAUTHORIZED,
            "Your sign-in could not be verified.",
        ),
        AssertionError::Malformed | AssertionError::LifetimeTooLong => {
            (StatusCode::BAD_REQUEST, "Your sign-in could not be read.")
        }
    };
    Text {
        status,
        class: "bad",
        title: "We could not confirm it is you".to_string(),
        text: format!("{why} {ASK_AGAIN}"),
    }
}

/// The status a page for `outcome` answers with.
#[cfg(test)]
pub(crate) fn status_of(outcome: &Outcome) -> StatusCode {
    text_of(outcome).status
}

fn with_code(mut response: Response, outcome: Option<&Outcome>) -> Response {
    if let Some(c) = outcome.and_then(Outcome::code) {
        response
            .headers_mut()
            .insert(super::ERROR_CODE_HEADER, HeaderValue::from_static(c));
    }
    response
}

/// The page for an outcome that ends the visit: the merchant's name when the link leads to one,
/// and on every refusal how to reach the merchant for a new link.
pub(crate) fn result_page(outcome: &Outcome, merchant: Option<&Merchant>) -> Response {
    let Text {
        status,
        class,
        title,
        text,
    } = text_of(outcome);
    let code = outcome.code();
    let help = match (code, merchant) {
        (None, Some(m)) if m.support_url.is_some() || m.support_email.is_some() => {
            format!("\n<p class=\"fine\">Questions? {}</p>", m.help_html())
        }
        (Some(_), Some(m)) => format!("\n<p id=\"help\">{}</p>", m.help_html()),
        _ => String::new(),
    };
    let code_line = code
        .map(|c| {
            format!(
                "\n<p class=\"fine\">Error code: <code id=\"error-code\">{}</code></p>",
                escape(c)
            )
        })
        .unwrap_or_default();
    let body = format!(
        "{}<h1>{}</h1>\n<div class=\"result {class}\"><p>{text}</p></div>{help}{code_line}",
        merchant_line(merchant),
        escape(&title)
    );
    with_code(page::render(status, &title, &body), Some(outcome))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cards_read_as_people_name_them() {
        let c = |b: &str| card_line(&Card::parse(b, "4242").unwrap());
        assert_eq!(c("visa"), "Visa ending in 4242");
        assert_eq!(c("amex"), "American Express ending in 4242");
        assert_eq!(c("cartes_bancaires"), "Cartes bancaires ending in 4242");
    }

    #[test]
    fn help_escapes_the_merchants_contact() {
        let m = Merchant {
            name: "Acme & Sons".into(),
            support_url: Some("https://acme.example/help?a=1&b=2".into()),
            support_email: None,
        };
        let html = m.help_html();
        assert!(html.contains("contact Acme &amp; Sons: <a id=\"support-url\" href=\"https://acme.example/help?a=1&amp;b=2\">"));
        let bare = Merchant {
            support_url: None,
            ..m
        };
        assert!(bare.help_html().ends_with("where you were asked to pay."));
    }
}
