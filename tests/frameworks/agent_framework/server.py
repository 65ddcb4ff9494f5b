"""A Microsoft Agent Framework agent served over AG-UI by `agent-framework-ag-ui`, on a scripted
chat client inside the framework.

The gateway's `agui` agent (SPEC §9.3) is tested in front of it: the `Agent`, its function
invocation loop, tool approval, the FastAPI endpoint and every AG-UI event are the framework's
own; only the model is fake (a chat client built from the framework's own layers —
`FunctionInvocationLayer` over `BaseChatClient` — that answers by the script of
tests/frameworks/scripted.py instead of calling a service).

    tests/frameworks/agent_framework/.venv/bin/python tests/frameworks/agent_framework/server.py [--port N]

Set up with `python3 -m venv tests/frameworks/agent_framework/.venv &&
tests/frameworks/agent_framework/.venv/bin/pip install -r tests/frameworks/agent_framework/requirements.txt`
(scripts/test does). Prints `listening http://127.0.0.1:<port>` once ready. Needs no network.

What the framework needs set to work behind the gateway (and is set here):
- a tool with `approval_mode="always_require"`: a call of it ends the run with an AG-UI 1.0
  interrupt outcome, decided with the next run's `resume` (payload `{"approved": bool}`).
- `state_schema` on the endpoint: the run's `state` reaches the model (as a message stating the
  application's state) and the run streams the state back as `STATE_SNAPSHOT`.
- `single_user=True` (or an `authorization_scope_resolver`): the endpoint refuses to start
  without one; behind the gateway the gateway is its one caller.
- The run's `tools` (the client's frontend tools) reach the model with nothing set; a call of
  one ends the run for the client to answer. The run's `context` does not reach the agent (the
  adapter reads only A2UI's entries from it).

Routes: `POST /agent` (the agent), `GET /requests` (every RunAgentInput this process was sent),
`GET /executions` (every run of the agent's own tool `send_report`).
"""

import asyncio
import json
import sys
from pathlib import Path
from typing import Any, AsyncIterable, Mapping, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import listen  # noqa: E402  (tests/support/listen.py)
import scripted  # noqa: E402  (tests/frameworks/scripted.py)

scripted.quiet()

from agent_framework import (  # noqa: E402
    Agent,
    BaseChatClient,
    ChatResponse,
    ChatResponseUpdate,
    Content,
    FunctionInvocationLayer,
    Message,
    tool,
)
from agent_framework._types import ResponseStream  # noqa: E402
from agent_framework_ag_ui import add_agent_framework_fastapi_endpoint  # noqa: E402
from fastapi import FastAPI  # noqa: E402

STATE_PREFIX = "Current state of the application:\n"


def last_said(messages: Sequence[Message]) -> scripted.Said:
    names = {}
    for message in messages:
        for content in message.contents:
            if content.type == "function_call":
                names[content.call_id] = content.name
    for message in reversed(messages):
        for content in reversed(message.contents):
            if content.type == "function_result":
                result = content.result
                text = result if isinstance(result, str) else json.dumps(result)
                return scripted.Said("tool", text, names.get(content.call_id))
            if content.type == "text" and message.role == "user" and not (content.text or "").startswith("Application state"):
                return scripted.Said("user", content.text or "")
    return scripted.Said("user", "")


def state_of(messages: Sequence[Message]) -> dict:
    """The state the adapter told the model (its state message's JSON)."""
    for message in messages:
        for content in message.contents:
            text = content.text if content.type == "text" else None
            if text and STATE_PREFIX in text:
                body = text.split(STATE_PREFIX, 1)[1].split("\n\n", 1)[0]
                try:
                    return json.loads(body)
                except ValueError:
                    return {}
    return {}


class ScriptedChatClient(FunctionInvocationLayer, BaseChatClient):
    """The framework's chat client interface, answered by the script: text streamed word by word,
    tool calls as function-call contents (the function invocation layer runs the agent's own
    tools, asks for approval, and leaves the client's tools to the client)."""

    OTEL_PROVIDER_NAME = "scripted"

    def _inner_get_response(self, *, messages: Sequence[Message], stream: bool = False, options: Mapping[str, Any], **kwargs: Any):
        tools = [getattr(t, "name", None) for t in options.get("tools") or []]
        answer = scripted.answer(last_said(messages), [t for t in tools if t], None, state_of(messages))

        async def updates() -> AsyncIterable[ChatResponseUpdate]:
            for word in answer.words():
                if answer.delay:
                    await asyncio.sleep(answer.delay)
                yield ChatResponseUpdate(role="assistant", contents=[Content.from_text(text=word)])
            for call in answer.calls:
                yield ChatResponseUpdate(
                    role="assistant",
                    contents=[Content.from_function_call(call_id=call.id, name=call.name, arguments=json.dumps(call.args))],
                )

        if stream:
            return ResponseStream(updates(), finalizer=ChatResponse.from_updates)

        async def whole() -> ChatResponse:
            return ChatResponse.from_updates([u async for u in updates()])

        return whole()


@tool(approval_mode="always_require")
def send_report(to: str) -> str:
    """Send the report by email; a person approves it first."""
    return scripted.send_report(to)


agent = Agent(client=ScriptedChatClient(), name="scripted", instructions="You answer by script.", tools=[send_report])

app = FastAPI()
scripted.add_recording(app)
add_agent_framework_fastapi_endpoint(
    app,
    agent,
    "/agent",
    state_schema={"theme": {"type": "string"}},
    # The gateway is the endpoint's one caller: it authenticates people itself and sends each
    # tenant's threads under their own ids (`<tenant>:<thread>`).
    single_user=True,
)


if __name__ == "__main__":
    asyncio.run(listen.serve(app, listen.port_from_args(__doc__.splitlines()[0])))
