/**
 * The S³ proxy's chat handler (`serve --upstream --skills DIR`): every chat completion goes through the S³ flow
 * (`s3/flow.ts`) — the request, every tool result in the history, the upstream's tool calls and its final answer are
 * each checked by the skills of that stage and recovered (or blocked). Headers: `x-safekeep-action`
 * (forward | recover | refuse), `x-safekeep-stages` (`stage=action` per stage decision that had skills, in order),
 * `x-safekeep-risky`. One JSON log line per stage decision (`event: "stage"`), then the request line.
 */
import type { ToolSpec } from '../data/types.ts';
import type { Exchange } from '../http/server.ts';
import type { ChatRequest } from '../chat/body.ts';
import type { UnparseablePolicy } from '../guard/types.ts';
import type { CheckRegistry } from '../s3/check.ts';
import { s3ProxyFlow, type StageCache } from '../s3/flow.ts';
import type { Skill } from '../s3/skill.ts';
import { sendCompletion } from './completion.ts';
import type { ProxyUpstreams } from './proxy-upstream.ts';

export interface S3ProxyConfig {
  skills: readonly Skill[];
  guardDecision: boolean;
  mitigation: 'skill' | 'block';
  checks?: CheckRegistry;
  maxRounds?: number;
  maxFreshObservations?: number;
  judgeModel: string;
  onUnparseable?: UnparseablePolicy;
  /** decisions cached by content: a resent raw tool result is rewritten again without a new check */
  cache: StageCache;
  log: (line: string) => void;
}

type FlowResult = Awaited<ReturnType<typeof s3ProxyFlow>>;

/** One log line per stage decision, then the response headers that summarise them. */
function stageReport(x: Exchange, result: FlowResult, log: (line: string) => void): Record<string, string> {
  for (const { decision: d, changed, cached } of result.decisions) {
    log(JSON.stringify({
      ts: new Date().toISOString(), id: x.id, event: 'stage', stage: d.stage, triggered: d.triggered, filtered: d.filtered, picked: d.picked,
      guardAgent: d.guardAgent ? { raw: d.guardAgent.raw, unparseable: d.guardAgent.unparseable } : null,
      runs: d.runs.map((r) => ({ skill: r.skill, risky: r.result.risky, reason: r.result.reason, evidence: r.result.evidence })),
      action: d.action, changed, cached, tokens: cached ? 0 : d.tokens, ms: cached ? 0 : Math.round(d.latencyMs),
    }));
  }
  const shown = result.decisions.filter((d) => d.decision.triggered.length > 0).map((d) => `${d.decision.stage}=${d.decision.action}`);
  const risky = [...new Set(result.decisions.flatMap((d) => d.decision.risky))];
  const headers = {
    'x-safekeep-action': result.action,
    // a long history has one observation decision per tool result: the header stays bounded, and ASCII (a header
    // value outside Latin-1 is an exception after the upstream was called)
    'x-safekeep-stages': (shown.length > 64 ? [...shown.slice(0, 64), `... ${shown.length - 64} more`] : shown).join(',') || 'none',
    'x-safekeep-risky': risky.join(',') || 'none',
  };
  Object.assign(x.entry, { action: result.action, stages: headers['x-safekeep-stages'], risky, cachedStages: result.decisions.filter((d) => d.cached).length });
  return headers;
}

/** Run the S³ flow on one parsed request and answer it; `guardFailed` maps a guard failure to the client's error. */
export async function chatS3(x: Exchange, c: ChatRequest, model: string, up: ProxyUpstreams, cfg: S3ProxyConfig, guardFailed: (e: unknown) => never): Promise<void> {
  const maxTokens = c.maxTokens ?? 256;
  const judge = up.judgeBackend;
  let result: FlowResult;
  try {
    result = await s3ProxyFlow(c.messages, c.tools as ToolSpec[], {
      config: { skills: cfg.skills, guardDecision: cfg.guardDecision, mitigation: cfg.mitigation, checks: cfg.checks },
      settings: c.settings,
      // the guard's calls stop with the request (its deadline, a client that left)
      env: { backend: { name: judge.name, callFormat: judge.callFormat, chat: (call) => judge.chat({ ...call, signal: call.signal ?? x.signal }) }, model: cfg.judgeModel, authorization: up.judgeAuthFor(x.req), onUnparseable: cfg.onUnparseable },
      upstream: (m) => up.turn(x, c.body, m),
      refuse: (m) => up.refusal(x, m, model, maxTokens),
      maxRounds: cfg.maxRounds,
      maxFreshObservations: cfg.maxFreshObservations,
      cache: cfg.cache,
    });
  } catch (e) {
    return guardFailed(e);
  }
  const headers = stageReport(x, result, cfg.log);
  const finish = result.toolCalls.length ? 'tool_calls' : result.finish === 'tool_calls' ? 'stop' : result.finish;
  sendCompletion(x, c, model, { content: result.content, toolCalls: result.toolCalls, finish, promptTokens: result.usage.promptTokens, completionTokens: result.usage.completionTokens }, headers);
}
