"""AG-UI Python reference stack as a benchmark peer (see BENCHMARKS.md).

A FastAPI route on uvicorn that answers a RunAgentInput with the same events the gateway's
`script` agent appends for the bench scenarios, encoded one by one with the official
`ag-ui-protocol` EventEncoder, from memory (nothing durable). What to stream comes from
`forwardedProps.bench`:

- `{"burst": N, "bytes": B}`: one message of N TEXT_MESSAGE_CONTENT events, as fast as possible;
- `{"tick": N, "everyMs": M}`: N CUSTOM `gateway.tick` events, one every M ms, each carrying
  `{"n", "madeAtUs"}` (the microsecond it was made) for append→receive latency.

Run: `python python_peer.py [--port N]` (uvicorn with uvloop and httptools, one worker). It binds
the port itself (a free one without `--port`) and prints `listening http://127.0.0.1:<port>` once
the listener is bound, so whoever starts it learns the port from that line without polling.
"""

import argparse
import asyncio
import socket
import time

import uvicorn
from ag_ui.core import (
    CustomEvent,
    EventType,
    RunAgentInput,
    RunFinishedEvent,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
)
from ag_ui.encoder import EventEncoder
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

app = FastAPI()


@app.get("/livez")
async def livez() -> dict:
    return {"ok": True}


@app.post("/agent")
async def agent(input_data: RunAgentInput, request: Request) -> StreamingResponse:
    encoder = EventEncoder(accept=request.headers.get("accept"))
    props = input_data.forwarded_props or {}
    bench = props.get("bench", {}) if isinstance(props, dict) else {}

    async def events():
        yield encoder.encode(
            RunStartedEvent(
                type=EventType.RUN_STARTED,
                thread_id=input_data.thread_id,
                run_id=input_data.run_id,
            )
        )
        if "burst" in bench:
            message_id = f"{input_data.run_id}:m1"
            delta = "x" * max(1, int(bench.get("bytes", 64)))
            yield encoder.encode(
                TextMessageStartEvent(
                    type=EventType.TEXT_MESSAGE_START, message_id=message_id, role="assistant"
                )
            )
            for _ in range(int(bench["burst"])):
                yield encoder.encode(
                    TextMessageContentEvent(
                        type=EventType.TEXT_MESSAGE_CONTENT, message_id=message_id, delta=delta
                    )
                )
            yield encoder.encode(
                TextMessageEndEvent(type=EventType.TEXT_MESSAGE_END, message_id=message_id)
            )
        elif "tick" in bench:
            every = int(bench.get("everyMs", 100)) / 1000.0
            for n in range(int(bench["tick"])):
                if n > 0:
                    await asyncio.sleep(every)
                made_at_us = time.time_ns() // 1000
                yield encoder.encode(
                    CustomEvent(
                        type=EventType.CUSTOM,
                        name="gateway.tick",
                        value={"n": n, "madeAtUs": made_at_us},
                    )
                )
        yield encoder.encode(
            RunFinishedEvent(
                type=EventType.RUN_FINISHED,
                thread_id=input_data.thread_id,
                run_id=input_data.run_id,
            )
        )

    return StreamingResponse(events(), media_type=encoder.get_content_type())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    # The listener is bound and listening before the line is printed: a request sent on reading
    # it waits in the backlog until uvicorn accepts it, so the line is the readiness signal.
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((args.host, args.port))
    listener.listen(4096)
    port = listener.getsockname()[1]
    print(f"listening http://{args.host}:{port}", flush=True)
    config = uvicorn.Config(
        app,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        access_log=False,
        backlog=4096,
    )
    uvicorn.Server(config).run(sockets=[listener])


if __name__ == "__main__":
    main()
