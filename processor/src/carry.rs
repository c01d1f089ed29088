//! What each processor's wire can carry of an operation's approved details. What executes must be
//! what was approved: an operation holding a detail its processor has no way to send is refused, at
//! creation (the api, a 400 naming the field), again before submission (the execution step and the
//! adapter's wire), and `tenant set-processor` refuses a switch while such operations are open. It
//! is never sent without the detail.
//!
//! Adyen moves money to another account only through `splits` (Checkout v71, `PaymentRequest.splits`
//! of `Split` items, `type` `BalanceAccount` or `MarketPlace`): the `account` is a balance account id
//! of an Adyen for Platforms integration (or an account code of Classic Platforms), and the split
//! amounts must add up to the payment's, with the fees and the platform's commission booked to
//! accounts of their own. payonce's `destination` names a Stripe connected account (`acct_…`, sent
//! as `transfer_data[destination]`): at Adyen it names no account, and a split invented from it would
//! book fees and a commission nobody approved. So a tenant on Adyen cannot create one.

use payonce_core::details::Details;
use payonce_core::operation::ProcessorKind;

/// A consequential detail a processor's wire cannot carry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("details.{field}: {processor} cannot carry it ({why})")]
pub struct Uncarried {
    /// The detail, as the create route's body names it under `details`.
    pub field: &'static str,
    /// The processor that cannot carry it.
    pub processor: ProcessorKind,
    /// Why not, in a few words.
    pub why: &'static str,
}

impl Uncarried {
    /// The stable code an operation refused for it is rejected with.
    pub fn code(&self) -> String {
        format!("{}_unsupported", self.field)
    }
}

/// Why Adyen carries no `destination`.
const ADYEN_DESTINATION: &str = "Adyen moves money to another account only by `splits` naming an \
     Adyen balance account, with the fees and commission split too; a destination names a Stripe \
     connected account";

/// Whether `kind`'s wire carries a `destination` (a connected account the payment is for).
pub fn carries_destination(kind: ProcessorKind) -> bool {
    match kind {
        ProcessorKind::Stripe => true,
        ProcessorKind::Adyen => false,
    }
}

/// The first of `details` that `kind`'s wire cannot carry, if any.
pub fn uncarried(kind: ProcessorKind, details: &Details) -> Option<Uncarried> {
    (details.destination().is_some() && !carries_destination(kind)).then_some(Uncarried {
        field: "destination",
        processor: kind,
        why: match kind {
            ProcessorKind::Adyen => ADYEN_DESTINATION,
            ProcessorKind::Stripe => "",
        },
    })
}

/// Whether any processor might refuse `details`: only then is the tenant's processor read.
pub fn may_be_uncarried(details: &Details) -> bool {
    details.destination().is_some()
}
