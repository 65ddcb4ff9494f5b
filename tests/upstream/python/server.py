"""A real AG-UI 1.0 server on the official `ag-ui-protocol` package (Starlette on uvicorn).

It is an upstream that the gateway's `agui` agent (SPEC §9.3) fronts in tests, and serves the
same routes as tests/upstream/node/server.mjs, so one test can drive either:

    tests/upstream/python/.venv/bin/python tests/upstream/python/server.py [--port N]

Set up with `python3 -m venv tests/upstream/python/.venv &&
tests/upstream/python/.venv/bin/pip install -r tests/upstream/python/requirements.txt`.
Prints `listening http://127.0.0.1:<port>` once ready. The routes, their events and the
`runs` counter in chat's state snapshot (every run this process started, on any agent; not
reset by DELETE /requests) are described in the Node server's header. Every event is an `ag_ui.core` model
written by `ag_ui.encoder.EventEncoder`, except the deliberately invalid ones on
/agents/invalid, which the models refuse to build (see `invalid_frames`). The package's
encoder only speaks SSE, so Accept is read but every answer is `text/event-stream`.
"""

import asyncio
import json
import time

from ag_ui.core import (
    ActivityDeltaEvent,
    ActivitySnapshotEvent,
    EventType,
    Interrupt,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StateSnapshotEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    TokenUsage,
)
from ag_ui.encoder import EventEncoder
from ag_ui_a2ui_toolkit import A2UI_OPERATIONS_KEY, build_a2ui_envelope, validate_a2ui_components
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[2] / "support"))
import listen  # noqa: E402  (tests/support/listen.py, shared by the Python test servers)


APPROVAL_ID = "up-approval-1"
APPROVAL_SCHEMA = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}, "note": {"type": "string"}},
    "required": ["approved"],
}

received: list[dict] = []
runs_served = 0


def now_ms() -> int:
    return int(time.time() * 1000)


def last_user_text(messages) -> str:
    for message in reversed(messages):
        if message.role == "user":
            if isinstance(message.content, str):
                return message.content
            return "".join(p.text for p in message.content if p.type == "text")
    return ""


def text_message(message_id: str, deltas: list[str]) -> list:
    return [
        TextMessageStartEvent(message_id=message_id, role="assistant"),
        *(TextMessageContentEvent(message_id=message_id, delta=d) for d in deltas),
        TextMessageEndEvent(message_id=message_id),
    ]


def tool_call(tool_call_id: str, name: str, parent_message_id: str, arg_deltas: list[str]) -> list:
    return [
        ToolCallStartEvent(tool_call_id=tool_call_id, tool_call_name=name, parent_message_id=parent_message_id),
        *(ToolCallArgsEvent(tool_call_id=tool_call_id, delta=d) for d in arg_deltas),
        ToolCallEndEvent(tool_call_id=tool_call_id),
    ]


def run_started(inp: RunAgentInput) -> RunStartedEvent:
    global runs_served
    runs_served += 1
    return RunStartedEvent(thread_id=inp.thread_id, run_id=inp.run_id, protocol_version="1.0")


def run_finished(inp: RunAgentInput, outcome) -> RunFinishedEvent:
    return RunFinishedEvent(thread_id=inp.thread_id, run_id=inp.run_id, outcome=outcome)


def chat_events(inp: RunAgentInput, _case: str | None) -> list:
    run = inp.run_id
    first, call = f"{run}-heard", f"{run}-weather"
    events = [
        run_started(inp),
        # The text is split so a gateway that keeps only the first or last delta is caught.
        *text_message(first, ["Upstream heard:", f" {last_user_text(inp.messages)}"]),
        *tool_call(call, "get_weather", first, ['{"city":', '"Paris"}']),
        ToolCallResultEvent(message_id=f"{run}-weather-result", tool_call_id=call, content="sunny", role="tool"),
        *text_message(f"{run}-done", ["Done after ", f"{len(inp.messages)} messages."]),
    ]
    # Counted after RUN_STARTED so the snapshot includes this run.
    events.append(StateSnapshotEvent(snapshot={"upstream": {"runs": runs_served}}))
    events.append(run_finished(inp, RunFinishedSuccessOutcome()))
    return events


def approval_events(inp: RunAgentInput, _case: str | None) -> list:
    run = inp.run_id
    # Deterministic from the thread so the resumed run can name the call the first run raised,
    # as an upstream that keeps no memory of its own must.
    call = f"{inp.thread_id}-send"
    resume = inp.resume or []
    if not resume:
        ask = f"{run}-ask"
        interrupt = Interrupt(
            id=APPROVAL_ID,
            reason="tool_approval",
            message="Send the email?",
            tool_call_id=call,
            response_schema=APPROVAL_SCHEMA,
        )
        return [
            run_started(inp),
            *text_message(ask, ["I need approval ", "to send the email."]),
            *tool_call(call, "send_email", ask, ['{"to":', '"team@example.com"}']),
            run_finished(inp, RunFinishedInterruptOutcome(interrupts=[interrupt])),
        ]
    entry = next((r for r in resume if r.interrupt_id == APPROVAL_ID), None)
    # An interrupt left unanswered must not be acted on or finished as success (AG-UI 1.0).
    # Entries for ids this server never raised are ignored, as the protocol asks.
    if entry is None:
        return [RunErrorEvent(message=f"missing resume for {APPROVAL_ID}", code="missing_resume")]
    payload = entry.payload if isinstance(entry.payload, dict) else {}
    if entry.status == "resolved" and not isinstance(payload.get("approved"), bool):
        return [RunErrorEvent(message=f"invalid resume payload for {APPROVAL_ID}", code="invalid_resume")]
    events = [run_started(inp)]
    if entry.status == "resolved" and payload["approved"] is True:
        note = payload.get("note") if isinstance(payload.get("note"), str) else "none"
        events.append(ToolCallResultEvent(message_id=f"{run}-send-result", tool_call_id=call, content="sent", role="tool"))
        events.extend(text_message(f"{run}-sent", ["Sent. ", f"Note: {note}"]))
    else:
        events.extend(text_message(f"{run}-not-sent", ["Not ", "sent."]))
    events.append(run_finished(inp, RunFinishedSuccessOutcome()))
    return events


def invalid_frames(message_id: str) -> dict[str, str]:
    """Raw SSE frames of events the official schema rejects.

    pydantic refuses to build either (`delta` must be a string, `timestamp` an integer), so
    they are written by hand, framed exactly as EventEncoder frames a valid event.
    """

    def frame(event: dict) -> str:
        return f"data: {json.dumps(event, separators=(',', ':'), ensure_ascii=False)}\n\n"

    return {
        # A required field as null: what pydantic-era producers put on the wire.
        "null-delta": frame({"type": "TEXT_MESSAGE_CONTENT", "messageId": message_id, "delta": None, "timestamp": now_ms()}),
        # timestamp must be an integer; `time.time() * 1000` is not.
        "float-timestamp": frame(
            {"type": "TEXT_MESSAGE_CONTENT", "messageId": message_id, "delta": "hello", "timestamp": 1700000000000.5}
        ),
    }


def invalid_events(inp: RunAgentInput, case: str) -> list:
    message_id = f"{inp.run_id}-bad"
    return [
        run_started(inp),
        TextMessageStartEvent(message_id=message_id, role="assistant"),
        invalid_frames(message_id)[case],
        TextMessageEndEvent(message_id=message_id),
        run_finished(inp, RunFinishedSuccessOutcome()),
    ]


def empty_delta_events(inp: RunAgentInput, _case: str | None) -> list:
    # "" is a valid delta in AG-UI 1.0; a gateway must pass it, not fail the turn.
    return [
        run_started(inp),
        *text_message(f"{inp.run_id}-empty", ["", "Still here."]),
        run_finished(inp, RunFinishedSuccessOutcome()),
    ]


def out_of_order_events(inp: RunAgentInput, _case: str | None) -> list:
    return [
        run_started(inp),
        TextMessageContentEvent(message_id=f"{inp.run_id}-never-started", delta="orphan"),
        run_finished(inp, RunFinishedSuccessOutcome()),
    ]


def thinking_events(inp: RunAgentInput, _case: str | None) -> list:
    run = inp.run_id
    span, thought, plan = f"{run}-think", f"{run}-thought", f"{run}-plan"
    return [
        run_started(inp),
        ReasoningStartEvent(message_id=span),
        ReasoningMessageStartEvent(message_id=thought, role="reasoning"),
        ReasoningMessageContentEvent(message_id=thought, delta="Weighing "),
        ReasoningMessageContentEvent(message_id=thought, delta="the options."),
        ReasoningMessageEndEvent(message_id=thought),
        ReasoningEndEvent(message_id=span),
        ActivitySnapshotEvent(message_id=plan, activity_type="plan", content={"steps": ["search", "answer"], "done": 0}),
        ActivityDeltaEvent(message_id=plan, activity_type="plan", patch=[{"op": "replace", "path": "/done", "value": 1}]),
        *text_message(f"{run}-answer", ["Decided."]),
        run_finished(inp, RunFinishedSuccessOutcome()),
    ]


# The surface /agents/surface draws, as the toolkit's `render_a2ui` sub-agent would answer it: a
# form with one button whose action names the size. Kept in step with the Node server's.
SURFACE_ID = "order-form"
SURFACE_COMPONENTS = [
    {"id": "root", "component": "Column", "children": ["title", "go"]},
    {"id": "title", "component": "Text", "text": "Order a pizza?"},
    {"id": "go", "component": "Button", "child": "go-text", "action": {"event": {"name": "order", "context": {"size": "large"}}}},
    {"id": "go-text", "component": "Text", "text": "Order"},
]


def logged_action(messages) -> tuple[dict, str] | None:
    """The person's action, when the conversation ends with one as the A2UI middleware gives it:
    an assistant message whose one tool call is `log_a2ui_event` (the action as its arguments),
    then that call's result in words. None otherwise."""
    if len(messages) < 2:
        return None
    call, result = messages[-2], messages[-1]
    calls = getattr(call, "tool_calls", None) or []
    if call.role != "assistant" or len(calls) != 1 or calls[0].function.name != "log_a2ui_event":
        return None
    if result.role != "tool" or result.tool_call_id != calls[0].id:
        return None
    try:
        action = json.loads(calls[0].function.arguments)
    except ValueError:
        return None
    return (action, result.content) if isinstance(action, dict) else None


def surface_events(inp: RunAgentInput, _case: str | None) -> list:
    """An A2UI surface, drawn with ag-ui-a2ui-toolkit and shown as `@ag-ui/a2ui-middleware` shows a
    tool result holding `a2ui_operations` (an `a2ui-surface` activity); given a person's action
    last, it answers the action instead, naming it (no model: the answer is fixed by the input)."""
    run = inp.run_id
    acted = logged_action(inp.messages)
    if acted is not None:
        action, words = acted
        said = f"You pressed {action.get('name')} on {action.get('surfaceId')}. "
        return [run_started(inp), *text_message(f"{run}-answer", [said, words]), run_finished(inp, RunFinishedSuccessOutcome())]
    # The toolkit's own checks and envelope, so what is drawn is what its adapters would draw.
    checked = validate_a2ui_components(components=SURFACE_COMPONENTS)
    if not checked["valid"]:
        return [RunErrorEvent(message=json.dumps(checked["errors"]), code="invalid_surface")]
    envelope = json.loads(
        build_a2ui_envelope(args={"surfaceId": SURFACE_ID, "components": SURFACE_COMPONENTS}, is_update=False, target_surface_id=None, prior=None)
    )
    return [
        run_started(inp),
        *text_message(f"{run}-intro", ["Here is the form."]),
        ActivitySnapshotEvent(
            message_id=f"a2ui-surface-{run}",
            activity_type="a2ui-surface",
            content={A2UI_OPERATIONS_KEY: envelope[A2UI_OPERATIONS_KEY]},
            replace=True,
        ),
        run_finished(inp, RunFinishedSuccessOutcome()),
    ]


def fails_events(inp: RunAgentInput, _case: str | None) -> list:
    # A run whose model spent tokens before it failed: 1.0's RUN_ERROR carries them.
    return [
        run_started(inp),
        *text_message(f"{inp.run_id}-started", ["Looking into it."]),
        RunErrorEvent(
            message="the model stopped",
            code="model_error",
            usage=[TokenUsage(provider="acme", model="m-1", input_tokens=7, output_tokens=3, total_tokens=10)],
        ),
    ]


def record(request: Request, raw: bytes) -> object:
    try:
        body = json.loads(raw)
    except ValueError:
        body = raw.decode("utf-8", "replace")  # recorded as sent, even when it is not JSON
    headers: dict[str, str] = {}
    for name, value in request.headers.items():
        # Repeated headers joined with ", ", as the Node server records them.
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    received.append({"path": path, "headers": headers, "body": body})
    return body


def agent(events, gap_s: float = 0.0):
    async def endpoint(request: Request) -> Response:
        body = record(request, await request.body())
        # The official model is the judge of what the gateway sends upstream; a stock server
        # refuses a malformed RunAgentInput before any stream opens.
        try:
            inp = RunAgentInput.model_validate(body)
        except ValidationError as e:
            return JSONResponse({"error": "invalid RunAgentInput", "issues": json.loads(e.json())}, status_code=400)
        case = None
        if events is invalid_events:
            case = request.query_params.get("case", "null-delta")
            if case not in invalid_frames(""):
                return JSONResponse({"error": f"unknown case {case}; one of {', '.join(invalid_frames(''))}"}, status_code=400)

        encoder = EventEncoder(accept=request.headers.get("accept"))
        planned = events(inp, case)

        async def stream():
            for i, event in enumerate(planned):
                if i and gap_s:
                    await asyncio.sleep(gap_s)
                if isinstance(event, str):
                    yield event
                    continue
                if event.timestamp is None:
                    event.timestamp = now_ms()
                yield encoder.encode(event)

        return StreamingResponse(
            stream(),
            media_type=encoder.get_content_type(),
            headers={"Cache-Control": "no-cache"},
        )

    return endpoint


async def no_agent(request: Request) -> Response:
    record(request, await request.body())
    return JSONResponse({"error": f"no agent at {request.url.path}"}, status_code=404)


async def requests_endpoint(request: Request) -> Response:
    if request.method == "DELETE":
        received.clear()
        return Response(status_code=204)
    return JSONResponse(received)


app = Starlette(
    routes=[
        Route("/agents/chat", agent(chat_events), methods=["POST"]),
        Route("/agents/slow", agent(chat_events, gap_s=0.2), methods=["POST"]),
        Route("/agents/approval", agent(approval_events), methods=["POST"]),
        Route("/agents/invalid", agent(invalid_events), methods=["POST"]),
        Route("/agents/empty-delta", agent(empty_delta_events), methods=["POST"]),
        Route("/agents/out-of-order", agent(out_of_order_events), methods=["POST"]),
        Route("/agents/thinking", agent(thinking_events), methods=["POST"]),
        Route("/agents/fails", agent(fails_events), methods=["POST"]),
        Route("/agents/surface", agent(surface_events), methods=["POST"]),
        Route("/requests", requests_endpoint, methods=["GET", "DELETE"]),
        # Recorded too, so a test can see a request the gateway sent to the wrong place.
        Route("/{path:path}", no_agent, methods=["POST"]),
    ]
)


if __name__ == "__main__":
    asyncio.run(listen.serve(app, listen.port_from_args(__doc__.splitlines()[0])))
