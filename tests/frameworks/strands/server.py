"""An AWS Strands agent served over AG-UI by `ag-ui-strands`, on a scripted model provider inside
Strands.

The gateway's `agui` agent (SPEC §9.3) is tested in front of it: the Strands `Agent`, its event
loop, tool execution, the approval hook, the FastAPI endpoint and every AG-UI event are the
framework's and the adapter's own; only the model is fake (a `strands.models.Model` subclass
that streams Bedrock-style events by the script of tests/frameworks/scripted.py instead of
calling a service).

    tests/frameworks/strands/.venv/bin/python tests/frameworks/strands/server.py [--port N]

Set up with `python3 -m venv tests/frameworks/strands/.venv &&
tests/frameworks/strands/.venv/bin/pip install -r tests/frameworks/strands/requirements.txt`
(scripts/test does). Prints `listening http://127.0.0.1:<port>` once ready. Needs no network.

What the adapter needs set to work behind the gateway (and is set here):
- `StrandsAgentConfig(tool_behaviors={"send_report": ToolBehavior(interrupt_on_call=True)})`:
  a call of the tool then ends the run with an AG-UI 1.0 interrupt outcome (reason
  `tool_call`, schema `{"approved": bool}`), decided with the next run's `resume`; a
  `cancelled` entry or `approved: false` skips the tool.
- `state_context_builder`: the run's `state` reaches the model only through it (here it writes
  the state before the user's text).
- The run's `tools` (the client's frontend tools) and `context` (prepended to the user's text)
  reach the model with nothing set.

Routes: `POST /agent` (the agent), `GET /requests` (every RunAgentInput this process was sent),
`GET /executions` (every run of the agent's own tool `send_report`).
"""

import asyncio
import json
import sys
from pathlib import Path
from typing import Any, AsyncGenerator

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import listen  # noqa: E402  (tests/support/listen.py)
import scripted  # noqa: E402  (tests/frameworks/scripted.py)

scripted.quiet()

from ag_ui_strands import StrandsAgent, StrandsAgentConfig, ToolBehavior, add_strands_fastapi_endpoint  # noqa: E402
from fastapi import FastAPI  # noqa: E402
from strands import Agent, tool  # noqa: E402
from strands.models.model import Model  # noqa: E402

CONTEXT_HEADING = "Context provided by the application:"
STATE_HEADING = "Application state: "


def read_user_text(text: str) -> tuple:
    """The user's own words and what the adapter put before them: (text, context, state)."""
    context, state, own = [], {}, []
    for block in text.split("\n\n"):
        if block.startswith(CONTEXT_HEADING):
            for line in block.splitlines()[1:]:
                description, _, value = line.removeprefix("- ").partition(": ")
                context.append((description, value))
        elif block.startswith(STATE_HEADING):
            try:
                state = json.loads(block.removeprefix(STATE_HEADING))
            except ValueError:
                state = {}
        else:
            own.append(block)
    return "\n\n".join(own), context, state


def conversation_end(messages: list) -> tuple:
    """What the last message said, and the context and state the adapter gave with it."""
    names = {}
    for message in messages:
        for block in message.get("content", []):
            if "toolUse" in block:
                names[block["toolUse"]["toolUseId"]] = block["toolUse"]["name"]
    for message in reversed(messages):
        for block in reversed(message.get("content", [])):
            if "toolResult" in block:
                result = block["toolResult"]
                text = "".join(part.get("text", json.dumps(part.get("json"))) for part in result.get("content", []))
                return scripted.Said("tool", text, names.get(result.get("toolUseId"))), [], {}
            if "text" in block and message["role"] == "user":
                text, context, state = read_user_text(block["text"])
                # The context block may stand in a block of its own, before the user's.
                for earlier in message.get("content", []):
                    if "text" in earlier and earlier is not block:
                        _, more, more_state = read_user_text(earlier["text"])
                        context += more
                        state = state or more_state
                return scripted.Said("user", text), context, state
    return scripted.Said("user", ""), [], {}


class ScriptedModel(Model):
    """Strands' model provider interface, answered by the script: Bedrock-style stream events,
    text word by word, tool calls as `toolUse` blocks."""

    def update_config(self, **model_config: Any) -> None:
        pass

    def get_config(self) -> Any:
        return {"model_id": "scripted"}

    async def structured_output(self, output_model, prompt, system_prompt=None, **kwargs):  # pragma: no cover
        raise NotImplementedError("the script has no structured output")
        yield {}

    async def stream(self, messages, tool_specs=None, system_prompt=None, **kwargs: Any) -> AsyncGenerator[dict, None]:
        said, context, state = conversation_end(messages)
        if not context and system_prompt and CONTEXT_HEADING in system_prompt:
            _, context, _ = read_user_text(system_prompt[system_prompt.index(CONTEXT_HEADING):])
        names = [spec["name"] for spec in tool_specs or []]
        answer = scripted.answer(said, names, context, state)
        yield {"messageStart": {"role": "assistant"}}
        if answer.text:
            yield {"contentBlockStart": {"start": {}}}
            for word in answer.words():
                if answer.delay:
                    await asyncio.sleep(answer.delay)
                yield {"contentBlockDelta": {"delta": {"text": word}}}
            yield {"contentBlockStop": {}}
        for call in answer.calls:
            yield {"contentBlockStart": {"start": {"toolUse": {"toolUseId": call.id, "name": call.name}}}}
            yield {"contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps(call.args)}}}}
            yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": "tool_use" if answer.calls else "end_turn"}}
        yield {
            "metadata": {
                "usage": {"inputTokens": 0, "outputTokens": 0, "totalTokens": 0},
                "metrics": {"latencyMs": 0},
            }
        }


@tool
def send_report(to: str) -> str:
    """Send the report by email; a person approves it first."""
    return scripted.send_report(to)


def with_state(input_data: Any, text: str) -> str:
    """The run's state, written before the user's text where the model reads it."""
    state = input_data.state if isinstance(input_data.state, dict) else {}
    return f"{STATE_HEADING}{json.dumps(state)}\n\n{text}" if state else text


agent = StrandsAgent(
    Agent(model=ScriptedModel(), tools=[send_report], system_prompt="You answer by script.", callback_handler=None),
    name="scripted",
    config=StrandsAgentConfig(
        tool_behaviors={"send_report": ToolBehavior(interrupt_on_call=True)},
        state_context_builder=with_state,
    ),
)

app = FastAPI()
scripted.add_recording(app)
add_strands_fastapi_endpoint(app, agent, "/agent")


if __name__ == "__main__":
    asyncio.run(listen.serve(app, listen.port_from_args(__doc__.splitlines()[0])))
