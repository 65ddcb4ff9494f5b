"""A LangGraph graph served over AG-UI by `ag-ui-langgraph`, on a scripted fake chat model.

The gateway's `agui` agent (SPEC §9.3) is tested in front of it: the graph, the checkpointer,
the FastAPI endpoint and every AG-UI event are the framework's own; only the model is fake
(a `GenericFakeChatModel` from langchain-core that answers by a script instead of a network).

    tests/frameworks/langgraph/.venv/bin/python tests/frameworks/langgraph/server.py [--port N]

Set up with `python3 -m venv tests/frameworks/langgraph/.venv &&
tests/frameworks/langgraph/.venv/bin/pip install -r tests/frameworks/langgraph/requirements.txt`
(scripts/test does). Prints `listening http://127.0.0.1:<port>` once ready. Needs no network.

Routes:
- `POST /agent` — the graph, served by `add_langgraph_fastapi_endpoint` with
  `emit_interrupt_outcome=True` and `enable_legacy_on_interrupt_event=False`: an `interrupt()`
  ends the run `RUN_FINISHED` with an AG-UI 1.0 interrupt outcome (the package's default is a
  `CUSTOM` `on_interrupt` event and a `RUN_FINISHED` without outcome), and the next run's
  `resume` array resumes it (single `resolved` entry → `Command(resume=payload)`).
- `POST /agent-legacy` — the same graph with the package's defaults (`on_interrupt` only).
- `GET /requests` — every RunAgentInput this process was sent, as JSON (`DELETE` clears).

The model's script, by the last message (the graph's state as ag-ui-langgraph builds it: the
client's `tools` in `state["tools"]`, its `context` in `state["ag-ui"]["context"]`):
- a `tool` message last: "The tool answered: <content>" (a frontend tool's result, sent back by
  the client), or after `send_report` "Report <content>.".
- `use <tool> <json args>`: a call of the client's frontend tool `<tool>` when the run's
  `tools` name it (the graph then ends, as a CopilotKit graph does, so the client runs it);
  else the answer "I was given no tool named <tool>." with the names it was given.
- `what context`: "Context seen: <description>=<value>; ..." from the system message the graph
  writes from `state["ag-ui"]["context"]`, or "No context was given to me."
- `send the report`: a call of the graph's own tool `send_report`, which calls `interrupt()`
  with reason `tool_approval`, the call's id and a response schema; the resume's payload
  `{"approved": bool, "note"?: str}` decides it.
- anything else: "You said: <text>" (streamed word by word).
"""

import asyncio
import json
import os
import uuid
from typing import Annotated, Any, Iterator
import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[2] / "support"))
_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))
import listen  # noqa: E402  (tests/support/listen.py, shared by the Python test servers)
import scripted  # noqa: E402  (tests/frameworks/scripted.py: its request recording, not its script)


# No tracing, so nothing is sent anywhere, whatever the environment says.
os.environ["LANGSMITH_TRACING"] = "false"
os.environ["LANGCHAIN_TRACING_V2"] = "false"

from ag_ui_langgraph import LangGraphAgent, add_langgraph_fastapi_endpoint
from fastapi import FastAPI
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, AnyMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGenerationChunk, ChatResult, ChatGeneration
from langchain_core.tools import InjectedToolCallId, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode
from langgraph.types import interrupt
from typing_extensions import TypedDict

APPROVAL_SCHEMA = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}, "note": {"type": "string"}},
    "required": ["approved"],
}


def text_of(message: AnyMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if isinstance(part, dict))


class ScriptedChatModel(GenericFakeChatModel):
    """A fake chat model that answers by script from the conversation it is given, and calls
    only the tools bound to it, streaming tool calls as chunks the way a provider does."""

    messages: Iterator[AIMessage | str] = iter(())
    bound: list[str] = []

    def bind_tools(self, tools: list[Any], **_kwargs: Any) -> "ScriptedChatModel":
        names = []
        for t in tools:
            if isinstance(t, dict):
                names.append(t.get("function", t).get("name"))
            else:
                names.append(t.name)
        return self.model_copy(update={"bound": names})

    def answer(self, messages: list[AnyMessage]) -> AIMessage:
        last = messages[-1]
        ident = f"lg-{uuid.uuid4().hex[:12]}"
        if isinstance(last, ToolMessage):
            if last.name == "send_report":
                return AIMessage(id=ident, content=f"Report {text_of(last)}.")
            return AIMessage(id=ident, content=f"The tool answered: {text_of(last)}")
        text = text_of(last).strip()
        if text.startswith("use "):
            name, _, args = text[4:].partition(" ")
            if name not in self.bound:
                given = ", ".join(self.bound) or "none"
                return AIMessage(id=ident, content=f"I was given no tool named {name}. Tools given: {given}.")
            call = {"name": name, "args": json.loads(args or "{}"), "id": f"call-{uuid.uuid4().hex[:8]}"}
            return AIMessage(id=ident, content="", tool_calls=[call])
        if text == "what context":
            system = next((text_of(m) for m in messages if isinstance(m, SystemMessage)), "")
            seen = system.removeprefix("Context:\n").replace("\n", "; ")
            return AIMessage(id=ident, content=f"Context seen: {seen}" if seen else "No context was given to me.")
        if text == "send the report":
            call = {"name": "send_report", "args": {"to": "team@example.com"}, "id": f"call-{uuid.uuid4().hex[:8]}"}
            return AIMessage(id=ident, content="I will send it once approved.", tool_calls=[call])
        return AIMessage(id=ident, content=f"You said: {text}")

    def _generate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self.answer(messages))])

    def _stream(self, messages, stop=None, run_manager=None, **kwargs) -> Iterator[ChatGenerationChunk]:
        message = self.answer(messages)
        words = message.content.split(" ") if message.content else []
        for token in [*words[:1], *(f" {w}" for w in words[1:])]:
            chunk = ChatGenerationChunk(message=AIMessageChunk(id=message.id, content=token))
            if run_manager:
                run_manager.on_llm_new_token(token, chunk=chunk)
            yield chunk
        for index, call in enumerate(message.tool_calls):
            args = json.dumps(call["args"])
            # The name and id first, then the arguments in two pieces, as providers stream them.
            pieces = [(call["name"], call["id"], ""), (None, None, args[: len(args) // 2]), (None, None, args[len(args) // 2 :])]
            for name, ident, part in pieces:
                chunk = ChatGenerationChunk(
                    message=AIMessageChunk(
                        id=message.id,
                        content="",
                        tool_call_chunks=[{"name": name, "args": part, "id": ident, "index": index, "type": "tool_call_chunk"}],
                    )
                )
                if run_manager:
                    run_manager.on_llm_new_token("", chunk=chunk)
                yield chunk


@tool
def send_report(to: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> str:
    """Send the report by email; a person approves it first."""
    decision = interrupt(
        {
            "reason": "tool_approval",
            "message": f"Send the report to {to}?",
            "toolCallId": tool_call_id,
            "responseSchema": APPROVAL_SCHEMA,
        }
    )
    if isinstance(decision, dict) and decision.get("approved") is True:
        return f"sent to {to}, note: {decision.get('note', 'none')}"
    return "not sent"


# The state ag-ui-langgraph fills: `tools` (the client's RunAgentInput.tools) and `ag-ui`
# (`{"tools": [...], "context": [Context, ...]}`). Keys not in the graph's input schema are dropped.
State = TypedDict(
    "State",
    {"messages": Annotated[list[AnyMessage], add_messages], "tools": list, "ag-ui": dict},
    total=False,
)

BACKEND_TOOLS = [send_report]


def agent_node(state: State) -> dict:
    frontend = [{"type": "function", "function": t} for t in state.get("tools") or []]
    model = ScriptedChatModel().bind_tools([*frontend, *BACKEND_TOOLS])
    context = (state.get("ag-ui") or {}).get("context") or []
    prompt: list[AnyMessage] = []
    if context:
        # Entries arrive as ag_ui.core Context models (description, value).
        lines = [f"{entry.description}={entry.value}" for entry in context]
        prompt.append(SystemMessage(content="Context:\n" + "\n".join(lines)))
    return {"messages": [model.invoke([*prompt, *state["messages"]])]}


def route(state: State) -> str:
    last = state["messages"][-1]
    backend = {t.name for t in BACKEND_TOOLS}
    if isinstance(last, AIMessage) and any(c["name"] in backend for c in last.tool_calls):
        return "tools"
    # A frontend tool call (or a plain answer) ends the run: the client runs the tool.
    return END


builder = StateGraph(State)
builder.add_node("agent", agent_node)
builder.add_node("tools", ToolNode(BACKEND_TOOLS))
builder.add_edge(START, "agent")
builder.add_conditional_edges("agent", route, ["tools", END])
builder.add_edge("tools", "agent")
graph = builder.compile(checkpointer=InMemorySaver())

app = FastAPI()
scripted.add_request_recording(app)


add_langgraph_fastapi_endpoint(
    app,
    LangGraphAgent(
        name="scripted",
        graph=graph,
        emit_interrupt_outcome=True,
        enable_legacy_on_interrupt_event=False,
    ),
    "/agent",
)
add_langgraph_fastapi_endpoint(app, LangGraphAgent(name="scripted-legacy", graph=graph), "/agent-legacy")


if __name__ == "__main__":
    asyncio.run(listen.serve(app, listen.port_from_args(__doc__.splitlines()[0])))
