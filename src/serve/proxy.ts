/**
 * `safekeep serve --upstream URL`: an OpenAI-compatible proxy that applies the guard in front of any upstream, as
 * handlers on the one HTTP core (`src/http/server.ts`: access policy, canonical paths, limits, JSON errors).
 *
 * Routes (everything else is 404, another method 405 — deny by default):
 * - `POST /v1/chat/completions`: judged (SafeKeep: prose tool view; or SafeJudge) — with or without `tools`: a
 *   prompted agent describes its tools in its messages (`passUnjudged: ['no-tools']` forwards tool-less requests
 *   unjudged, by the operator's choice, logged). SafeKeep's one decision path (`guard/decision.ts`): judged safe → the parsed request, re-serialised
 *   (never the client's bytes: what the judge read is what runs), is forwarded to the upstream's
 *   `/chat/completions` (streaming answers are piped as they arrive). Judged unsafe → the upstream is asked for a
 *   refusal (no tools, refusal prefix prefilled or the documented fallback, see `chat/openai.ts`) and the
 *   client gets a normal `chat.completion` — or, with `stream: true`, the same content as SSE.
 * - `GET /v1/models`: forwarded.
 * - `POST /v1/completions`, `POST /v1/responses`: 404 unless the operator names them in `unguarded` (then forwarded
 *   unjudged: the guard cannot read those formats' tool use, so opening them is a deliberate choice).
 * The upstream path is always the route's own (`/chat/completions`, `/models` …), never the client's spelling.
 *
 * Errors are JSON `{"error": {"message", "type", "param", "code", ...}}`: malformed body → 400, body too large →
 * 413, upstream unreachable or redirecting → 502, upstream 5xx → 502 (with `upstream_status`; its body is never
 * relayed), upstream 4xx → same status (its `error.message` only), upstream or judge timeout → 504, judge failure
 * → 502 (fail closed: nothing is executed).
 *
 * With `skills` (S³, `safekeep serve --skills DIR`): every chat completion goes through the S³ flow
 * (`proxy-s3.ts`). Credentials: who gets which key is `proxy-upstream.ts`'s; keys come resolved from the CLI,
 * never from the environment here.
 */
import type { Server } from 'node:http';
import { flattenTools } from '../prompts/flatten.ts';
import { SafekeepError } from '../util/errors.ts';
import { HttpError, badRequest } from '../http/errors.ts';
import type { AccessPolicy } from '../http/policy.ts';
import { createHttpServer, type Exchange, type Route, type ServerLimits } from '../http/server.ts';
import { hasCredentials, redactUrl } from '../http/upstream.ts';
import { canonicalBytes, parseChatRequest, type ChatRequest } from '../chat/body.ts';
import { SchemaBoundError } from '../prompts/flatten.ts';
import { BackendError, type PrefillMode } from '../chat/openai.ts';
import { safekeepDecision } from '../guard/decision.ts';
import { REFUSAL_PREFIX } from '../guard/prompts.ts';
import type { Flattener, GuardMethod, UnparseablePolicy } from '../guard/types.ts';
import { ENDPOINT_JUDGE_METHODS, METHOD_TABLE } from '../guard/methods.ts';
import type { CheckRegistry } from '../s3/check.ts';
import { StageCache } from '../s3/flow.ts';
import type { Skill } from '../s3/skill.ts';
import { sendCompletion } from './completion.ts';
import { chatS3 } from './proxy-s3.ts';
import { ProxyUpstreams } from './proxy-upstream.ts';

/** endpoints the guard cannot judge, served only when named (forwarded unjudged) */
export const UNGUARDED_ENDPOINTS = ['completions', 'responses'] as const;
export type UnguardedEndpoint = (typeof UNGUARDED_ENDPOINTS)[number];
/** kinds of chat request an operator may let through unjudged (`--pass-unjudged`) */
export const PASS_UNJUDGED = ['no-tools'] as const;
export type PassUnjudged = (typeof PASS_UNJUDGED)[number];

export interface ProxyOptions {
  /** upstream base URL, e.g. http://127.0.0.1:8000/v1 */
  upstream: string;
  /** judge endpoint base URL (default: the upstream) */
  judgeUpstream?: string;
  /**
   * the judge's model: the server's choice, never the client's (a client naming a weak model would pick its own
   * judge)
   */
  judgeModel: string;
  /** one of the method table's endpoint judge methods (`ENDPOINT_JUDGE_METHODS`: safekeep, safejudge); default safekeep */
  method?: GuardMethod;
  flatten?: Flattener;
  /** the upstream's key; when unset, the client's Authorization header is forwarded (unless `clientKey` is set) */
  apiKey?: string;
  /** the judge/guard upstream's key (default: none for a separate judge host) */
  judgeApiKey?: string;
  /** clients must send `Authorization: Bearer <clientKey>` */
  clientKey?: string;
  /** browser origins allowed (CORS); none = cross-origin requests refused */
  corsOrigins?: readonly string[];
  /** Host names served besides loopback names while bound to loopback */
  allowedHosts?: readonly string[];
  /** endpoints forwarded unjudged (default none: 404) */
  unguarded?: readonly UnguardedEndpoint[];
  /**
   * chat requests forwarded unjudged (default none: every request is judged). 'no-tools': a request without a
   * `tools` field — but a prompted agent (ReAct) describes its tools in its system prompt, so this is an explicit
   * choice, logged per request (`unjudged: "no-tools"`)
   */
  passUnjudged?: readonly PassUnjudged[];
  /** S³: skills of every stage (replaces `method`) */
  skills?: readonly Skill[];
  /** S³: the guard agent picks among filtered skills (default true) */
  guardDecision?: boolean;
  /** S³: 'block' = no recovery (default 'skill': each skill's own mitigation) */
  mitigation?: 'skill' | 'block';
  /** S³: extra check implementations (e.g. probe) */
  checks?: CheckRegistry;
  /** S³: upstream rounds after replaced tool calls (default 3) */
  maxRounds?: number;
  /** S³: guard checks of not-yet-seen tool results one request may cost (default 64; more → 400) */
  maxFreshObservations?: number;
  /** upstream timeout until response headers, then between two chunks of the body (default 60 s) */
  timeoutMs?: number;
  /**
   * one request from its arrival until its answer is complete — the judge or guard calls with all their retries, the
   * upstream call, a streamed answer to its last chunk (default 2 × timeoutMs); before the answer begins → 504,
   * nothing executed; after it, an SSE error event ends the stream
   */
  requestTimeoutMs?: number;
  /** retries of judge/refusal calls (default 2) */
  retries?: number;
  prefill?: PrefillMode;
  onUnparseable?: UnparseablePolicy;
  judgeMaxTokens?: number;
  refusalPrefix?: string;
  /** one JSON line per request (default: stderr) */
  log?: (line: string) => void;
  /** default 16 MiB (also `limits.maxBodyBytes`) */
  maxBodyBytes?: number;
  limits?: ServerLimits;
}

/** An upstream base URL the proxy can use without leaking anything: http(s), no credentials. */
export function checkUpstreamUrl(u: string, what: string): void {
  if (!/^https?:\/\/[^/]+/i.test(u)) throw new SafekeepError(`${what} must be an http(s) URL, got '${redactUrl(u)}'`);
  if (hasCredentials(u)) throw new SafekeepError(`${what}: credentials in the URL (user:password@) are not accepted — they would be sent and printed; put the key in an environment variable and name it with --api-key-env / --judge-api-key-env`);
}

/** A guard failure → the client's error (fail closed: nothing was executed). */
function guardFailed(what: string): (e: unknown) => never {
  return (e) => {
    // a tool schema the judge cannot be shown (beyond the flattener's bounds) is the client's error, found before any call
    if (e instanceof SchemaBoundError) throw badRequest(e.message);
    if (e instanceof BackendError) throw new HttpError(e.status === -1 ? 504 : 502, 'judge_error', `${what} failed, request not executed: ${e.message}`);
    throw e;
  };
}

/** SafeKeep / SafeJudge on one parsed request with tools: the decision, whose safe step forwards the canonical bytes. */
async function chatSafeKeep(x: Exchange, c: ChatRequest, model: string, up: ProxyUpstreams, opts: ProxyOptions): Promise<void> {
  const judgeOptions = {
    toolView: METHOD_TABLE[opts.method ?? 'safekeep'].judge ?? 'prose',
    flatten: opts.flatten ?? flattenTools,
    onUnparseable: opts.onUnparseable,
    maxTokens: opts.judgeMaxTokens,
    model: opts.judgeModel,
    authorization: up.judgeAuthFor(x.req),
    signal: x.signal,
  };
  const verdictSeen = (v: { verdict: string; unsafe: boolean; latencyMs: number; tokens: number }) =>
    Object.assign(x.entry, { verdict: v.verdict, unsafe: v.unsafe, judgeLatencyMs: Math.round(v.latencyMs), judgeTokens: v.tokens });
  // the judge is shown the parsed request (messages, tools, the settings that carry client text); the upstream gets
  // that request re-serialised — never the client's bytes
  const judged = { messages: c.messages, tools: c.tools, settings: c.settings };
  try {
    await safekeepDecision(judged, up.judgeBackend, judgeOptions, {
      run: (v) => {
        verdictSeen(v);
        x.entry.action = 'forward';
        return up.forward(x, '/chat/completions', 'POST', canonicalBytes(c.body), { 'x-safekeep-verdict': v.verdict, 'x-safekeep-action': 'forward' });
      },
      refuse: async (v) => {
        verdictSeen(v);
        x.entry.action = 'refuse';
        const r = await up.refusal(x, c.messages, model, c.maxTokens ?? 256);
        sendCompletion(x, c, model, r, { 'x-safekeep-verdict': v.verdict, 'x-safekeep-action': 'refuse' });
      },
    });
  } catch (e) {
    // a failure after the verdict (the upstream's) is already the client's error; only the judge's is mapped here
    if (x.entry.verdict !== undefined) throw e;
    guardFailed('guard judge')(e);
  }
}

export function createGuardProxy(opts: ProxyOptions): Server {
  checkUpstreamUrl(opts.upstream, '--upstream');
  if (opts.judgeUpstream !== undefined) checkUpstreamUrl(opts.judgeUpstream, '--judge-upstream');
  if (typeof opts.judgeModel !== 'string' || opts.judgeModel === '') throw new SafekeepError('the guard proxy needs its judge model (--judge-model): the judge is the server\'s choice, never the client\'s');
  if (opts.method !== undefined && !ENDPOINT_JUDGE_METHODS.includes(opts.method)) throw new SafekeepError(`the guard proxy judges with ${ENDPOINT_JUDGE_METHODS.join(' or ')}, not ${opts.method} (an endpoint reports no hidden states)`);
  const timeoutMs = opts.timeoutMs ?? 60_000;
  const up = new ProxyUpstreams({
    upstream: opts.upstream.replace(/\/+$/, ''), judgeUpstream: opts.judgeUpstream, judgeModel: opts.judgeModel, apiKey: opts.apiKey, judgeApiKey: opts.judgeApiKey,
    clientKey: opts.clientKey, timeoutMs, retries: opts.retries ?? 2, prefill: opts.prefill, refusalPrefix: opts.refusalPrefix ?? REFUSAL_PREFIX,
  });
  const log = opts.log ?? ((l: string) => process.stderr.write(`${l}\n`));
  const s3 = opts.skills && {
    skills: opts.skills, guardDecision: opts.guardDecision ?? true, mitigation: opts.mitigation ?? 'skill', checks: opts.checks, maxRounds: opts.maxRounds,
    maxFreshObservations: opts.maxFreshObservations, judgeModel: opts.judgeModel, onUnparseable: opts.onUnparseable, cache: new StageCache(), log,
  };

  async function chat(x: Exchange): Promise<void> {
    const c = parseChatRequest(await x.body());
    const model = typeof c.body.model === 'string' ? c.body.model : '';
    Object.assign(x.entry, { model, tools: c.tools.length, stream: c.stream, ...(c.legacyFunctions ? { functions: true } : {}) });
    // every request is judged (a prompted agent writes its tools into its messages), unless the operator lets
    // tool-less requests through by name
    const guarded = s3 !== undefined || c.tools.length > 0 || !opts.passUnjudged?.includes('no-tools');
    if (guarded && c.nonTextParts.length > 0) throw badRequest(`${c.nonTextParts[0]}: the guard reads text only and cannot judge this content part; send text`);
    if (s3) return chatS3(x, c, model, up, s3, guardFailed('S³ guard'));
    if (guarded) return chatSafeKeep(x, c, model, up, opts);
    // --pass-unjudged no-tools: still the parsed request, re-serialised, and the log says it went unjudged
    Object.assign(x.entry, { action: 'passthrough', unjudged: 'no-tools' });
    return up.forward(x, '/chat/completions', 'POST', canonicalBytes(c.body), { 'x-safekeep-action': 'passthrough', 'x-safekeep-verdict': 'skipped' });
  }

  const routes: Record<string, Route> = {
    'chat/completions': { methods: ['POST'], handle: chat },
    models: { methods: ['GET'], handle: (x) => { x.entry.action = 'passthrough'; return up.forward(x, '/models', 'GET', undefined, { 'x-safekeep-action': 'passthrough' }); } },
  };
  for (const name of opts.unguarded ?? []) {
    routes[name] = {
      methods: ['POST'],
      handle: async (x) => {
        const raw = await x.body();
        x.entry.action = 'passthrough-unguarded';
        return up.forward(x, `/${name}`, 'POST', raw, { 'x-safekeep-action': 'passthrough-unguarded' });
      },
    };
  }
  const policy: AccessPolicy = { clientKey: opts.clientKey, corsOrigins: opts.corsOrigins, allowedHosts: opts.allowedHosts };
  return createHttpServer({ routes, policy, limits: { deadlineMs: opts.requestTimeoutMs ?? 2 * timeoutMs, ...opts.limits, ...(opts.maxBodyBytes !== undefined ? { maxBodyBytes: opts.maxBodyBytes } : {}) }, log });
}
