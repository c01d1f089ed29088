//! The part of `payonce serve`'s banner a newcomer copies: shell commands, double-quoted so the
//! variables they set expand, from creating an operation to reading its status, the console, and an
//! MCP client's configuration (a test runs them as printed).

use payonce_core::id::TenantId;
use payonce_core::intention::INTENTION_KEY_PREFIX;
use payonce_ledger::Role;

/// The variable each role's key is exported as.
fn variable(role: Role) -> &'static str {
    match role {
        Role::Service => "SERVICE_KEY",
        Role::Assistant => "ASSISTANT_KEY",
        Role::OnCall => "ON_CALL_KEY",
    }
}

/// Where the walk-through's stack is.
pub struct Stack<'a> {
    /// The api's base URL.
    pub api_url: &'a str,
    /// The built-in simulator's base URL, when serve runs one.
    pub simulator_url: Option<&'a str>,
    /// serve's `key_retention_s`, when set: the CLI's sweeps then judge a key's window as serve's
    /// reconciler does.
    pub key_retention_s: Option<u64>,
    /// The ledger's URL as a command may carry it (no password).
    pub database_url: &'a str,
    /// This binary, as a shell runs it.
    pub binary: &'a str,
}

/// The fault that makes the simulator's next answer to a submission a 500 before anything executed:
/// the worker cannot know the outcome, and with `key_retention_s` shorter than
/// `retention_margin_ms` nothing may retry it automatically, so it reaches on-call. It matches the
/// submissions' key prefix, not `*`: the reconciler's reads (its scan) carry no key and must not use
/// it up.
fn fault() -> String {
    format!(r#"[{{"match":"{INTENTION_KEY_PREFIX}","fault":"error_500_before_commit","times":1}}]"#)
}

/// The walk-through for `stack` and the key `secrets` serve could show, as lines to print.
pub fn walkthrough(
    stack: &Stack<'_>,
    tenant: &TenantId,
    secrets: &[(Role, String)],
) -> Vec<String> {
    // One `export` line: one paste sets every variable the commands below use.
    let mut variables = vec![format!("PAYONCE_API=\"{}\"", stack.api_url)];
    // The variable the CLI reads, so `reconciler show` and `sweep --once` reach serve's simulator.
    if let Some(sim) = stack.simulator_url {
        variables.push(format!("PAYONCE_PROCESSOR_URL=\"{sim}\""));
    }
    if let Some(seconds) = stack.key_retention_s {
        variables.push(format!("PAYONCE_KEY_RETENTION_S=\"{seconds}\""));
    }
    variables.push(format!("PAYONCE=\"{}\"", stack.binary));
    variables.push(format!("PAYONCE_DATABASE_URL=\"{}\"", stack.database_url));
    let mut missing = Vec::new();
    for role in [Role::Service, Role::Assistant, Role::OnCall] {
        match secrets.iter().find(|(r, _)| *r == role) {
            Some((_, secret)) => variables.push(format!("{}=\"{secret}\"", variable(role))),
            None => missing.push(format!(
                "  # {} is the secret of the {} key named above (shown when it was made)",
                variable(role),
                role.as_str()
            )),
        }
    }
    let mut out = vec![
        "Try it: paste each command into a shell (sh, bash or zsh).".to_string(),
        format!("  export {}", variables.join(" ")),
    ];
    out.extend(missing);
    // The fault first: it must be armed before the payment it breaks is submitted.
    if stack.simulator_url.is_some() {
        out.extend([
            "0. Optional, to see on-call's step 5: make the simulator's next answer a 500 (with serve --key-retention-s 1 nothing retries it for you):".into(),
            format!("  curl -sSf -X POST \"$PAYONCE_PROCESSOR_URL/_sim/faults\" -H \"content-type: application/json\" -d '{}'", fault()),
        ]);
    }
    out.extend([
        "1. Create an operation for invoice INV-1 (the service creates it; note the \"id\" it prints):".into(),
        "  curl -sSf \"$PAYONCE_API/v1/operations\" -H \"authorization: Bearer $SERVICE_KEY\" -H \"content-type: application/json\" -d '{\"business_key\":\"invoice:INV-1:pay\",\"details\":{\"amount\":2048,\"currency\":\"usd\",\"customer\":\"cus_1\",\"payment_method\":\"pm_card_visa\",\"invoice\":\"INV-1\"}}'".into(),
        "  export OP_ID=\"op_…\"   # the id printed above".into(),
        format!("2. Request the customer's approval: {tenant}'s tenant app prints the link and its one-time code here, marked >>>"),
        "  curl -sSf -X POST \"$PAYONCE_API/v1/operations/$OP_ID/approval-requests\" -H \"authorization: Bearer $SERVICE_KEY\"".into(),
        "3. Read the status (ready once the customer approved, then succeeded):".into(),
        "  curl -sSf \"$PAYONCE_API/v1/operations/$OP_ID\" -H \"authorization: Bearer $SERVICE_KEY\"".into(),
        "4. On-call console: open it in a browser and sign in with $ON_CALL_KEY:".into(),
        format!("  {}/console", stack.api_url),
        "5. On-call resolves what needs a human, by operation id: first what the ledger and the processor say,".into(),
        "  \"$PAYONCE\" reconciler show \"$OP_ID\"".into(),
        "   then a decision, e.g. retry with the same key:".into(),
        "  \"$PAYONCE\" reconciler resolve \"$OP_ID\" --as retry --reason \"not at the processor: retry with the same key\"".into(),
    ]);
    out.extend([
        "MCP client configuration (the assistant key; every tool call returns the operation's real state):".into(),
        format!("  {}", mcp_config(stack.api_url, secrets)),
    ]);
    out
}

/// An MCP client's server entry for this api (Streamable HTTP with the assistant's bearer key).
fn mcp_config(api_url: &str, secrets: &[(Role, String)]) -> String {
    let key = secrets
        .iter()
        .find(|(r, _)| *r == Role::Assistant)
        .map_or("ASSISTANT_KEY", |(_, s)| s.as_str());
    serde_json::json!({
        "mcpServers": {
            "payonce": {
                "type": "http",
                "url": format!("{api_url}/mcp"),
                "headers": {"Authorization": format!("Bearer {key}")}
            }
        }
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_quotes_its_variables_and_a_missing_secret_is_a_comment() {
        let tenant = TenantId::parse("acme").unwrap();
        let stack = Stack {
            api_url: "http://127.0.0.1:8080",
            simulator_url: Some("http://127.0.0.1:12111"),
            key_retention_s: Some(1),
            database_url: "sqlite:payonce.db",
            binary: "/usr/local/bin/payonce",
        };
        let lines = walkthrough(&stack, &tenant, &[(Role::Service, "po_service_x".into())]);
        assert_eq!(
            lines[1],
            "  export PAYONCE_API=\"http://127.0.0.1:8080\" PAYONCE_PROCESSOR_URL=\"http://127.0.0.1:12111\" \
             PAYONCE_KEY_RETENTION_S=\"1\" PAYONCE=\"/usr/local/bin/payonce\" PAYONCE_DATABASE_URL=\"sqlite:payonce.db\" \
             SERVICE_KEY=\"po_service_x\""
        );
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("  # ASSISTANT_KEY is the secret"))
        );
        for curl in lines.iter().filter(|l| l.trim_start().starts_with("curl ")) {
            let api = curl.contains("\"$PAYONCE_API/")
                && curl.contains("\"authorization: Bearer $SERVICE_KEY\"");
            assert!(
                api || curl.contains("\"$PAYONCE_PROCESSOR_URL/_sim/faults\""),
                "{curl}"
            );
        }
        // Printed in the order they run: the fault before the payment it breaks.
        let at = |what: &str| lines.iter().position(|l| l.contains(what)).unwrap();
        assert!(at("/_sim/faults") < at("\"$PAYONCE_API/v1/operations\""));

        let mcp: serde_json::Value = serde_json::from_str(lines.last().unwrap().trim()).unwrap();
        assert_eq!(
            mcp["mcpServers"]["payonce"]["url"],
            "http://127.0.0.1:8080/mcp"
        );
    }
}
