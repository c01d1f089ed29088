"""One real agent loop per provider, offline: the official `openai` or `anthropic` Python SDK talks to a
small scripted model (a local HTTP server in this file) that asks for `pay_invoice`, then asks for the
same call again under a new call id, then answers in text. Each tool call the SDK parsed is sent to
payonce's `POST /v1/tool-calls` as the SDK's own object, and payonce's tool-result object goes back to
the model in the SDK's own message shape. Prints one JSON document for the Rust integration test.

Usage: agent.py openai|anthropic. Env: PAYONCE_BASE (http://127.0.0.1:PORT), PAYONCE_KEY (an assistant
key), PAYONCE_OP (the operation id the model is told about).
"""

import json
import os
import sys
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# Every request has a deadline; none is left to a library default.
TIMEOUT_S = 20.0
# The scripted model's turns: two identical tool calls under new ids, then text.
TOOL_TURNS = 2
MAX_TURNS = 5


class ScriptedModel(BaseHTTPRequestHandler):
    """Answers /v1/chat/completions (OpenAI) and /v1/messages (Anthropic) from a fixed script."""

    operation_id = ""
    seen = []

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        ScriptedModel.seen.append(body)
        turn = len(ScriptedModel.seen)
        args = {"operation_id": ScriptedModel.operation_id}
        if self.path.endswith("/chat/completions"):
            if turn <= TOOL_TURNS:
                message = {"role": "assistant", "content": None, "tool_calls": [
                    {"id": f"call_{turn}", "type": "function",
                     "function": {"name": "pay_invoice", "arguments": json.dumps(args)}}]}
                finish = "tool_calls"
            else:
                message, finish = {"role": "assistant", "content": "done"}, "stop"
            reply = {"id": f"chatcmpl-{turn}", "object": "chat.completion", "created": 0, "model": "scripted",
                     "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
                     "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
        elif self.path.endswith("/messages"):
            if turn <= TOOL_TURNS:
                content = [{"type": "tool_use", "id": f"toolu_{turn}", "name": "pay_invoice", "input": args}]
                stop = "tool_use"
            else:
                content, stop = [{"type": "text", "text": "done"}], "end_turn"
            reply = {"id": f"msg_{turn}", "type": "message", "role": "assistant", "model": "scripted",
                     "content": content, "stop_reason": stop, "stop_sequence": None,
                     "usage": {"input_tokens": 1, "output_tokens": 1}}
        else:
            self.send_response(404)
            self.end_headers()
            return
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def payonce(path, key, body=None):
    base = os.environ["PAYONCE_BASE"]
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method="GET" if body is None else "POST",
                                 headers={"authorization": f"Bearer {key}", "content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=TIMEOUT_S) as r:
        return json.loads(r.read())


def as_sdk_type(sdk_type, value):
    """Validates payonce's result object against the SDK's own parameter type (a TypedDict)."""
    import pydantic

    return pydantic.TypeAdapter(sdk_type).validate_python(value, strict=True)


def run_openai(model_url, key, out):
    import openai
    from openai.types.chat import ChatCompletionToolMessageParam

    client = openai.OpenAI(base_url=model_url + "/v1", api_key="offline", timeout=TIMEOUT_S, max_retries=0)
    tools = payonce("/v1/tools?format=openai_chat", key)["tools"]
    messages = [{"role": "user", "content": f"Please pay the invoice for operation {ScriptedModel.operation_id}."}]
    for _ in range(MAX_TURNS):
        completion = client.chat.completions.create(model="scripted", messages=messages, tools=tools)
        message = completion.choices[0].message
        if not message.tool_calls:
            break
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            result = payonce("/v1/tool-calls", key, {"format": "openai_chat", "call": call.model_dump()})
            out["call_ids"].append(call.id)
            out["answers"].append(json.loads(result["content"]))
            messages.append(as_sdk_type(ChatCompletionToolMessageParam, result))


def run_anthropic(model_url, key, out):
    import anthropic
    from anthropic.types import ToolResultBlockParam

    client = anthropic.Anthropic(base_url=model_url, api_key="offline", timeout=TIMEOUT_S, max_retries=0)
    tools = payonce("/v1/tools?format=anthropic", key)["tools"]
    messages = [{"role": "user", "content": f"Please pay the invoice for operation {ScriptedModel.operation_id}."}]
    for _ in range(MAX_TURNS):
        reply = client.messages.create(model="scripted", max_tokens=256, messages=messages, tools=tools)
        uses = [b for b in reply.content if b.type == "tool_use"]
        if not uses:
            break
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]})
        results = []
        for block in uses:
            result = payonce("/v1/tool-calls", key, {"format": "anthropic", "call": block.model_dump()})
            out["call_ids"].append(block.id)
            out["answers"].append(json.loads(result["content"]))
            results.append(as_sdk_type(ToolResultBlockParam, result))
        messages.append({"role": "user", "content": results})


def main() -> int:
    provider = sys.argv[1]
    key = os.environ["PAYONCE_KEY"]
    ScriptedModel.operation_id = os.environ["PAYONCE_OP"]
    server = ThreadingHTTPServer(("127.0.0.1", 0), ScriptedModel)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    model_url = f"http://127.0.0.1:{server.server_address[1]}"
    out = {"provider": provider, "answers": [], "call_ids": []}
    try:
        {"openai": run_openai, "anthropic": run_anthropic}[provider](model_url, key, out)
    finally:
        server.shutdown()
    # What the model was sent back: the tool results, in the provider's own shape.
    out["model_requests"] = ScriptedModel.seen
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
