//! `payonce tenant set-verification`: how a tenant's customers prove, on the confirmation page, that
//! they are the customer (docs/runbook.md). The secrets are generated here and printed once: the
//! operator never types one, so none lands in a shell history. `payonce tenant set-profile`: the
//! name and support contact the customer's pages show.
//!
//! `payonce tenant set-retention`: how long a tenant's settled operations are kept (docs/runbook.md,
//! "Retention"); without one, for ever.
//!
//! `payonce tenant set-processor TENANT stripe|adyen`: the processor the tenant's operations are
//! bound to from now on (docs/runbook.md, "A tenant's processor"); those created before keep theirs.
//!
//! `payonce tenant set-share TENANT SHARE` (or `--default`): the tenant's share of the claims within
//! each class while other tenants' work waits too (docs/runbook.md, "Interactive payments wait");
//! `payonce tenant shares` lists the shares set. `payonce tenant set-cap TENANT N` (or `--none`): the
//! tenant's own cap of the fleet's submissions a second.

use anyhow::Context;
use clap::{Subcommand, ValueEnum};
use payonce_api::profile::{ProfileRequest, set_profile};
use payonce_api::verify::{VerificationRequest, set_tenant_verification};
use payonce_core::clock::{Clock, SystemClock};
use payonce_core::id::TenantId;
use payonce_core::priority::{
    CAP_PER_SECOND_MAX, SHARE_DEFAULT, SHARE_MAX, SHARE_MIN, check_cap, check_share,
};
use payonce_ledger::SharedLedger;
use payonce_ledger::verification::VerificationMethod;
use payonce_processor::{ProcessorKind, carry};

/// The tenant commands (each sets one of the tenant's settings, as the command names say).
#[derive(Debug, Clone, Subcommand)]
#[allow(clippy::enum_variant_names)]
pub enum TenantCommand {
    /// Sets the tenant's customer verification method; prints the generated key and secret once.
    SetVerification {
        /// The tenant.
        #[arg(long)]
        tenant: String,
        /// signed-assertion (the tenant's app signs for its logged-in customer) or one-time-code.
        #[arg(long, value_enum)]
        method: Method,
        /// The assertion key's id, carried in every assertion (signed-assertion only).
        #[arg(long)]
        key_id: Option<String>,
        /// The tenant's endpoint for approval requests and codes (required for one-time-code).
        #[arg(long)]
        notify_url: Option<String>,
    },
    /// Sets how long the tenant's settled operations (and their events) are kept, or keeps them
    /// for ever (the default); prints the period in force.
    SetRetention {
        /// The tenant.
        #[arg(long)]
        tenant: String,
        /// Days after an operation was created and last changed (540..=36500: a card dispute can
        /// come 540 days after a payment).
        #[arg(long, conflicts_with = "forever", required_unless_present = "forever")]
        operation_days: Option<u32>,
        /// Keep the tenant's operations for ever (clears a period).
        #[arg(long)]
        forever: bool,
    },
    /// Sets the processor the tenant's operations are submitted to: each operation created from
    /// now on is bound to it for good (its retries, lookups, refunds and reconciliation); those
    /// created before stay on theirs. Without one, the processes' configured `processor`.
    SetProcessor {
        /// The tenant.
        tenant: String,
        /// The processor (every worker and reconciler must be configured for it).
        // Its own id: `processor` is the global setting's.
        #[arg(id = "tenant_processor", value_name = "PROCESSOR", value_enum)]
        choice: ProcessorChoice,
    },
    /// Sets the tenant's share of the claims within each class while other tenants' work waits
    /// too (1..=1000, by default 100: a tenant with 200 is served twice as often as one with 100),
    /// or with `--default` gives it the default again. Prints the share in force.
    SetShare {
        /// The tenant.
        tenant: String,
        /// The share, 1..=1000.
        #[arg(
            value_parser = parse_share,
            conflicts_with = "default",
            required_unless_present = "default"
        )]
        share: Option<u32>,
        /// Back to the default share (clears the one set).
        #[arg(long)]
        default: bool,
    },
    /// Lists the tenants with a share or a cap set; every other tenant has the default share and
    /// no cap of its own.
    Shares,
    /// Caps the tenant's submissions at N a second across every worker (1..=100000), within the
    /// fleet's budget, or with `--none` lifts its cap. Prints the cap in force.
    SetCap {
        /// The tenant.
        tenant: String,
        /// Submissions a second, 1..=100000.
        #[arg(
            value_parser = parse_cap,
            conflicts_with = "none",
            required_unless_present = "none"
        )]
        per_second: Option<u32>,
        /// No cap beyond the fleet's budget (clears the one set).
        #[arg(long)]
        none: bool,
    },
    /// Sets the tenant's public profile, shown on every page a customer sees.
    SetProfile {
        /// The tenant.
        #[arg(long)]
        tenant: String,
        /// The name customers know the merchant by (1 to 80 characters, plain text).
        #[arg(long)]
        display_name: String,
        /// Where customers get help (an https:// URL).
        #[arg(long)]
        support_url: Option<String>,
        /// Where customers write for help.
        #[arg(long)]
        support_email: Option<String>,
    },
}

/// Most open operations `set-processor` names when it refuses a switch.
const OPEN_SHOWN_MAX: u32 = 5;

/// Who a share set from the command line is recorded as set by.
const SHARE_ACTOR: &str = "cli:tenant set-share";

/// A share as typed: a whole number within `SHARE_MIN..=SHARE_MAX`, refused before anything opens
/// (a usage error, as a processor name `set-processor` does not know).
fn parse_share(raw: &str) -> Result<u32, String> {
    let share = raw.parse::<u32>().map_err(|_| {
        format!(
            "share must be a whole number between {SHARE_MIN} and {SHARE_MAX} (the default is \
             {SHARE_DEFAULT}); got {raw:?}"
        )
    })?;
    check_share(share)
}

/// Who a cap set from the command line is recorded as set by.
const CAP_ACTOR: &str = "cli:tenant set-cap";

/// A cap as typed: a whole number within `1..=CAP_PER_SECOND_MAX`, refused before anything opens.
fn parse_cap(raw: &str) -> Result<u32, String> {
    let cap = raw.parse::<u32>().map_err(|_| {
        format!(
            "a cap must be a whole number of submissions a second between 1 and \
             {CAP_PER_SECOND_MAX}; got {raw:?}"
        )
    })?;
    check_cap(cap)
}

/// A verification method as typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Method {
    /// A signed customer assertion from the tenant's app.
    SignedAssertion,
    /// A one-time code sent to the tenant's endpoint.
    OneTimeCode,
}

/// A processor as typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProcessorChoice {
    /// Stripe's API.
    Stripe,
    /// Adyen Checkout.
    Adyen,
}

impl From<ProcessorChoice> for ProcessorKind {
    fn from(choice: ProcessorChoice) -> ProcessorKind {
        match choice {
            ProcessorChoice::Stripe => ProcessorKind::Stripe,
            ProcessorChoice::Adyen => ProcessorKind::Adyen,
        }
    }
}

/// Runs a tenant command.
pub async fn run(ledger: &SharedLedger, command: TenantCommand) -> anyhow::Result<()> {
    match command {
        TenantCommand::SetProcessor { tenant, choice } => {
            set_processor(ledger, &tenant, choice).await
        }
        TenantCommand::SetShare { tenant, share, .. } => set_share(ledger, &tenant, share).await,
        TenantCommand::Shares => shares(ledger).await,
        TenantCommand::SetCap {
            tenant, per_second, ..
        } => set_cap(ledger, &tenant, per_second).await,
        TenantCommand::SetRetention {
            tenant,
            operation_days,
            forever: _,
        } => set_retention(ledger, &tenant, operation_days).await,
        TenantCommand::SetVerification {
            tenant,
            method,
            key_id,
            notify_url,
        } => set_verification(ledger, &tenant, method, key_id, notify_url).await,
        TenantCommand::SetProfile {
            tenant,
            display_name,
            support_url,
            support_email,
        } => {
            let request = ProfileRequest {
                display_name,
                support_url,
                support_email,
            };
            set_tenant_profile(ledger, &tenant, &request).await
        }
    }
}

/// `tenant set-processor`: the processor the tenant's new operations go to.
async fn set_processor(
    ledger: &SharedLedger,
    tenant: &str,
    choice: ProcessorChoice,
) -> anyhow::Result<()> {
    let tenant = TenantId::parse(tenant)?;
    let profiles = ledger.profiles();
    let kind: ProcessorKind = choice.into();
    // What executes must be what was approved (issue 53): no switch to a processor that cannot
    // carry a destination while one is open, so none is created for it meanwhile.
    if !carry::carries_destination(kind) {
        let open = profiles
            .open_with_destination(&tenant, OPEN_SHOWN_MAX)
            .await?;
        if !open.is_empty() {
            let ids: Vec<&str> = open.iter().map(|id| id.as_str()).collect();
            anyhow::bail!(
                "tenant {tenant} has open operations carrying a destination ({}{}), which {kind} \
                 cannot carry: settle or cancel them first; nothing was changed",
                ids.join(", "),
                if open.len() >= OPEN_SHOWN_MAX as usize {
                    ", …"
                } else {
                    ""
                }
            );
        }
    }
    let before = profiles.processor(&tenant).await?;
    profiles
        .set_processor(&tenant, kind, SystemClock.now())
        .await?;
    let now = profiles
        .processor(&tenant)
        .await?
        .context("the processor just set is not stored")?;
    println!(
        "tenant {tenant}: operations created from now on are submitted to {now} (before: {}); \
         operations created earlier stay on theirs",
        before.map_or("the configured processor", ProcessorKind::as_str)
    );
    Ok(())
}

/// The share `tenant` has in `set` (the shares set), in words.
fn share_in(set: &[(TenantId, u32)], tenant: &TenantId) -> String {
    match set.iter().find(|(t, _)| t == tenant) {
        Some((_, share)) => share.to_string(),
        None => format!("{SHARE_DEFAULT}, the default"),
    }
}

/// `tenant set-share`: the tenant's share of the claims within each class (`None`: the default).
async fn set_share(ledger: &SharedLedger, tenant: &str, share: Option<u32>) -> anyhow::Result<()> {
    let tenant = TenantId::parse(tenant)?;
    let profiles = ledger.profiles();
    let before = share_in(&profiles.shares().await?, &tenant);
    profiles
        .set_share(&tenant, share, SHARE_ACTOR, SystemClock.now())
        .await?;
    let now = share_in(&profiles.shares().await?, &tenant);
    println!("tenant {tenant}: share {now} (before: {before})");
    Ok(())
}

/// `tenant shares`: every share set, one tenant a line, then every cap set.
async fn shares(ledger: &SharedLedger) -> anyhow::Result<()> {
    let set = ledger.profiles().shares().await?;
    if set.is_empty() {
        println!("no tenant has a share set: every tenant has the default, {SHARE_DEFAULT}");
    }
    for (tenant, share) in set {
        println!("tenant {tenant}: share {share}");
    }
    for (tenant, cap) in ledger.profiles().caps().await? {
        println!("tenant {tenant}: capped at {cap} submissions a second");
    }
    Ok(())
}

/// The cap `tenant` has in `set` (the caps set), in words.
fn cap_in(set: &[(TenantId, u32)], tenant: &TenantId) -> String {
    match set.iter().find(|(t, _)| t == tenant) {
        Some((_, cap)) => format!("capped at {cap} submissions a second"),
        None => "no cap beyond the fleet's".to_string(),
    }
}

/// `tenant set-cap`: the tenant's own cap of the fleet's submissions (`None`: none).
async fn set_cap(ledger: &SharedLedger, tenant: &str, cap: Option<u32>) -> anyhow::Result<()> {
    let tenant = TenantId::parse(tenant)?;
    let profiles = ledger.profiles();
    let before = cap_in(&profiles.caps().await?, &tenant);
    profiles
        .set_cap(&tenant, cap, CAP_ACTOR, SystemClock.now())
        .await?;
    let now = cap_in(&profiles.caps().await?, &tenant);
    println!("tenant {tenant}: {now} (before: {before})");
    Ok(())
}

/// `tenant set-retention`: how long the tenant's settled operations are kept (none: for ever).
async fn set_retention(
    ledger: &SharedLedger,
    tenant: &str,
    operation_days: Option<u32>,
) -> anyhow::Result<()> {
    let tenant = TenantId::parse(tenant)?;
    ledger
        .set_operation_retention(&tenant, operation_days, SystemClock.now())
        .await?;
    match ledger.operation_retention(&tenant).await? {
        Some(days) => println!(
            "tenant {tenant}: settled operations are pruned {days} days after they were created and last changed"
        ),
        None => println!("tenant {tenant}: operations are kept for ever"),
    }
    Ok(())
}

/// `tenant set-verification`: how the tenant's customers prove who they are; prints the secrets
/// it issues, once.
async fn set_verification(
    ledger: &SharedLedger,
    tenant: &str,
    method: Method,
    key_id: Option<String>,
    notify_url: Option<String>,
) -> anyhow::Result<()> {
    let tenant = TenantId::parse(tenant)?;
    let request = VerificationRequest {
        method: match method {
            Method::SignedAssertion => VerificationMethod::SignedAssertion,
            Method::OneTimeCode => VerificationMethod::OneTimeCode,
        },
        assertion_key_id: key_id,
        notify_url,
    };
    let secrets = set_tenant_verification(ledger, &tenant, &request, SystemClock.now()).await?;
    println!(
        "tenant {tenant}: customers approve with {}",
        request.method.as_str()
    );
    if let Some(key) = secrets.assertion_key {
        println!("assertion key (for the tenant's app; shown once): {key}");
    }
    if let Some(secret) = secrets.notify_secret {
        println!("notification signing secret (for the tenant's endpoint; shown once): {secret}");
    }
    Ok(())
}

/// `tenant set-profile`: the name and support contacts the tenant's customers see.
async fn set_tenant_profile(
    ledger: &SharedLedger,
    tenant: &str,
    request: &ProfileRequest,
) -> anyhow::Result<()> {
    let tenant = TenantId::parse(tenant)?;
    let profile = set_profile(ledger.profiles(), &tenant, request, SystemClock.now()).await?;
    println!(
        "tenant {tenant}: customers see {:?}, support {} / {}",
        profile.display_name,
        profile.support_url.as_deref().unwrap_or("(no URL)"),
        profile.support_email.as_deref().unwrap_or("(no email)")
    );
    Ok(())
}
