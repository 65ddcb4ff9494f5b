"""A CrewAI flow served over AG-UI by `ag-ui-crewai`, on scripted models inside CrewAI.

The gateway's `agui` agent (SPEC §9.3) is tested in front of it: the `Flow`, its routing, its
`@human_feedback` pause and resume (`agui_feedback_provider`), the FastAPI endpoint and every
AG-UI event are CrewAI's and `ag-ui-crewai`'s own; only the models are fake:
- the chat model the flow streams through `copilotkit_stream(await acompletion(...))` (the
  adapter's way, CrewAI's `LLM` layer) is a litellm `CustomLLM` provider, `scripted/…`, answering
  by the script of tests/frameworks/scripted.py;
- the model `@human_feedback` collapses a person's answer with (CrewAI's `LLM("scripted/judge")`)
  is the same provider.

    tests/frameworks/crewai/.venv/bin/python tests/frameworks/crewai/server.py [--port N]

Set up with `python3 -m venv tests/frameworks/crewai/.venv &&
tests/frameworks/crewai/.venv/bin/pip install -r tests/frameworks/crewai/requirements.txt`
(scripts/test does). Prints `listening http://127.0.0.1:<port>` once ready. Needs no network.

What the adapter needs set to work behind the gateway (and is set here):
- `emit_interrupt_outcome=True` on the endpoint: a `@human_feedback` pause then ends the run
  with an AG-UI 1.0 interrupt outcome (reason `crewai:human_feedback`, the `emit` outcomes as a
  string enum schema), decided with the next run's `resume`.
- The flow state (a `CopilotKitState`) holds the run's `messages`, its `tools` (as
  `copilotkit.actions`), its `context` and the client's state keys (declared on the state).

Routes: `POST /agent` (the flow), `GET /requests` (every RunAgentInput this process was sent),
`GET /executions` (every run of the flow's own tool `send_report`).
"""

import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, AsyncIterator, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import listen  # noqa: E402  (tests/support/listen.py)
import scripted  # noqa: E402  (tests/frameworks/scripted.py)

scripted.quiet()
# Nothing is sent anywhere, whatever the environment says; CrewAI's pending-feedback store goes
# to a directory of this process's own.
os.environ["CREWAI_DISABLE_TELEMETRY"] = "true"
os.environ["OTEL_SDK_DISABLED"] = "true"
os.environ["CREWAI_TRACING_ENABLED"] = "false"
os.environ["CREWAI_DISABLE_VERSION_CHECK"] = "true"
os.environ.setdefault("CREWAI_STORAGE_DIR", tempfile.mkdtemp(prefix="crewai-"))

import litellm  # noqa: E402
from ag_ui_crewai import CopilotKitState, add_crewai_flow_fastapi_endpoint, agui_feedback_provider, copilotkit_stream  # noqa: E402
from crewai.flow import Flow, human_feedback, listen as on, router, start  # noqa: E402
from fastapi import FastAPI  # noqa: E402
from litellm import acompletion  # noqa: E402
from litellm.llms.custom_llm import CustomLLM  # noqa: E402
from litellm.types.utils import GenericStreamingChunk, ModelResponse  # noqa: E402

SEND_REPORT = {
    "type": "function",
    "function": {
        "name": scripted.REPORT_TOOL,
        "description": "Send the report by email; a person approves it first.",
        "parameters": {"type": "object", "properties": {"to": {"type": "string"}}, "required": ["to"]},
    },
}


def conversation_end(messages: list) -> tuple:
    """What the last message said, and the context and state the flow wrote in its system
    message."""
    names = {}
    context, state = [], {}
    for message in messages:
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            names[call.get("id")] = function.get("name")
        if message.get("role") == "system":
            for line in str(message.get("content") or "").splitlines():
                if line.startswith("context: "):
                    context.append(tuple(line[len("context: "):].split("=", 1)))
                elif line.startswith("theme: "):
                    state["theme"] = line[len("theme: "):]
    for message in reversed(messages):
        if message.get("role") == "tool":
            return scripted.Said("tool", str(message.get("content") or ""), names.get(message.get("tool_call_id"))), context, state
        if message.get("role") == "user":
            return scripted.Said("user", str(message.get("content") or "")), context, state
    return scripted.Said("user", ""), context, state


class ScriptedProvider(CustomLLM):
    """litellm's custom-model interface, answered by the script: streamed word by word, tool
    calls as tool-use chunks."""

    def _answer(self, messages: list, optional_params: dict) -> scripted.Answer:
        said, context, state = conversation_end(messages)
        tools = [t["function"]["name"] for t in optional_params.get("tools") or []]
        return scripted.answer(said, tools, context, state)

    async def astreaming(self, model: str, messages: list, *args: Any, **kwargs: Any) -> AsyncIterator[GenericStreamingChunk]:
        answer = self._answer(messages, kwargs.get("optional_params") or {})
        for word in answer.words():
            if answer.delay:
                await asyncio.sleep(answer.delay)
            yield GenericStreamingChunk(text=word, tool_use=None, is_finished=False, finish_reason="", usage=None, index=0)
        for index, call in enumerate(answer.calls):
            yield GenericStreamingChunk(
                text="",
                tool_use={
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": json.dumps(call.args)},
                    "index": index,
                },
                is_finished=False,
                finish_reason="",
                usage=None,
                index=0,
            )
        yield GenericStreamingChunk(
            text="",
            tool_use=None,
            is_finished=True,
            finish_reason="tool_calls" if answer.calls else "stop",
            usage={"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
            index=0,
        )


    def completion(self, model: str, messages: list, *args: Any, **kwargs: Any) -> ModelResponse:
        """Not streamed: only `@human_feedback` asks this way (`scripted/judge`), to collapse a
        person's answer to an outcome — `approved` only when the answer says so, anything else
        `rejected`."""
        feedback = " ".join(str(m.get("content", "")) for m in messages).lower()
        approved = ('"approved": true' in feedback or "feedback: approved" in feedback) and '"approved": false' not in feedback
        return ModelResponse(choices=[{"message": {"role": "assistant", "content": "approved" if approved else "rejected"}}])


litellm.custom_provider_map = [{"provider": "scripted", "custom_handler": ScriptedProvider()}]


class ScriptedState(CopilotKitState):
    # The client's state key the flow reads.
    theme: Optional[str] = None
    report_to: Optional[str] = None


class ScriptedFlow(Flow[ScriptedState]):
    """Answers through the chat model; a call of `send_report` is paused for a person."""

    def _system(self) -> dict:
        lines = ["You answer by script."]
        for entry in self.state.context or []:
            lines.append(f"context: {entry.get('description')}={entry.get('value')}")
        if self.state.theme is not None:
            lines.append(f"theme: {self.state.theme}")
        return {"role": "system", "content": "\n".join(lines)}

    async def _complete(self, tools: list) -> dict:
        response = await copilotkit_stream(
            await acompletion(
                model="scripted/script",
                messages=[self._system(), *self.state.messages],
                tools=tools or None,
                stream=True,
            )
        )
        message = response.choices[0]["message"]
        self.state.messages.append(message)
        return message

    @start()
    async def chat(self):
        message = await self._complete([*self.state.copilotkit.actions, SEND_REPORT])
        calls = message.get("tool_calls") or []
        if calls and calls[0]["function"]["name"] == scripted.REPORT_TOOL:
            self.state.report_to = json.loads(calls[0]["function"]["arguments"]).get("to")
            return "report"
        return "done"

    @router(chat)
    def route(self):
        return "needs_review" if self.state.report_to else "done"

    @on("needs_review")
    @human_feedback(
        message="Send the report?",
        emit=["approved", "rejected"],
        llm="scripted/judge",
        # No default_outcome: a `cancelled` resume would then take the first option, "approved"
        # (as a flow written without one does); the gateway's agent names "rejected" as its
        # deny_option, so a denial is sent as that option instead.
        provider=agui_feedback_provider,
    )
    def review(self):
        return {"to": self.state.report_to}

    def _call_id(self) -> str:
        for message in reversed(self.state.messages):
            for call in message.get("tool_calls") or []:
                if call["function"]["name"] == scripted.REPORT_TOOL:
                    return call["id"]
        return ""

    @on("approved")
    async def send(self):
        result = scripted.send_report(self.state.report_to or "")
        self.state.messages.append({"role": "tool", "content": result, "tool_call_id": self._call_id()})
        await self._complete([])

    @on("rejected")
    async def skip(self):
        self.state.messages.append({"role": "tool", "content": "The person denied it; not sent.", "tool_call_id": self._call_id()})
        await self._complete([])


app = FastAPI()
scripted.add_recording(app)
add_crewai_flow_fastapi_endpoint(app, ScriptedFlow(), "/agent", emit_interrupt_outcome=True, enable_legacy_on_interrupt_event=False)


if __name__ == "__main__":
    asyncio.run(listen.serve(app, listen.port_from_args(__doc__.splitlines()[0])))
