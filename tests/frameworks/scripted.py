"""The script every Python framework server's fake model answers by, and the routes that let a
test see what a server was sent and what its tools did. Shared by the ADK, Agent Framework,
Strands and CrewAI servers (tests/frameworks/*/server.py; the LangGraph server takes only
the request recording); each wraps `answer()` in its own
framework's model interface, so everything around the model — the agent loop, tool execution,
human-in-the-loop, sessions, the AG-UI adapter — is the framework's own.

The script, by the conversation's last message:
- a tool result last: after `send_report`, "Report sent to <address>." or, when the framework
  says the call was denied, "Report not sent."; else "The tool answered: <result>"
  (a frontend tool's result, sent back by the client).
- `use <tool> <json args>`: a call of `<tool>` when the run gave the model a tool of that name,
  else "I was given no tool named <tool>. Tools given: <names>."
- `what context`: "Context seen: <description>=<value>; ..." from what the framework gave the
  model, or "No context was given to me."
- `what state`: "State seen: theme=<theme>" from the run's state as the framework gave it to
  the model, or "No theme in state."
- `send the report to <address>`: "I will send it once approved." and a call of the server's own
  tool `send_report` `{"to": <address>}`, which a person approves first.
- `tell me slowly`: 40 words, `w0` … `w39`, one every 150 ms (a run long enough to be cut).
- anything else: "You said: <text>" (streamed word by word).

Stdlib only: each framework's venv has its own pydantic, fastapi and so on.
"""

import json
import logging
import uuid
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

def quiet() -> None:
    """Keeps the frameworks' chatter (experimental-feature warnings, missing token usage, the
    tracing context of a cancelled stream) out of the test output; errors still show."""
    warnings.filterwarnings("ignore")
    logging.getLogger().setLevel(logging.ERROR)
    logging.getLogger("opentelemetry").setLevel(logging.CRITICAL + 1)


SLOW_WORDS = [f"w{i}" for i in range(40)]
SLOW_DELAY_SECS = 0.15
REPORT_TOOL = "send_report"


@dataclass
class Call:
    name: str
    args: dict
    id: str = field(default_factory=lambda: f"call_{uuid.uuid4().hex[:10]}")


@dataclass
class Answer:
    text: str = ""
    calls: list = field(default_factory=list)
    # Seconds between words: a slow answer, streamed with pauses.
    delay: float = 0.0

    def words(self) -> list:
        """The text as stream pieces: "a", " b", " c" … (joined, the text)."""
        if not self.text:
            return []
        parts = self.text.split(" ")
        return [parts[0], *(f" {w}" for w in parts[1:])]


@dataclass
class Said:
    """What the conversation's last message was, in each framework's terms reduced to this."""

    # "user" or "tool".
    kind: str
    text: str
    # For a tool result: the tool's name when the framework knows it.
    tool: Optional[str] = None


def refused(result: str) -> bool:
    """Whether a tool's result is the framework saying the call was denied, not run."""
    lowered = result.lower()
    return any(word in lowered for word in ("reject", "denied", "declined", "not approved", "cancel"))


def answer(
    last: Said,
    tools: list,
    context: Optional[list] = None,
    state: Optional[dict] = None,
) -> Answer:
    """The scripted answer to `last`, given the names of the tools the model was offered, the
    run's context entries as (description, value) pairs and the run's state."""
    if last.kind == "tool":
        if last.tool == REPORT_TOOL or last.text.startswith("sent to") or refused(last.text):
            # Each framework words a denial its own way; the script says one thing for all.
            return Answer(text="Report not sent." if refused(last.text) else f"Report {last.text.rstrip('.')}.")
        return Answer(text=f"The tool answered: {last.text}")
    text = last.text.strip()
    if text.startswith("use "):
        name, _, args = text[4:].partition(" ")
        if name not in tools:
            given = ", ".join(t for t in tools if t != REPORT_TOOL) or "none"
            return Answer(text=f"I was given no tool named {name}. Tools given: {given}.")
        return Answer(calls=[Call(name, json.loads(args or "{}"))])
    if text == "what context":
        if not context:
            return Answer(text="No context was given to me.")
        return Answer(text="Context seen: " + "; ".join(f"{d}={v}" for d, v in context))
    if text == "what state":
        theme = (state or {}).get("theme")
        return Answer(text=f"State seen: theme={theme}" if theme is not None else "No theme in state.")
    if text.startswith("send the report to "):
        to = text.removeprefix("send the report to ").strip()
        return Answer(text="I will send it once approved.", calls=[Call(REPORT_TOOL, {"to": to})])
    if text == "tell me slowly":
        return Answer(text=" ".join(SLOW_WORDS), delay=SLOW_DELAY_SECS)
    return Answer(text=f"You said: {text}")


# What the server was sent and what its tools did, for the tests to read.
received: list = []
executions: list = []


def send_report(to: str) -> str:
    """The server's own tool: records that it ran (the side effect a denial must prevent)."""
    executions.append({"tool": REPORT_TOOL, "args": {"to": to}})
    return f"sent to {to}"


def add_request_recording(app: Any) -> None:
    """Records every POST body (`GET /requests` lists them, `DELETE` clears) on a FastAPI app.
    The LangGraph server, whose model is not on this script, records its requests by it too."""
    from fastapi import Request
    from fastapi.responses import JSONResponse, Response

    @app.middleware("http")
    async def record(request: Request, call_next: Callable):
        if request.method == "POST":
            raw = await request.body()
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode("utf-8", "replace")
            received.append({"path": request.url.path, "body": body})
        return await call_next(request)

    @app.get("/requests")
    async def requests_list() -> Response:
        return JSONResponse(received)

    @app.delete("/requests")
    async def requests_clear() -> Response:
        received.clear()
        return Response(status_code=204)


def add_recording(app: Any) -> None:
    """Records every POST body (`GET /requests`, `DELETE` clears) and serves the tool runs
    (`GET /executions`) on a FastAPI app."""
    from fastapi.responses import JSONResponse, Response

    add_request_recording(app)

    @app.get("/executions")
    async def executions_list() -> Response:
        return JSONResponse(executions)
