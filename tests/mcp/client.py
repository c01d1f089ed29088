"""An MCP client built on the official Python SDK, talking to payonce's /mcp over streamable HTTP.

Two ways in, as a user of the SDK would connect:
- PAYONCE_MCP_MODE=default: the SDK's default `mcp.Client` (mode "auto": probes `server/discover`
  and negotiates 2026-07-28, stateless, with per-request `_meta`).
- PAYONCE_MCP_MODE=<version> (2025-11-25, 2025-06-18, 2025-03-26): the older `ClientSession` over
  `streamable_http_client`, with an `initialize` handshake at that explicit version.

Lists the tools, calls get_payment_status and pay_invoice, and prints one JSON document on stdout for
the Rust integration test (tests/integration/api/mcp.rs) to check.

With PAYONCE_MCP_ELICIT=1 the client declares elicitation support; its callback plays the customer:
it records what it was asked (never the model's context), opens the URL as the customer signed in to
the merchant's app (the link plus PAYONCE_CUSTOMER_ASSERTION, the tenant app's signed assertion: a link
alone approves nothing), approves the payment on the confirmation page, and answers "accept".

Env: PAYONCE_MCP_URL (e.g. http://127.0.0.1:PORT/mcp), PAYONCE_MCP_KEY (an assistant key),
PAYONCE_READY_OP (an approved operation), PAYONCE_WAITING_OP (one awaiting approval).
"""

import asyncio
import json
import os
import re
import sys

import httpx2
import mcp_types as types
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client

# Every request has a deadline; none is left to a library default.
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 20.0
HIDDEN_HASH = re.compile(r'name="details_hash" value="([0-9a-f]+)"')


def dump(model):
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def make_elicitation_callback(seen, timeout):
    async def on_elicit(context, params):
        asked = dump(params)
        seen.append(asked)
        url = asked.get("url")
        if asked.get("mode") != "url" or not url:
            return types.ErrorData(code=types.INVALID_REQUEST, message="only URL mode is expected")
        # The customer opens the page from the merchant's app and approves what it shows.
        assertion = os.environ["PAYONCE_CUSTOMER_ASSERTION"]
        async with httpx2.AsyncClient(timeout=timeout) as browser:
            page = await browser.get(url, params={"assertion": assertion})
            found = HIDDEN_HASH.search(page.text)
            if found is None:
                return types.ElicitResult(action="decline")
            approved = await browser.post(
                url, data={"details_hash": found.group(1), "assertion": assertion}
            )
            if approved.status_code != 200:
                return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept")

    return on_elicit


async def exercise(session_or_client, ready, waiting, out):
    tools = await session_or_client.list_tools()
    out["tools"] = [dump(t) for t in tools.tools]
    calls = {
        "status_ready": ("get_payment_status", {"operation_id": ready}),
        "pay_ready": ("pay_invoice", {"operation_id": ready}),
        "pay_ready_again": ("pay_invoice", {"operation_id": ready}),
        "pay_waiting": ("pay_invoice", {"operation_id": waiting}),
        "pay_with_amount": ("pay_invoice", {"operation_id": ready, "amount": 1}),
        "status_unknown_op": ("get_payment_status", {"operation_id": "op_" + "0" * 32}),
    }
    for label, (name, arguments) in calls.items():
        result = await session_or_client.call_tool(name, arguments)
        out["calls"][label] = dump(result)


async def main() -> int:
    url = os.environ["PAYONCE_MCP_URL"]
    key = os.environ["PAYONCE_MCP_KEY"]
    ready = os.environ["PAYONCE_READY_OP"]
    waiting = os.environ["PAYONCE_WAITING_OP"]
    mode = os.environ.get("PAYONCE_MCP_MODE", "default")
    elicit = os.environ.get("PAYONCE_MCP_ELICIT") == "1"
    timeout = httpx2.Timeout(CONNECT_TIMEOUT_S, read=READ_TIMEOUT_S)
    out = {"calls": {}, "elicitations": []}
    callback = make_elicitation_callback(out["elicitations"], timeout) if elicit else None
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=timeout) as http:
        if mode == "default":
            transport = streamable_http_client(url, http_client=http)
            async with Client(transport, read_timeout_seconds=READ_TIMEOUT_S, elicitation_callback=callback) as client:
                out["protocol_version"] = client.protocol_version
                info = client.session.server_info if hasattr(client.session, "server_info") else None
                out["server"] = dump(info) if info is not None else None
                await exercise(client, ready, waiting, out)
        else:
            async with streamable_http_client(url, http_client=http) as (read, write):
                kwargs = {"read_timeout_seconds": READ_TIMEOUT_S}
                if callback is not None:
                    kwargs["elicitation_callback"] = callback
                async with ClientSession(read, write, **kwargs) as session:
                    init = await session.send_request(
                        types.InitializeRequest(
                            params=types.InitializeRequestParams(
                                protocol_version=mode,
                                capabilities=types.ClientCapabilities(
                                    elicitation=types.ElicitationCapability(
                                        form=types.FormElicitationCapability(),
                                        url=types.UrlElicitationCapability(),
                                    )
                                    if elicit
                                    else None
                                ),
                                client_info=types.Implementation(name="payonce-test", version="0"),
                            )
                        ),
                        types.InitializeResult,
                    )
                    session.adopt(init)
                    await session.send_notification(types.InitializedNotification())
                    out["protocol_version"] = init.protocol_version
                    out["server"] = dump(init.server_info)
                    await exercise(session, ready, waiting, out)
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
