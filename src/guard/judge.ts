/**
 * `judge(request, tools, backend, options)`: one chat call with the judgment context, no tools offered, a few
 * tokens of answer, strict YES/NO parsing (`verdict.ts`) and a policy for unparseable answers (default unsafe);
 * the call and its verdict are `askVerdict` (`verdict-call.ts`), shared with the S³ checks that ask an LLM.
 */
import type { ToolSpec } from '../data/types.ts';
import { flattenTools } from '../prompts/flatten.ts';
import { judgeMessages, type ToolView } from './judge-context.ts';
import type { ChatBackend, ChatCall, ChatMessage, Flattener, JudgeResult, UnparseablePolicy } from './types.ts';
import { askVerdict } from './verdict-call.ts';

export interface JudgeOptions {
  /** 'prose' = SafeKeep, 'json' = SafeJudge (default 'prose') */
  toolView?: ToolView;
  /** default: the prompts module's `flattenTools` */
  flatten?: Flattener;
  onUnparseable?: UnparseablePolicy;
  /** answer budget (default 8 tokens; thinking models need more) */
  maxTokens?: number;
  model?: string;
  authorization?: string;
  /** the caller no longer wants the verdict (a client that left) */
  signal?: AbortSignal;
  /** a server's request settings that carry client text (AgentRequest.settings): shown to the judge */
  settings?: Readonly<Record<string, unknown>>;
}

/** The judge's chat call for this request, unsent (a server checks its length against the context first). */
export function judgeCall(request: readonly ChatMessage[], tools: readonly ToolSpec[], options: JudgeOptions = {}): ChatCall {
  const messages = judgeMessages(
    { messages: [...request], tools: [...tools], ...(options.settings ? { settings: options.settings } : {}) },
    { toolView: options.toolView ?? 'prose', flatten: options.flatten ?? flattenTools },
  );
  return {
    messages,
    maxTokens: options.maxTokens ?? 8,
    purpose: 'judge',
    model: options.model,
    authorization: options.authorization,
    signal: options.signal,
  };
}

/**
 * @param request the agent conversation (system = role/instructions, user = request, tool = observations)
 * @param tools   the agent's tools (JSON schemas; shown to the judge as prose unless toolView = 'json')
 */
export async function judge(
  request: readonly ChatMessage[],
  tools: readonly ToolSpec[],
  backend: ChatBackend,
  options: JudgeOptions = {},
): Promise<JudgeResult> {
  const startedAt = performance.now();
  // a judge cut off by its caller judged nothing: no verdict (not an unparseable one, which would go on to a refusal)
  return askVerdict(backend, judgeCall(request, tools, options), {
    onUnparseable: options.onUnparseable,
    readFrom: 'answer',
    onCancelled: 'throw',
    startedAt,
  });
}
