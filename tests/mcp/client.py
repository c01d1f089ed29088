"""An MCP client built on the official Python SDK, talking to payonce's /mcp over streamable HTTP.

Connects with a bearer key, lists the tools, calls get_payment_status and pay_invoice, and prints one
JSON document on stdout for the Rust integration test (tests/integration/api/mcp.rs) to check.

Env: PAYONCE_MCP_URL (e.g. http://127.0.0.1:PORT/mcp), PAYONCE_MCP_KEY (an assistant key),
PAYONCE_READY_OP (an approved operation), PAYONCE_WAITING_OP (one awaiting approval).
"""

import asyncio
import json
import os
import sys

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

# Every request has a deadline; none is left to a library default.
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 20.0


def dump(model):
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


async def main() -> int:
    url = os.environ["PAYONCE_MCP_URL"]
    key = os.environ["PAYONCE_MCP_KEY"]
    ready = os.environ["PAYONCE_READY_OP"]
    waiting = os.environ["PAYONCE_WAITING_OP"]
    timeout = httpx2.Timeout(CONNECT_TIMEOUT_S, read=READ_TIMEOUT_S)
    out = {"calls": {}}
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=timeout) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write, read_timeout_seconds=READ_TIMEOUT_S) as session:
                init = await session.initialize()
                out["protocol_version"] = init.protocol_version
                out["server"] = dump(init.server_info)
                tools = await session.list_tools()
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
                    result = await session.call_tool(name, arguments)
                    out["calls"][label] = dump(result)
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
