//! The part of `payonce serve`'s banner a newcomer copies: shell commands, double-quoted so the
//! variables they set expand, from creating an operation to reading its status, the console, and an
//! MCP client's configuration (a test runs them as printed).

use payonce_shared::id::TenantId;
use payonce_shared::ledger::Role;

/// The variable each role's key is exported as.
fn variable(role: Role) -> &'static str {
    match role {
        Role::Service => "SERVICE_KEY",
        Role::Assistant => "ASSISTANT_KEY",
        Role::OnCall => "ON_CALL_KEY",
    }
}

/// The walk-through for `api_url` and the key `secrets` serve could show, as lines to print.
pub fn walkthrough(api_url: &str, tenant: &TenantId, secrets: &[(Role, String)]) -> Vec<String> {
    let mut out = vec![
        "Try it: paste each command into a shell (sh, bash or zsh).".to_string(),
        format!("  export PAYONCE_API=\"{api_url}\""),
    ];
    for role in [Role::Service, Role::Assistant, Role::OnCall] {
        match secrets.iter().find(|(r, _)| *r == role) {
            Some((_, secret)) => out.push(format!("  export {}=\"{secret}\"", variable(role))),
            None => out.push(format!(
                "  # {} is the secret of the {} key named above (shown when it was made)",
                variable(role),
                role.as_str()
            )),
        }
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
        format!("  {api_url}/console"),
        "MCP client configuration (the assistant key; every tool call returns the operation's real state):".into(),
        format!("  {}", mcp_config(api_url, secrets)),
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
        let lines = walkthrough(
            "http://127.0.0.1:8080",
            &tenant,
            &[(Role::Service, "po_service_x".into())],
        );
        assert!(lines.contains(&"  export SERVICE_KEY=\"po_service_x\"".to_string()));
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("  # ASSISTANT_KEY is the secret"))
        );
        for curl in lines.iter().filter(|l| l.trim_start().starts_with("curl ")) {
            assert!(curl.contains("\"$PAYONCE_API/"), "{curl}");
            assert!(
                curl.contains("\"authorization: Bearer $SERVICE_KEY\""),
                "{curl}"
            );
        }
        let mcp: serde_json::Value = serde_json::from_str(lines.last().unwrap().trim()).unwrap();
        assert_eq!(
            mcp["mcpServers"]["payonce"]["url"],
            "http://127.0.0.1:8080/mcp"
        );
    }
}
