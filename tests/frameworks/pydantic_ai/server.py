"""A Pydantic AI agent served over AG-UI by Pydantic AI's own adapter (`AGUIAdapter`), on a
`FunctionModel`, Pydantic AI's model driven by a local function.

The gateway's `agui` agent (SPEC §9.3) is tested in front of it: the `Agent`, its tool calls,
tool approval (deferred tools), the adapter and every AG-UI event are Pydantic AI's own; only the
model is the function, answering by the script of tests/frameworks/scripted.py.

    tests/frameworks/pydantic_ai/.venv/bin/python tests/frameworks/pydantic_ai/server.py [--port N]

Set up with `python3 -m venv tests/frameworks/pydantic_ai/.venv &&
tests/frameworks/pydantic_ai/.venv/bin/pip install -r tests/frameworks/pydantic_ai/requirements.txt`
(scripts/test does). Prints `listening http://127.0.0.1:<port>` once ready. Needs no network.

What the agent needs set to work behind the gateway (and is set here):
- a tool with `requires_approval=True` and `DeferredToolRequests` among the agent's output
  types: its call ends the run with an AG-UI 1.0 interrupt outcome (schema `{"approved": bool}`),
  decided with the next run's `resume`.
- `deps=StateDeps(<model>)` for the run's `state` to reach the tools and instructions (here the
  instructions write it where the model reads it).
- The run's `tools` (the client's frontend tools) reach the model with nothing set.

Routes: `POST /agent` (the agent), `GET /requests` (every RunAgentInput this process was sent),
`GET /executions` (every run of the agent's own tool `send_report`).
"""

import asyncio
import json
import sys
from pathlib import Path
from typing import AsyncIterator, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import listen  # noqa: E402  (tests/support/listen.py)
import scripted  # noqa: E402  (tests/frameworks/scripted.py)

scripted.quiet()

from fastapi import FastAPI, Request  # noqa: E402
from pydantic import BaseModel  # noqa: E402
from pydantic_ai import Agent, DeferredToolRequests, RunContext  # noqa: E402
from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart, UserPromptPart  # noqa: E402
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel  # noqa: E402
from pydantic_ai.ui import StateDeps  # noqa: E402
from pydantic_ai.ui.ag_ui import AGUIAdapter  # noqa: E402


class Page(BaseModel):
    """The client's state keys the agent reads."""

    theme: Optional[str] = None


def last_said(messages: list) -> scripted.Said:
    for message in reversed(messages):
        if not isinstance(message, ModelRequest):
            continue
        for part in reversed(message.parts):
            if isinstance(part, ToolReturnPart):
                content = part.content if isinstance(part.content, str) else json.dumps(part.content)
                return scripted.Said("tool", content, part.tool_name)
            if isinstance(part, UserPromptPart):
                content = part.content if isinstance(part.content, str) else " ".join(str(c) for c in part.content)
                return scripted.Said("user", content)
            if type(part).__name__ == "RetryPromptPart" and getattr(part, "tool_name", None):
                return scripted.Said("tool", str(part.content), part.tool_name)
    return scripted.Said("user", "")


async def model(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
    """Pydantic AI's function model, answering by the script: text word by word, tool calls as
    deltas."""
    lines = (info.instructions or "").splitlines()
    theme = next((line[len("theme: "):] for line in lines if line.startswith("theme: ")), None)
    answer = scripted.answer(
        last_said(messages),
        [t.name for t in info.function_tools],
        None,
        {"theme": theme} if theme is not None else {},
    )
    for word in answer.words():
        if answer.delay:
            await asyncio.sleep(answer.delay)
        yield word
    for index, call in enumerate(answer.calls):
        yield {index: DeltaToolCall(name=call.name, json_args=json.dumps(call.args), tool_call_id=call.id)}


agent = Agent(
    FunctionModel(stream_function=model),
    deps_type=StateDeps[Page],
    output_type=[str, DeferredToolRequests],
)


@agent.instructions
def instructions(ctx: RunContext[StateDeps[Page]]) -> str:
    theme = ctx.deps.state.theme
    return "You answer by script." + (f"\ntheme: {theme}" if theme is not None else "")


@agent.tool_plain(requires_approval=True)
def send_report(to: str) -> str:
    """Send the report by email; a person approves it first."""
    return scripted.send_report(to)


app = FastAPI()
scripted.add_recording(app)


@app.post("/agent")
async def run(request: Request):
    return await AGUIAdapter.dispatch_request(request, agent=agent, deps=StateDeps(Page()))


if __name__ == "__main__":
    asyncio.run(listen.serve(app, listen.port_from_args(__doc__.splitlines()[0])))
