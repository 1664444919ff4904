/**
 * One request's model call on `serve --model`, shared by /v1/chat/completions and /v1/completions: run within the
 * request's deadline and cancelled when its client leaves, failing closed (a 500 that names nothing internal, or an
 * error event once a stream began); a research call (steering, interventions, capture, log probabilities: method
 * base only) goes straight to the backend, no guard in its path; a live stream sends each piece of text with its
 * tokens' log probabilities; the captured activations in the response's shape for the dialect asked in.
 */
import { HttpError, capMessage } from '../http/errors.ts';
import type { Exchange } from '../http/server.ts';
import type { SseStream } from '../http/sse.ts';
import type { GuardedResponse } from '../guard/respond.ts';
import type { ChatBackend, ChatCall, OpenAiLogprob, ResearchCall, ResearchReply } from '../chat/types.ts';
import { activationsJson, type ResearchRequest } from './research.ts';
import type { GenerationEdits } from '../engine/types.ts';
import { lensActivations } from './vllm-lens.ts';

/**
 * A failure while the model ran (a step, the judge, the probe): the request fails closed — a 500 and no answer, the
 * other requests go on — and the client learns nothing internal (engine messages name files, devices, shapes); the
 * log line keeps the message.
 */
export function generationFailed(e: unknown, x: Exchange): HttpError {
  if (e instanceof HttpError) return e;
  x.entry.internal = capMessage(String((e as Error)?.message ?? e), 300);
  return new HttpError(500, 'internal_error', `generation failed (request ${x.id}); the server log has the details`);
}

/** Fail a request whose SSE stream may have started: before the first chunk the error is the status; after it an error event. */
export function failLive(x: Exchange, live: SseStream | null, err: HttpError): void {
  if (!live?.started) throw err;
  // the status line is gone: the stream ends with an error event and no [DONE]
  x.entry.status = err.status;
  live.fail(err.message, err.type);
}

/**
 * The call within the request's deadline (`deadlineMs`), cancelled when the client leaves; null when the request was
 * already answered (failed, timed out, cancelled).
 */
export async function callWithin(x: Exchange, live: SseStream | null, deadlineMs: number, run: (signal: AbortSignal) => Promise<GuardedResponse>): Promise<GuardedResponse | null> {
  const deadline = AbortSignal.timeout(deadlineMs);
  const signal = AbortSignal.any([x.signal, deadline]);
  let r: GuardedResponse | null = null;
  try {
    r = await run(signal);
  } catch (e) {
    // a backend may end a cancelled call by throwing: the cancellation is the answer then
    if (!signal.aborted) {
      failLive(x, live, generationFailed(e, x));
      return null;
    }
  }
  if (deadline.aborted) {
    failLive(x, live, new HttpError(504, 'timeout', `the request did not finish within ${deadlineMs} ms`));
    return null;
  }
  if (r === null || x.signal.aborted || r.reply.finish === 'cancelled') {
    x.entry.status = 499;
    x.entry.action = 'cancelled';
    if (live?.started) live.fail('cancelled', 'cancelled');
    return null;
  }
  return r;
}

/** The backend with every call tied to this request's signal. */
export function withSignal(b: ChatBackend, signal: AbortSignal): ChatBackend {
  return { name: b.name, callFormat: b.callFormat, activations: b.activations, chat: (c) => b.chat({ ...c, signal }) };
}

/** edits that change something */
export const hasEdits = (e: GenerationEdits | undefined): e is GenerationEdits => !!(e?.interventions?.length || e?.hooks?.length || e?.saes?.length);

/** A research call straight to the backend (method base: no guard runs, none is in its path). */
export async function researchRespond(backend: ChatBackend, call: ChatCall): Promise<GuardedResponse> {
  const reply = await backend.chat(call);
  return { method: 'base', judge: null, blocked: false, reply, agentMs: reply.latencyMs, cost: { judgeCalls: 0, guardTokens: 0, guardMs: 0 } };
}

/** A live SSE stream, and how many log-probability entries went out with its pieces (the rest go with its end). */
export interface Live {
  stream: SseStream;
  lpSent: number;
}

/** `ChatCall.onText` for a live stream: each piece with its tokens' log probabilities in the API's shape (`format`). */
export function liveText(live: Live, format: (entries: readonly OpenAiLogprob[]) => unknown): NonNullable<ChatCall['onText']> {
  return (delta, logprobs) => {
    live.stream.write(delta, logprobs?.length ? format(logprobs) : undefined);
    live.lpSent += logprobs?.length ?? 0;
  };
}

/**
 * The captured activations as the response carries them: vllm-lens's top-level `activations` (streamed: a data event
 * of its own before [DONE], where vllm-lens sends it), or our `safekeep.activations` (streamed: on the finish chunk).
 */
export function capturedBody(rq: ResearchRequest | null, lens: boolean, research: ResearchCall | undefined, reply: ResearchReply | undefined, d: number): { body: Record<string, unknown>; ownChunk: boolean } | null {
  if (!rq?.capture || !research?.capture || !reply) return null;
  if (lens) return { body: { activations: lensActivations(research.capture, reply, d) }, ownChunk: true };
  return { body: { safekeep: { activations: activationsJson(rq.capture, research.capture, reply, d) } }, ownChunk: false };
}
