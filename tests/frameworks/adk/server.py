"""A Google ADK agent served over AG-UI by `ag-ui-adk`, on a scripted model inside ADK.

The gateway's `agui` agent (SPEC §9.3) is tested in front of it: the `LlmAgent`, its runner,
sessions, tool confirmation, the FastAPI endpoint and every AG-UI event are ADK's and
`ag-ui-adk`'s own; only the model is fake (a `BaseLlm` subclass answering by the script of
tests/frameworks/scripted.py instead of calling Gemini).

    tests/frameworks/adk/.venv/bin/python tests/frameworks/adk/server.py [--port N]

Set up with `python3 -m venv tests/frameworks/adk/.venv &&
tests/frameworks/adk/.venv/bin/pip install -r tests/frameworks/adk/requirements.txt` (scripts/test
does). Prints `listening http://127.0.0.1:<port>` once ready. Needs no network.

What ADK needs set to work behind the gateway (and is set here):
- `AGUIToolset()` among the agent's tools: the run's `tools` (the client's frontend tools) reach
  the model only through it; a call of one ends the run for the client to answer.
- `emit_interrupt_outcome=True` on `ADKAgent`: a tool with `require_confirmation=True` then ends
  the run with an AG-UI 1.0 interrupt outcome (ADK's confirmation request), decided with the
  next run's `resume`; by default the package shows it as a client tool call instead.
- The run's `context` is in the session state under `_ag_ui_context` (read here by the
  instruction provider), the run's `state` is the session state.

Routes: `POST /agent` (the agent), `GET /requests` (every RunAgentInput this process was sent),
`GET /executions` (every run of the agent's own tool `send_report`).
"""

import asyncio
import sys
from pathlib import Path
from typing import AsyncGenerator

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import listen  # noqa: E402  (tests/support/listen.py)
import scripted  # noqa: E402  (tests/frameworks/scripted.py)

scripted.quiet()

from ag_ui_adk import ADKAgent, AGUIToolset, add_adk_fastapi_endpoint  # noqa: E402
from fastapi import FastAPI  # noqa: E402
from google.adk.agents import LlmAgent  # noqa: E402
from google.adk.agents.readonly_context import ReadonlyContext  # noqa: E402
from google.adk.models.base_llm import BaseLlm  # noqa: E402
from google.adk.models.llm_request import LlmRequest  # noqa: E402
from google.adk.models.llm_response import LlmResponse  # noqa: E402
from google.adk.tools import FunctionTool  # noqa: E402
from google.genai import types  # noqa: E402


def last_said(request: LlmRequest) -> scripted.Said:
    for content in reversed(request.contents):
        for part in reversed(content.parts or []):
            if part.function_response is not None:
                response = part.function_response.response or {}
                text = response.get("result", response.get("error", response))
                return scripted.Said("tool", text if isinstance(text, str) else str(text), part.function_response.name)
            if part.text and content.role == "user":
                return scripted.Said("user", part.text)
    return scripted.Said("user", "")


def system_lines(request: LlmRequest) -> list:
    instruction = request.config.system_instruction if request.config else None
    text = instruction if isinstance(instruction, str) else ""
    return [line for line in text.splitlines() if line]


class ScriptedLlm(BaseLlm):
    """ADK's model interface, answered by the script; streams text word by word as Gemini does
    (partial responses, then the whole), and calls tools with ADK function-call parts."""

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False) -> AsyncGenerator[LlmResponse, None]:
        lines = system_lines(llm_request)
        context = [tuple(line[len("context: "):].split("=", 1)) for line in lines if line.startswith("context: ")]
        theme = next((line[len("theme: "):] for line in lines if line.startswith("theme: ")), None)
        answer = scripted.answer(
            last_said(llm_request),
            list(llm_request.tools_dict),
            context,
            {"theme": theme} if theme is not None else {},
        )
        if stream:
            for word in answer.words():
                if answer.delay:
                    await asyncio.sleep(answer.delay)
                yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=word)]), partial=True)
        parts = [types.Part(text=answer.text)] if answer.text else []
        parts += [types.Part(function_call=types.FunctionCall(id=c.id, name=c.name, args=c.args)) for c in answer.calls]
        yield LlmResponse(content=types.Content(role="model", parts=parts), turn_complete=True)


def instruction(ctx: ReadonlyContext) -> str:
    """The run's context and state, written where the model reads them."""
    lines = ["You answer by script."]
    for entry in ctx.state.get("_ag_ui_context") or []:
        lines.append(f"context: {entry['description']}={entry['value']}")
    theme = ctx.state.get("theme")
    if theme is not None:
        lines.append(f"theme: {theme}")
    return "\n".join(lines)


def send_report(to: str) -> str:
    """Send the report by email; a person approves it first."""
    return scripted.send_report(to)


agent = LlmAgent(
    name="scripted",
    model=ScriptedLlm(model="scripted"),
    instruction=instruction,
    tools=[AGUIToolset(), FunctionTool(send_report, require_confirmation=True)],
)

app = FastAPI()
scripted.add_recording(app)
add_adk_fastapi_endpoint(
    app,
    ADKAgent(adk_agent=agent, app_name="scripted", user_id="gateway", emit_interrupt_outcome=True),
    "/agent",
)


if __name__ == "__main__":
    asyncio.run(listen.serve(app, listen.port_from_args(__doc__.splitlines()[0])))
