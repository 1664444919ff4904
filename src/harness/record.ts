/**
 * A recording view of a chat backend: every call made through it is kept (the messages it saw, the tools offered,
 * the reply), so the runner can log a sample's calls without the system under test knowing. The underlying backend
 * is shared — its response cache, concurrency limit and batching stay one — and the view answers exactly as it does.
 */
import type { ChatBackend, ChatCall, ChatReply } from '../chat/types.ts';
import type { CallLog } from './log.ts';

export class RecordingBackend implements ChatBackend {
  readonly calls: CallLog[] = [];
  readonly name: string;
  readonly callFormat: ChatBackend['callFormat'];
  readonly activations?: boolean;

  constructor(private readonly inner: ChatBackend) {
    this.name = inner.name;
    this.callFormat = inner.callFormat;
    if (inner.activations !== undefined) this.activations = inner.activations;
  }

  async chat(call: ChatCall): Promise<ChatReply> {
    const reply = await this.inner.chat(call);
    this.calls.push(callLog(call, reply));
    return reply;
  }
}

export function callLog(call: ChatCall, reply: ChatReply): CallLog {
  return {
    purpose: call.purpose,
    messages: call.messages.map((m) => ({ ...m })),
    tools: (call.tools ?? []).map((t) => t.function.name),
    ...(call.prefix !== undefined ? { prefix: call.prefix } : {}),
    content: reply.content,
    toolCalls: reply.toolCalls,
    promptTokens: reply.promptTokens,
    completionTokens: reply.completionTokens,
    latencyMs: reply.latencyMs,
    cached: reply.cached,
    finish: reply.finish,
  };
}

/**
 * One recorder per backend role of a sample (agent, judge/guard): the same inner backend gives the same view, so a
 * sample whose agent and guard share one model logs each call once, in the order made.
 */
export class SampleRecorder {
  private readonly views = new Map<ChatBackend, RecordingBackend>();
  private readonly order: CallLog[] = [];

  view<B extends ChatBackend>(b: B): ChatBackend {
    let v = this.views.get(b);
    if (!v) {
      const rec = new RecordingBackend(b);
      const push = rec.chat.bind(rec);
      rec.chat = async (call) => {
        const r = await push(call);
        this.order.push(rec.calls[rec.calls.length - 1]!);
        return r;
      };
      v = rec;
      this.views.set(b, v);
    }
    return v;
  }

  get calls(): CallLog[] {
    return [...this.order];
  }
}
