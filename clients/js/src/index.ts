// @agui-gateway/resumable-client: an @ag-ui/client HttpAgent that survives a dropped connection.
//
// HttpAgent 1.0 ignores the SSE `id:` lines, so a stream that drops mid-run is simply over. This
// subclass replaces only the transport under HttpAgent.run(): it reads the response itself, cuts
// it into whole SSE frames, remembers the id of each, and when the connection fails or ends
// before the run's terminal event it POSTs the same body again with `Last-Event-ID`. The frames
// of every connection are handed to the official parser (transformHttpEventStream) as one
// response, so everything above it (enforcement, chunk expansion, verification, the reducer and
// the app's subscribers) sees a single unbroken run.
//
// It also implements AG-UI's `connect()`, which HttpAgent 1.0 leaves unimplemented: the gateway's
// connect route streams a whole thread (its conversation, its board, the turn in progress and
// every later turn, each as its own run), so `connectAgent()` restores a thread after a reload
// and follows it live. That stream has no end of its own, so it is resumed with Last-Event-ID
// after every drop or close, between runs as well as inside one.
import { HttpAgent, enforceOutgoingInput, transformHttpEventStream } from "@ag-ui/client";
import type { AgentSubscriber, HttpAgentConfig, RunAgentParameters, RunAgentResult } from "@ag-ui/client";
import type { BaseEvent, RunAgentInput } from "@ag-ui/core";
import { Observable } from "rxjs";

export interface ResumableHttpAgentConfig extends HttpAgentConfig {
  /**
   * How many times in a row the agent reconnects without receiving anything before the run
   * fails. The count starts again whenever a connection delivers at least one whole frame (an
   * event, or a `: keepalive` comment that shows the stream was healthy), so a long run that the
   * server closes every so often (the gateway closes streams after 30 minutes, idle turns
   * included) keeps going. 0 turns reconnecting off. Default 5.
   */
  maxReconnects?: number;
  /**
   * Pause before the first reconnect in a row, in milliseconds; it doubles for each further one
   * without progress, up to 30 s. Default 250.
   */
  reconnectDelayMs?: number;
  /**
   * Told when the connection was lost before the run's end and the agent starts its pause before
   * reconnecting: how long the pause is, which reconnect in a row without progress follows it
   * (from 1), and the id it will resume after. For an app's "reconnecting…" notice; what it
   * returns is ignored, and an exception it throws fails the run.
   */
  onReconnecting?: (pause: ReconnectPause) => void;
  /**
   * Where `connect()` (and so `connectAgent()`) follows the thread. Default: the gateway's
   * connect route beside `url`, i.e. `url` with `/connect` appended to its path
   * (`…/v1/agui/agents/demo?tenant=t` → `…/v1/agui/agents/demo/connect?tenant=t`).
   */
  connectUrl?: string;
}

/** `connectAgent()`'s parameters: those of `runAgent()`, with HttpAgent's `abortController`. */
export interface ConnectAgentParameters extends RunAgentParameters {
  abortController?: AbortController;
}

/**
 * The gateway's connect route for an agent's run URL: `/connect` appended to the path, the query
 * (the tenant) kept. A relative URL (a page's own backend) is kept relative.
 */
export function connectUrlFor(runUrl: string): string {
  const cut = runUrl.search(/[?#]/);
  const path = cut < 0 ? runUrl : runUrl.slice(0, cut);
  const rest = cut < 0 ? "" : runUrl.slice(cut);
  return `${path.replace(/\/+$/, "")}/connect${rest}`;
}

/** What `onReconnecting` is told about the pause before a reconnect. */
export interface ReconnectPause {
  delayMs: number;
  attempt: number;
  lastEventId: string | undefined;
}

const DEFAULT_MAX_RECONNECTS = 5;
const DEFAULT_RECONNECT_DELAY_MS = 250;
const MAX_RECONNECT_DELAY_MS = 30_000;

// The protobuf transport carries no event ids, so such a response is passed through untouched.
const AGUI_PROTO_MEDIA_TYPE = "application/vnd.ag-ui.event+proto";

// The transport events transformHttpEventStream consumes. @ag-ui/client 1.0 exports the function
// but not its HttpEventType enum, so the type is taken from the signature and the two members are
// built from the enum's string values ("headers", "data").
type HttpEvent = Parameters<typeof transformHttpEventStream>[0] extends Observable<infer E> ? E : never;
const headersEvent = (response: Response): HttpEvent =>
  ({ type: "headers", status: response.status, headers: response.headers }) as unknown as HttpEvent;
const dataEvent = (data: Uint8Array): HttpEvent => ({ type: "data", data }) as unknown as HttpEvent;

const LF = 0x0a;
const FRAME_END = new Uint8Array([LF, LF]);

/** What one complete SSE frame says that matters for resuming. */
interface FrameInfo {
  /** The value of its `id:` field, when it has one. */
  id?: string;
  /** Whether it has `data:` lines (comments such as `: keepalive` do not). */
  hasData: boolean;
  /** The joined data, when it has any. */
  data: string;
}

/**
 * Reads the fields of one SSE frame the way @ag-ui/client's own parser delimits it: lines split
 * on LF, one optional space after the colon removed. An `id:` value holding NUL is ignored, as
 * the SSE standard says.
 */
function readFrame(text: string): FrameInfo {
  let id: string | undefined;
  const dataLines: string[] = [];
  for (const line of text.split("\n")) {
    if (line.startsWith("data:")) dataLines.push(line.slice(5).replace(/^ /, ""));
    else if (line.startsWith("id:")) {
      const value = line.slice(3).replace(/^ /, "");
      if (!value.includes("\0")) id = value;
    }
  }
  return { id, hasData: dataLines.length > 0, data: dataLines.join("\n") };
}

/** The AG-UI event type a frame's data names, or undefined when it is not an event object. */
function eventType(data: string): string | undefined {
  try {
    const parsed: unknown = JSON.parse(data);
    if (parsed && typeof parsed === "object" && !Array.isArray(parsed)) {
      const type = (parsed as { type?: unknown }).type;
      return typeof type === "string" ? type : undefined;
    }
  } catch {
    // Not JSON: the official parser downstream reports it; for resuming it names no type.
  }
  return undefined;
}

function indexOfFrameEnd(bytes: Uint8Array, from: number): number {
  for (let i = Math.max(from, 0); i + 1 < bytes.length; i++) {
    if (bytes[i] === LF && bytes[i + 1] === LF) return i;
  }
  return -1;
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  if (a.length === 0) return b;
  const out = new Uint8Array(a.length + b.length);
  out.set(a, 0);
  out.set(b, a.length);
  return out;
}

/** `headers` with Last-Event-ID set, in the same shape the request used (object, array or Headers). */
function withLastEventId(headers: HeadersInit | undefined, lastEventId: string): HeadersInit {
  if (headers instanceof Headers) {
    const copy = new Headers(headers);
    copy.set("Last-Event-ID", lastEventId);
    return copy;
  }
  if (Array.isArray(headers)) {
    return [...headers.filter(([name]) => name.toLowerCase() !== "last-event-id"), ["Last-Event-ID", lastEventId]];
  }
  const copy: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers ?? {})) {
    if (name.toLowerCase() !== "last-event-id") copy[name] = value;
  }
  copy["Last-Event-ID"] = lastEventId;
  return copy;
}

/** The error HttpAgent raises for a non-2xx answer, with the same message, `status` and `payload`. */
async function httpStatusError(response: Response): Promise<Error> {
  const contentType = response.headers.get("content-type") || "";
  const text = await response.text();
  let payload: unknown = text;
  if (contentType.includes("application/json")) {
    try {
      payload = JSON.parse(text);
    } catch {
      // keep the raw text
    }
  }
  const error: Error & { status?: number; payload?: unknown } = new Error(
    `HTTP ${response.status}: ${typeof payload === "string" ? payload : JSON.stringify(payload)}`,
  );
  error.status = response.status;
  error.payload = payload;
  return error;
}

function abortError(signal: AbortSignal): unknown {
  return signal.reason ?? new DOMException("This operation was aborted", "AbortError");
}

/** Resolves after `ms`, or rejects with the signal's reason as soon as it aborts. */
function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(abortError(signal));
    const onAbort = () => {
      clearTimeout(timer);
      reject(abortError(signal));
    };
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal.addEventListener("abort", onAbort, { once: true });
  });
}

/**
 * A drop-in `HttpAgent` whose runs survive dropped connections.
 *
 * Same options as `HttpAgent`, plus `maxReconnects`, `reconnectDelayMs` and `onReconnecting`. While a run streams,
 * `lastEventId` is the id of the last whole event received. When the connection fails or ends
 * before the run's terminal event (RUN_FINISHED or RUN_ERROR), the agent waits, POSTs the same
 * body again with `Last-Event-ID: <lastEventId>` (without it when no event had arrived yet) and
 * continues the same observable with what follows. A frame cut in half by the drop is dropped and
 * received again whole. An HTTP error status on a reconnect fails the run, as on the first try;
 * so does running out of reconnects. A server that sends events without ids cannot be resumed:
 * such a run behaves exactly as with `HttpAgent`.
 */
/** Where the user message `messageId` (the newest user message when absent) is in `messages`. */
function userMessageIndex(messages: HttpAgent["messages"], messageId: string | undefined): number {
  for (let index = messages.length - 1; index >= 0; index--) {
    const message = messages[index];
    if (message.role === "user" && (messageId === undefined || message.id === messageId)) return index;
  }
  throw new Error(messageId === undefined ? "no user message to regenerate" : `no user message '${messageId}'`);
}

export class ResumableHttpAgent extends HttpAgent {
  public maxReconnects: number;
  public reconnectDelayMs: number;
  public onReconnecting: ((pause: ReconnectPause) => void) | undefined;
  /** The `id:` of the last whole event of the current (or last) run; undefined before the first. */
  public lastEventId: string | undefined;
  /** Where `connect()` follows the thread (see `ResumableHttpAgentConfig.connectUrl`). */
  public connectUrl: string;

  constructor(config: ResumableHttpAgentConfig) {
    super(config);
    this.maxReconnects = config.maxReconnects ?? DEFAULT_MAX_RECONNECTS;
    this.reconnectDelayMs = config.reconnectDelayMs ?? DEFAULT_RECONNECT_DELAY_MS;
    this.onReconnecting = config.onReconnecting;
    this.lastEventId = undefined;
    this.connectUrl = config.connectUrl ?? connectUrlFor(config.url);
    if (!Number.isInteger(this.maxReconnects) || this.maxReconnects < 0) {
      throw new TypeError(`maxReconnects must be a whole number ≥ 0, got ${config.maxReconnects}`);
    }
    if (!(this.reconnectDelayMs >= 0)) {
      throw new TypeError(`reconnectDelayMs must be ≥ 0, got ${config.reconnectDelayMs}`);
    }
  }

  /**
   * Asks for another answer to a user message (the newest one, or `messageId`): the messages
   * after it are dropped and the run sends the conversation up to it, the message unchanged —
   * the gateway starts a new turn beside the old one (a new branch; the old answer stays in the
   * thread). While that message's turn still runs or waits, the gateway follows it instead.
   */
  async regenerate(parameters?: RunAgentParameters & { messageId?: string }): Promise<RunAgentResult> {
    const { messageId, ...run } = parameters ?? {};
    const index = userMessageIndex(this.messages, messageId);
    this.setMessages(this.messages.slice(0, index + 1));
    return this.runAgent(run);
  }

  /**
   * Edits a user message the thread holds: it keeps its id, takes `content`, and the messages
   * after it are dropped; the gateway answers the new words on a new branch from the same
   * point (the old words and their answers stay in the thread).
   */
  async edit(messageId: string, content: string, parameters?: RunAgentParameters): Promise<RunAgentResult> {
    const index = userMessageIndex(this.messages, messageId);
    const edited = { ...this.messages[index], content } as (typeof this.messages)[number];
    this.setMessages([...this.messages.slice(0, index), edited]);
    return this.runAgent(parameters);
  }

  run(input: RunAgentInput): Observable<BaseEvent> {
    return transformHttpEventStream(this.resumableRequest(input, this.url, "run"), this.debugLogger);
  }

  /**
   * The thread as the gateway's connect route streams it: RUN_STARTED, MESSAGES_SNAPSHOT and
   * STATE_SNAPSHOT (which the reducer turns into `messages` and `state`), the turn in progress
   * live, then each later turn of the thread as its own run, whoever starts it. It goes on until
   * `abortRun()` or `detachActiveRun()`; a drop or a close by the gateway (its
   * `stream_max_secs`), inside a run or between two, is resumed with `Last-Event-ID`.
   */
  protected connect(input: RunAgentInput): Observable<BaseEvent> {
    return transformHttpEventStream(this.resumableRequest(input, this.connectUrl, "thread"), this.debugLogger);
  }

  /**
   * `AbstractAgent.connectAgent()`, with a fresh abort controller as `runAgent()` takes one, so
   * `abortRun()` ends this connection and not an earlier, already aborted one.
   */
  async connectAgent(parameters?: ConnectAgentParameters, subscriber?: AgentSubscriber): Promise<RunAgentResult> {
    this.abortController = parameters?.abortController ?? new AbortController();
    return super.connectAgent(parameters, subscriber);
  }

  public clone(): ResumableHttpAgent {
    const cloned = super.clone() as ResumableHttpAgent;
    cloned.maxReconnects = this.maxReconnects;
    cloned.reconnectDelayMs = this.reconnectDelayMs;
    cloned.onReconnecting = this.onReconnecting;
    cloned.lastEventId = this.lastEventId;
    cloned.connectUrl = this.connectUrl;
    return cloned;
  }

  /**
   * The run's HTTP response as transformHttpEventStream expects it (one headers event, then
   * data), spliced together from as many connections as it takes. Data is only ever whole frames,
   * each ending in a blank line, so the parser downstream never sees half an event. A `run` is
   * over at its terminal event; a `thread` (the connect stream) is never over by itself.
   */
  private resumableRequest(input: RunAgentInput, url: string, follows: "run" | "thread"): Observable<HttpEvent> {
    return new Observable<HttpEvent>((subscriber) => {
      // Built when subscribed, as HttpAgent does, so a malformed input fails inside the run's
      // error handling. The input is enforced with HttpAgent's own exported check, so the body is
      // exactly what HttpAgent would send; that same body goes out again on every reconnect.
      let init: RequestInit;
      try {
        init = this.requestInit(enforceOutgoingInput(input));
      } catch (error) {
        subscriber.error(error);
        return;
      }
      const external = init.signal ?? undefined;
      // Unsubscribing (the run detached or failed downstream) must also stop a fetch in flight
      // or a pause between attempts, not only the body being read.
      const local = new AbortController();
      const forwardAbort = () => local.abort(external?.reason);
      if (external?.aborted) forwardAbort();
      else external?.addEventListener("abort", forwardAbort, { once: true });
      let reader: ReadableStreamDefaultReader<Uint8Array> | undefined;
      let closed = false;

      this.lastEventId = undefined;
      let headersSent = false;
      let eventsDelivered = 0;
      // True between a terminal event and the next RUN_STARTED (a stream may hold several runs).
      let runEnded = false;
      let attemptsWithoutProgress = 0;

      const deliver = (frames: Uint8Array[]) => {
        if (frames.length === 0 || closed) return;
        let total = 0;
        for (const frame of frames) total += frame.length + FRAME_END.length;
        const out = new Uint8Array(total);
        let at = 0;
        for (const frame of frames) {
          out.set(frame, at);
          out.set(FRAME_END, at + frame.length);
          at += frame.length + FRAME_END.length;
        }
        subscriber.next(dataEvent(out));
      };

      // Notes what resuming needs from one whole frame, which is then delivered as it is
      // (frames without data, such as `: keepalive`, too: the parser skips them).
      const decoder = new TextDecoder("utf-8");
      const takeFrame = (frame: Uint8Array) => {
        const info = readFrame(decoder.decode(frame));
        // An empty `id:` resets the last event id (SSE standard): nothing to resume from.
        if (info.id !== undefined) this.lastEventId = info.id === "" ? undefined : info.id;
        if (!info.hasData) return;
        const type = eventType(info.data);
        if (type === "RUN_STARTED") runEnded = false;
        else if (type === "RUN_FINISHED" || type === "RUN_ERROR") runEnded = true;
        eventsDelivered += 1;
      };

      // Streams one response's body; resolves with the error that ended it, or undefined for EOF.
      const pump = async (response: Response): Promise<{ failure?: unknown; progressed: boolean }> => {
        let progressed = false;
        const body = response.body;
        if (!body) return { failure: new Error("Failed to getReader() from response"), progressed };
        reader = body.getReader();
        let pending: Uint8Array = new Uint8Array(0);
        try {
          for (;;) {
            const { done, value } = await reader.read();
            if (done) break;
            if (closed) return { progressed };
            const searchFrom = pending.length - 1;
            pending = concat(pending, value);
            const frames: Uint8Array[] = [];
            let start = 0;
            let end = indexOfFrameEnd(pending, searchFrom);
            while (end >= 0) {
              const frame = pending.subarray(start, end);
              takeFrame(frame);
              frames.push(frame);
              progressed = true;
              start = end + FRAME_END.length;
              end = indexOfFrameEnd(pending, start);
            }
            pending = pending.slice(start);
            deliver(frames);
          }
        } catch (error) {
          return { failure: error, progressed };
        } finally {
          reader = undefined;
        }
        // The body ended without a blank line after its last frame. @ag-ui/client parses such a
        // tail; it is taken as a whole event only if its data is complete JSON, since a cut
        // connection leaves exactly such a tail with half an event in it.
        if (pending.length > 0) {
          const info = readFrame(decoder.decode(pending));
          if (info.hasData && eventType(info.data) !== undefined) {
            takeFrame(pending);
            progressed = true;
            deliver([pending]);
          }
        }
        return { progressed };
      };

      const attempt = async () => {
        for (;;) {
          let failure: unknown;
          let progressed = false;
          let response: Response | undefined;
          const resumeFrom = this.lastEventId;
          try {
            response = await this.fetch(url, {
              ...init,
              headers: resumeFrom === undefined ? init.headers : withLastEventId(init.headers, resumeFrom),
              signal: local.signal,
            });
          } catch (error) {
            failure = error;
          }
          if (closed) return;
          if (response) {
            if (!response.ok) {
              subscriber.error(await httpStatusError(response));
              return;
            }
            if (!headersSent) {
              headersSent = true;
              subscriber.next(headersEvent(response));
              if (response.headers.get("content-type") === AGUI_PROTO_MEDIA_TYPE) {
                await passThrough(response);
                return;
              }
            }
            ({ failure, progressed } = await pump(response));
            if (closed) return;
          }

          if (external?.aborted) {
            subscriber.error(failure ?? abortError(external));
            return;
          }
          if (runEnded && follows === "run") {
            // Everything up to the terminal event arrived; a drop after it loses nothing.
            subscriber.complete();
            return;
          }
          // Events without ids cannot be asked for again: behave as HttpAgent does.
          if (eventsDelivered > 0 && this.lastEventId === undefined) {
            if (failure !== undefined) subscriber.error(failure);
            else subscriber.complete();
            return;
          }
          attemptsWithoutProgress = progressed ? 1 : attemptsWithoutProgress + 1;
          if (attemptsWithoutProgress > this.maxReconnects) {
            const why = failure === undefined ? "the stream ended" : `the connection failed (${String(failure)})`;
            const before = follows === "run" ? "before the run finished" : "while following the thread";
            subscriber.error(
              new Error(
                `${why} ${before}, and ${this.maxReconnects} reconnect(s) in a row brought nothing new` +
                  (this.lastEventId === undefined ? "" : ` (last event id ${this.lastEventId})`),
                { cause: failure },
              ),
            );
            return;
          }
          const delay = Math.min(this.reconnectDelayMs * 2 ** (attemptsWithoutProgress - 1), MAX_RECONNECT_DELAY_MS);
          try {
            this.onReconnecting?.({ delayMs: delay, attempt: attemptsWithoutProgress, lastEventId: this.lastEventId });
            await sleep(delay, local.signal);
          } catch (error) {
            if (!closed) subscriber.error(error);
            return;
          }
          if (closed) return;
        }
      };

      // The protobuf transport as HttpAgent reads it: raw bytes, no resuming.
      const passThrough = async (response: Response) => {
        const body = response.body;
        if (!body) {
          subscriber.error(new Error("Failed to getReader() from response"));
          return;
        }
        reader = body.getReader();
        try {
          for (;;) {
            const { done, value } = await reader.read();
            if (done || closed) break;
            subscriber.next(dataEvent(value));
          }
          subscriber.complete();
        } catch (error) {
          subscriber.error(error);
        }
      };

      attempt().catch((error) => {
        if (!closed) subscriber.error(error);
      });

      return () => {
        closed = true;
        external?.removeEventListener("abort", forwardAbort);
        reader?.cancel().catch(() => undefined);
        if (!local.signal.aborted) local.abort();
      };
    });
  }
}


// Threads a person can list and delete (the gateway's GET /v1/threads and
// DELETE /v1/threads/{thread}): a chat page's sidebar of conversations, and "delete this one".

/** The latest turn's status of a listed thread. */
export type ThreadStatus = "running" | "waiting" | "succeeded" | "failed" | "cancelled";

/** Where the gateway is and who asks: shared by `listThreads()` and `deleteThread()`. */
export interface GatewayRequestOptions {
  /** The gateway's origin (and path prefix, if it is served under one), e.g. `https://agents.example.com`. */
  baseUrl: string;
  /** The tenant (`?tenant=`); the gateway's default is `default`. */
  tenant?: string;
  /** Sent with the request, e.g. `{ Authorization: \`Bearer ${token}\` }`. */
  headers?: HeadersInit;
  /** A `fetch` to use instead of the global one. */
  fetch?: typeof fetch;
  signal?: AbortSignal;
}

export interface ListThreadsOptions extends GatewayRequestOptions {
  /** Threads per page, 1 to 200; the gateway's default is 50. */
  limit?: number;
  /** The previous page's `nextCursor`. */
  cursor?: string;
  /** Only threads whose latest turn ran this agent. */
  agent?: string;
  /** Only threads whose latest turn is in this status. */
  status?: ThreadStatus;
}

/** One thread as the list shows it. */
export interface ThreadSummary {
  id: string;
  /** The agent of the latest turn. */
  agent: string;
  status: ThreadStatus;
  /** The first user message, on one line and cut to about 80 characters; present only for a
   * caller holding `threads:content`. */
  title?: string;
  /** ISO 8601. */
  createdAt: string;
  /** The latest activity (a turn started, waited or ended), ISO 8601. */
  updatedAt: string;
}

/** One page of threads, newest activity first; `nextCursor` is null on the last page. */
export interface ThreadPage {
  threads: ThreadSummary[];
  nextCursor: string | null;
}

function gatewayUrl(options: GatewayRequestOptions, path: string, query: Record<string, string | number | undefined>): string {
  const url = new URL(`${options.baseUrl.replace(/\/+$/, "")}${path}`);
  if (options.tenant !== undefined) url.searchParams.set("tenant", options.tenant);
  for (const [name, value] of Object.entries(query)) {
    if (value !== undefined) url.searchParams.set(name, String(value));
  }
  return url.toString();
}

/**
 * One page of the caller's threads (`GET /v1/threads`): those the caller may read, newest
 * activity first. Pass the page's `nextCursor` as `cursor` for the next one. An error status
 * rejects with the same error `HttpAgent` raises (`status`, and the gateway's JSON body as
 * `payload`).
 */
export async function listThreads(options: ListThreadsOptions): Promise<ThreadPage> {
  const doFetch = options.fetch ?? fetch;
  const url = gatewayUrl(options, "/v1/threads", {
    limit: options.limit,
    cursor: options.cursor,
    agent: options.agent,
    status: options.status,
  });
  const response = await doFetch(url, { method: "GET", headers: options.headers, signal: options.signal });
  if (!response.ok) throw await httpStatusError(response);
  const body = (await response.json()) as { threads: ThreadSummary[]; next_cursor: string | null };
  return { threads: body.threads, nextCursor: body.next_cursor ?? null };
}

/**
 * Erases a thread with everything the gateway stored for it (`DELETE /v1/threads/{thread}`).
 * A turn of it that runs or waits is cancelled first; the promise settles once the thread is
 * gone. Rejects with `status` 409 (`payload.error.code` `turn_in_progress`) when that turn did
 * not end in time, and 403 for a thread the caller may not erase or that does not exist.
 */
export async function deleteThread(threadId: string, options: GatewayRequestOptions): Promise<void> {
  const doFetch = options.fetch ?? fetch;
  const url = gatewayUrl(options, `/v1/threads/${encodeURIComponent(threadId)}`, {});
  const response = await doFetch(url, { method: "DELETE", headers: options.headers, signal: options.signal });
  if (!response.ok) throw await httpStatusError(response);
  await response.body?.cancel();
}

/** The alternatives of one user message of a branch: "‹ index / count ›". */
export interface MessageAlternatives {
  messageId: string;
  /** The branch's turn this message started. */
  turn: string;
  /** Its place among the alternatives, from 1. */
  index: number;
  count: number;
  /** Every alternative, oldest first; `head` is the turn to open (`loadBranch({ turn })`) to
   * show that alternative as it was last continued. */
  turns: { turn: string; head: string }[];
}

/** A branch of a thread (`GET /v1/threads/{thread}/messages`). */
export interface Branch {
  /** The branch's last turn; null for a thread with no turn. */
  turn: string | null;
  /** Whether it is the thread's current branch. */
  current: boolean;
  messages: HttpAgent["messages"];
  alternatives: MessageAlternatives[];
}

/**
 * A branch of the thread: the current one, or the one ending at `turn` (an alternative's
 * `head`). Put its `messages` into the agent (`agent.setMessages(branch.messages)`) and the next
 * run goes on from that branch, which becomes the current one.
 */
export async function loadBranch(threadId: string, options: GatewayRequestOptions & { turn?: string }): Promise<Branch> {
  const doFetch = options.fetch ?? fetch;
  const url = gatewayUrl(options, `/v1/threads/${encodeURIComponent(threadId)}/messages`, { turn: options.turn });
  const response = await doFetch(url, { method: "GET", headers: options.headers, signal: options.signal });
  if (!response.ok) throw await httpStatusError(response);
  const body = (await response.json()) as Branch;
  return { turn: body.turn ?? null, current: body.current, messages: body.messages, alternatives: body.alternatives };
}
