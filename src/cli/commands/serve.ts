/**
 * `safekeep serve --upstream URL [--port 8080] [--host 127.0.0.1] [--judge-model M] [--judge-upstream URL]
 *    [--method safekeep|safejudge | --skills DIR[,DIR] [--no-guard-decision] [--mitigation recover|block]]
 *    [--api-key-env VAR] [--judge-api-key-env VAR] [--timeout-ms 60000] [--request-timeout-ms MS] [--prefill none|continue|prefix]
 *    [--unparseable unsafe|safe] [--judge-max-tokens 8]`
 * `safekeep serve --model DIR [--method base|safekeep|refusal-probe|safekeep+probe] [--probe FILE] [--max-tokens 256]
 *    [--thinking on|off] [--template FILE] [--dtype ..] [--device ..] [--threads N] [--max-memory ..] [--port ..] [--host ..]
 *    [--unparseable unsafe|safe] [--judge-max-tokens 8]`
 * The same API served by the local engine itself (src/serve/local.ts): the refusal probe reads the agent's own
 * prefill, so it guards without an extra model call; bounded by [--max-model-len N] [--max-queue N]
 * [--request-timeout-ms MS].
 * Both forms: [--client-key-env VAR] [--cors ORIGIN,…] [--allowed-hosts NAME,…] [--max-connections N]
 * [--headers-timeout-ms MS] [--body-timeout-ms MS] [--request-timeout-ms MS]; --host beyond loopback needs
 * --client-key-env (src/http/). --request-timeout-ms is one request's whole deadline (→ 504): for the proxy until its
 * answer begins, judge retries included (default 2 × --timeout-ms); for the local engine the whole answer (10 min).
 *
 * The --upstream form: an OpenAI-compatible proxy applying the SafeKeep guard — or, with `--skills`, S³ stage-specific skills at every stage
 * (input, tool observations, tool calls, final answer) — in front of any chat-completions endpoint
 * (see src/serve/proxy.ts). One JSON log line per request (and per S³ stage decision) on stderr. Stops on
 * SIGINT/SIGTERM. Keys: `--api-key-env` for the upstream (else the client's own header is forwarded),
 * `--judge-api-key-env` for a separate judge host (which never receives the client's header).
 */
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { basename } from 'node:path';
import { choiceValue, numberValue, parseArgs, positiveIntValue, requireValue, type FlagTable, type ParsedArgs } from '../args.ts';
import { THINKING_FLAG_DEFS, thinkingOptions } from '../thinking-flags.ts';
import { ENGINE_FLAG_DEFS } from '../engine-flag-defs.ts';
import { SafekeepError } from '../../util/errors.ts';
import { ENDPOINT_JUDGE_METHODS, METHOD_TABLE, TABLE_METHODS } from '../../guard/methods.ts';
import type { GuardMethod } from '../../guard/types.ts';
import { checkUpstreamUrl, createGuardProxy, PASS_UNJUDGED, UNGUARDED_ENDPOINTS, type PassUnjudged, type UnguardedEndpoint } from '../../serve/proxy.ts';
import { hostName, hostParts, isLoopbackHost } from '../../http/policy.ts';
import { redactUrl } from '../../http/upstream.ts';
import type { ServerLimits } from '../../http/server.ts';
import type { Sae } from '../../sae/types.ts';
import type { PrefillMode } from '../../chat/openai.ts';
import { loadSkills, skillDirsFromFlag } from '../../s3/skill-file.ts';
import { requireChecks } from '../../s3/guard.ts';
import { repoRoot } from '../../data/locate.ts';
import { apiKeyFromEnv, hubEnv } from '../env.ts';

export const summary = 'OpenAI-compatible proxy: the SafeKeep guard, or S³ skills at every stage, in front of an endpoint';

export const flags: FlagTable = {
  usage: 'serve (--upstream URL | --model DIR) [flags]',
  flags: [
    { name: 'upstream', value: 'URL', help: 'OpenAI-compatible endpoint to guard' },
    { name: 'port', value: 'P', default: '8080', help: 'listen port (0 = any free port)' },
    { name: 'host', value: 'H', default: '127.0.0.1', help: 'listen address' },
    { name: 'judge-model', value: 'NAME', help: 'model name for the judge call (required with --upstream: the judge is the server\'s choice, never the client\'s)' },
    { name: 'judge-upstream', value: 'URL', default: '--upstream', help: 'endpoint of the judge' },
    { name: 'method', value: 'METHOD', default: 'safekeep', help: `upstream: ${ENDPOINT_JUDGE_METHODS.join('|')} (judge with prose specs or JSON schemas); --model: ${TABLE_METHODS.join('|')}` },
    { name: 'skills', value: 'DIR[,DIR]', help: 'S³: skill folders (or names under skills/) checked at every stage; excludes --method' },
    { name: 'no-guard-decision', boolean: true, help: 'S³: run every skill that passes its filter (no guard-agent pick)' },
    { name: 'mitigation', value: 'recover|block', default: 'recover', help: 'S³: recover (strip/replace, let the task go on) or block (end with a refusal)' },
    { name: 'api-key-env', value: 'VAR', help: 'environment variable holding the upstream API key (else the client\'s own header is forwarded)' },
    { name: 'judge-api-key-env', value: 'VAR', help: 'environment variable holding the judge host\'s key (never the client\'s header)' },
    { name: 'timeout-ms', value: 'MS', default: '60000', help: 'upstream timeout: the wait for an answer\'s headers, then each wait between two chunks of it (a stalled stream ends with an SSE error event)' },
    { name: 'client-key-env', value: 'VAR', help: 'environment variable holding the key clients must send (Authorization: Bearer …); required to listen beyond loopback' },
    { name: 'cors', value: 'ORIGIN[,ORIGIN]', help: 'browser origins allowed to call the server (default: cross-origin requests refused)' },
    { name: 'allowed-hosts', value: 'NAME[,NAME]', help: 'Host names served besides localhost/127.0.0.1/[::1] while bound to loopback (DNS-rebinding check)' },
    { name: 'allow-unguarded', value: 'completions,responses', help: 'upstream: forward these endpoints unjudged (default: 404 — the guard cannot judge them)' },
    { name: 'pass-unjudged', value: 'no-tools', help: 'let chat requests without a "tools" field through unjudged, logged as unjudged (default: every request is judged — a prompted agent describes its tools in its messages)' },
    { name: 'max-connections', value: 'N', default: '256', help: 'connections served at once (over it an idle keep-alive one is closed, else 503 with Retry-After)' },
    { name: 'headers-timeout-ms', value: 'MS', default: '10000', help: 'a request\'s headers must arrive within this' },
    { name: 'body-timeout-ms', value: 'MS', default: '60000', help: 'a whole request (headers and body) must arrive within this' },
    { name: 'prefill', value: 'none|continue|prefix', default: 'none', help: 'how the judge verdict is prefilled' },
    { name: 'unparseable', value: 'unsafe|safe', default: 'unsafe', help: 'verdict when the judge answer cannot be parsed' },
    { name: 'judge-max-tokens', value: 'N', default: '8', help: 'judge generation budget' },
    { name: 'model', value: 'DIR', help: 'serve the local engine itself instead of an upstream (guarded by --method; no --upstream)' },
    { name: 'probe', value: 'FILE|DIR', help: 'local: a probe file or the refusal-probe skill folder from safekeep probe train (--method refusal-probe, safekeep+probe; probe-cascade and probe-steer need one from probe train --calibrate)' },
    { name: 'max-tokens', value: 'N', default: '256', help: 'local: answer budget when the client gives none, and the most it may ask for (above → 400)' },
    { name: 'template', value: 'FILE', help: 'local: chat template file instead of the model folder\'s' },
    ...ENGINE_FLAG_DEFS.filter((f) => f.name !== 'model').map((f) => ({ ...f, help: `local: ${f.help}` })),
    { name: 'max-model-len', value: 'N', default: 'max_position_embeddings', help: 'local: context length; prompt + max_tokens above it → 400' },
    { name: 'max-queue', value: 'N', default: '8', help: 'local: requests admitted at once (running or waiting); more → 429' },
    { name: 'request-timeout-ms', value: 'MS', default: 'upstream: 2 × --timeout-ms; local: 600000', help: 'per-request deadline for the whole answer, judge/guard retries and a streamed answer included (→ 504, nothing executed; a begun stream ends with an SSE error event)' },
    { name: 'allow-interventions', boolean: true, help: 'local: accept the request fields "safekeep" and vllm-lens\'s "vllm_xargs" (per-request steering, interventions, activation capture; docs/serve-research.md); runs no guard (--method base)' },
    { name: 'directions', value: 'FILE.safetensors', help: 'local, with --allow-interventions: directions a request may name ("direction": "refusal.chatbot"; what reproduce writes)' },
    { name: 'max-capture-bytes', value: 'BYTES', default: '64MiB', help: 'local, with --allow-interventions: captured activations per response (more → 400 before generation)' },
    { name: 'max-hooks', value: 'N', default: '32', help: 'local, with --allow-interventions: hook points (captured, edited and SAEs) per request' },
    { name: 'sae', value: 'NAME=DIR[,NAME=DIR]', help: 'local, with --allow-interventions: sparse autoencoders a request may splice in by NAME with feature edits ("saes": [{"name", "edits"}]; never a path from the client)' },
    ...THINKING_FLAG_DEFS,
  ],
  example: 'serve --upstream http://localhost:8000/v1 --judge-model meta-llama/Llama-3.1-8B-Instruct --port 8080',
};

/** flags of the local-engine form only */
const LOCAL_ONLY = ['allow-interventions', 'directions', 'max-capture-bytes', 'max-hooks', 'sae', 'probe', 'max-tokens', 'template', 'dtype', 'device', 'kv-dtype', 'threads', 'max-memory', 'thinking', 'chat-template-kwargs', 'max-model-len', 'max-queue'];

const list = (v: string | undefined) => (v === undefined ? undefined : v.split(',').map((x) => x.trim()).filter(Boolean));

/** Who may connect, and the connection bounds: one reading for both forms. */
function accessFlags(args: ParsedArgs): { host: string; port: number; clientKey?: string; corsOrigins?: string[]; allowedHosts?: string[]; limits: ServerLimits } {
  const port = numberValue(args, 'port', 8080);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new SafekeepError(`--port must be 0..65535, got ${port}`);
  const host = args.values.get('host') ?? '127.0.0.1';
  const clientKey = apiKeyFromEnv('client-key-env', args.values.get('client-key-env'));
  if (!isLoopbackHost(host)) {
    if (clientKey === undefined) {
      throw new SafekeepError(`--host ${host} makes the server reachable from other machines, and anyone who reaches it runs the agent with its keys — give --client-key-env VAR (clients then send Authorization: Bearer <key>), or listen on 127.0.0.1`);
    }
    process.stderr.write(`safekeep serve: WARNING: listening on ${host}, beyond loopback; clients must send the client key, but the connection is plain HTTP — put TLS in front of it\n`);
  }
  const corsOrigins = list(args.values.get('cors'));
  for (const o of corsOrigins ?? []) {
    if (!/^https?:\/\/[^/\s]+$/.test(o)) throw new SafekeepError(`--cors: '${o}' is not an origin (scheme://host[:port], no path)`);
  }
  const limits: ServerLimits = {
    maxConnections: positiveIntValue(args, 'max-connections', 256),
    headersTimeoutMs: positiveIntValue(args, 'headers-timeout-ms', 10_000),
    requestTimeoutMs: positiveIntValue(args, 'body-timeout-ms', 60_000),
  };
  const allowedHosts = list(args.values.get('allowed-hosts'));
  for (const h of allowedHosts ?? []) {
    // compared with the Host header's parsed name: a value with a port or malformed would never match
    if (hostParts(h)?.port !== undefined || hostName(h) === null) throw new SafekeepError(`--allowed-hosts: '${h.slice(0, 100)}' is not a host name (a DNS name or a bracketed IPv6 literal, no port)`);
  }
  return { host, port, clientKey, corsOrigins, allowedHosts, limits };
}


export async function run(argv: string[]): Promise<number> {
  const args = parseArgs(argv, flags);
  if (args.values.has('model')) return serveLocal(args);
  for (const f of LOCAL_ONLY) {
    if (args.values.has(f) || args.booleans.has(f)) throw new SafekeepError(`--${f} applies to serve --model DIR (the local engine), not to the --upstream proxy`);
  }
  const skillsFlag = args.values.get('skills');
  if (skillsFlag !== undefined && args.values.has('method')) throw new SafekeepError('give --method or --skills, not both (--method safekeep = the safekeep-judge skill alone)');
  if (skillsFlag === undefined && (args.values.has('mitigation') || args.booleans.has('no-guard-decision'))) {
    throw new SafekeepError('--mitigation and --no-guard-decision need --skills DIR');
  }
  const skills = skillsFlag !== undefined ? loadSkills(skillDirsFromFlag(skillsFlag, repoRoot)) : undefined;
  if (skills) requireChecks(skills);
  const upstream = requireValue(args, 'upstream');
  for (const f of ['upstream', 'judge-upstream']) {
    const u = args.values.get(f);
    if (u !== undefined) checkUpstreamUrl(u, `--${f}`);
  }
  const access = accessFlags(args);
  const unguarded = list(args.values.get('allow-unguarded')) ?? [];
  const timeoutMs = positiveIntValue(args, 'timeout-ms', 60_000);
  for (const u of unguarded) {
    if (!(UNGUARDED_ENDPOINTS as readonly string[]).includes(u)) throw new SafekeepError(`--allow-unguarded: unknown endpoint '${u}' (one of ${UNGUARDED_ENDPOINTS.join(', ')})`);
  }
  const server = createGuardProxy({
    clientKey: access.clientKey,
    corsOrigins: access.corsOrigins,
    allowedHosts: access.allowedHosts,
    limits: access.limits,
    unguarded: unguarded as UnguardedEndpoint[],
    passUnjudged: passUnjudgedFlag(args),
    upstream,
    judgeUpstream: args.values.get('judge-upstream'),
    judgeModel: args.values.get('judge-model') ?? '',
    method: choiceValue(args, 'method', ENDPOINT_JUDGE_METHODS, 'safekeep'),
    apiKey: apiKeyFromEnv('api-key-env', args.values.get('api-key-env')),
    judgeApiKey: apiKeyFromEnv('judge-api-key-env', args.values.get('judge-api-key-env')),
    skills,
    guardDecision: !args.booleans.has('no-guard-decision'),
    mitigation: choiceValue(args, 'mitigation', ['recover', 'block'] as const, 'recover') === 'block' ? 'block' : 'skill',
    timeoutMs,
    requestTimeoutMs: positiveIntValue(args, 'request-timeout-ms', 2 * timeoutMs),
    prefill: choiceValue<PrefillMode>(args, 'prefill', ['none', 'continue', 'prefix'], 'none'),
    onUnparseable: choiceValue(args, 'unparseable', ['unsafe', 'safe'] as const, 'unsafe'),
    judgeMaxTokens: positiveIntValue(args, 'judge-max-tokens', 8),
  });
  await listenUntilStopped(server, access.host, access.port, `${redactUrl(upstream)}${skills ? ` (S³ skills: ${skills.map((s) => `${s.name}@${s.stage}`).join(', ')})` : ''}`);
  return 0;
}

async function listenUntilStopped(server: Server, host: string, port: number, target: string): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', (e: NodeJS.ErrnoException) => reject(new SafekeepError(`cannot listen on ${host}:${port}: ${e.code ?? e.message}`)));
    server.listen(port, host, () => resolve());
  });
  const addr = server.address() as AddressInfo;
  process.stdout.write(`safekeep serve: http://${host}:${addr.port}/v1 → ${target}\n`);
  await new Promise<void>((resolve) => {
    const stop = () => server.close(() => resolve());
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  });
}

type LocalMethod = GuardMethod;
type OpenedEngine = Awaited<ReturnType<typeof import('../engine-flags.ts').openEngine>>;
type ProbeGuardT = import('../../guard/probe.ts').ProbeGuard;

/** `--pass-unjudged KIND[,KIND]`: the kinds of chat request an operator lets through unjudged (none by default). */
function passUnjudgedFlag(args: ParsedArgs): PassUnjudged[] {
  const kinds = list(args.values.get('pass-unjudged')) ?? [];
  for (const k of kinds) {
    if (!(PASS_UNJUDGED as readonly string[]).includes(k)) throw new SafekeepError(`--pass-unjudged: unknown kind '${k}' (one of ${PASS_UNJUDGED.join(', ')})`);
  }
  return kinds as PassUnjudged[];
}

/** serve --model's flags that decide what it serves: the guard method, or research fields with no guard at all. */
function localMethod(args: ParsedArgs): { method: LocalMethod; allowInterventions: boolean } {
  for (const f of ['upstream', 'judge-upstream', 'judge-model', 'api-key-env', 'judge-api-key-env', 'timeout-ms', 'prefill', 'skills', 'mitigation', 'no-guard-decision', 'allow-unguarded']) {
    if (args.values.has(f) || args.booleans.has(f)) throw new SafekeepError(`--${f} applies to the --upstream proxy, not to serve --model DIR`);
  }
  // --allow-interventions serves research requests (a client's steering vector is a jailbreak tool): no guard at all,
  // so a guard method with it is refused rather than silently switched off
  const allowInterventions = args.booleans.has('allow-interventions');
  if (!allowInterventions) {
    for (const f of ['directions', 'max-capture-bytes', 'max-hooks', 'sae']) if (args.values.has(f)) throw new SafekeepError(`--${f} needs --allow-interventions`);
  } else {
    const m = args.values.get('method');
    if (m !== undefined && m !== 'base') throw new SafekeepError(`--allow-interventions runs no guard (a request's steering vector could undo any guard): it serves --method base only, not --method ${m}`);
    if (args.values.has('probe')) throw new SafekeepError('--probe guards requests; --allow-interventions runs no guard');
  }
  const method: GuardMethod = allowInterventions ? 'base' : choiceValue(args, 'method', TABLE_METHODS, 'safekeep');
  if (METHOD_TABLE[method].probe !== null && args.values.get('probe') === undefined) {
    throw new SafekeepError(`--method ${method} needs --probe FILE (safekeep probe train writes results/<model>/probe/agent.schema.<kind>.json)`);
  }
  return { method, allowInterventions };
}

/** --probe: a probe file, or a refusal-probe skill folder (SKILL.md with check: probe; probe train writes one). */
async function skillProbe(probeFile: string | undefined): Promise<{ probe?: ProbeGuardT; fileToCheck?: string; label: string }> {
  const { existsSync, statSync, readFileSync } = await import('node:fs');
  const { join } = await import('node:path');
  if (probeFile === undefined) return { label: '' };
  if (!existsSync(probeFile) || !statSync(probeFile).isDirectory()) return { fileToCheck: probeFile, label: '' };
  const { loadSkill } = await import('../../s3/skill-file.ts');
  const { probeGuardFromSkill } = await import('../../s3/checks/probe.ts');
  const skill = loadSkill(probeFile);
  if (skill.check !== 'probe' || skill.stage !== 'input') throw new SafekeepError(`${join(probeFile, 'SKILL.md')}: serve --model --probe needs an input-stage skill with check: probe (got ${skill.stage}/${skill.check})`);
  const j = JSON.parse(readFileSync(skill.probe!.direction, 'utf8')) as { format?: string };
  return { probe: probeGuardFromSkill(skill), fileToCheck: j.format === 'safekeep-probe' ? skill.probe!.direction : undefined, label: `skill ${skill.name} ℓ=${skill.probe!.layer}` };
}

/** The probe the method reads, checked against this model and its method's calibration before the server starts. */
async function serveProbe(given: Awaited<ReturnType<typeof skillProbe>>, method: LocalMethod, engine: OpenedEngine, modelDir: string): Promise<{ probe?: ProbeGuardT; label: string }> {
  const { ProbeGuard } = await import('../../guard/probe.ts');
  const { readProbe, checkProbeFits } = await import('../../data/probe-file.ts');
  const { loadCheckpoint } = await import('../../checkpoint/load.ts');
  let { probe, label } = given;
  const { fileToCheck } = given;
  if (fileToCheck !== undefined) {
    const p = readProbe(fileToCheck);
    const ckpt = await loadCheckpoint(modelDir);
    checkProbeFits(p, { configHash: ckpt.configHash, numLayers: engine.numLayers, dModel: engine.dModel });
    // the cascade and the steering read the calibration in the probe file itself (a skill carries none)
    probe = METHOD_TABLE[method].probe === 'cascade' || METHOD_TABLE[method].probe === 'steer' ? new ProbeGuard(p) : probe ?? new ProbeGuard(p);
    label ||= `probe ${p.kind} ℓ=${p.layer}`;
  }
  if (probe && (probe.probe.dModel !== engine.dModel || probe.probe.layer > engine.numLayers)) {
    throw new SafekeepError(`--probe: d_model ${probe.probe.dModel}, layer ${probe.probe.layer} do not fit this model (d_model ${engine.dModel}, ${engine.numLayers} layers)`);
  }
  // a probe without the calibration its method reads is refused before the server starts
  if (METHOD_TABLE[method].probe === 'cascade') label += ` band [${probe!.cascade().low.toPrecision(4)}, ${probe!.cascade().high.toPrecision(4)}]`;
  if (METHOD_TABLE[method].probe === 'steer') label += ` α=${probe!.steering().alpha.toPrecision(4)}`;
  return { probe, label };
}

/** --allow-interventions: the research field's shapes and bounds for this model, --directions by name. */
async function researchOptions(args: ParsedArgs, engine: OpenedEngine, saes: Map<string, Sae> | undefined): Promise<import('../../serve/research.ts').ResearchOptions> {
  const { parseBytes } = await import('../../engine/runtime/memory.ts');
  const L = engine.numLayers;
  const d = engine.dModel;
  const directions = new Map<string, Float32Array>();
  const dirFile = args.values.get('directions');
  if (dirFile !== undefined) {
    const { readDirectionsFile } = await import('../../experiments/directions-file.ts');
    for (const [name, dir] of readDirectionsFile(dirFile).directions) {
      if (dir.layers !== L + 1 || dir.d !== d) throw new SafekeepError(`--directions ${dirFile}: '${name}' is [${dir.layers}, ${dir.d}], this model needs [${L + 1}, ${d}]`);
      directions.set(name, Float32Array.from(dir.data));
    }
  }
  if (saes) (await import('../serve-saes.ts')).checkServerSaes(saes, L, d);
  return {
    numLayers: L, hiddenSize: d, numHeads: engine.config.numHeads, headDim: engine.config.headDim, directions,
    ...(saes ? { saes } : {}),
    maxHooks: positiveIntValue(args, 'max-hooks', 32),
    maxCaptureBytes: args.values.has('max-capture-bytes') ? parseBytes(args.values.get('max-capture-bytes')!, '--max-capture-bytes') : 64 * 2 ** 20,
  };
}

/** The model's context length: max_position_embeddings, or a smaller --max-model-len. */
async function contextLengthOf(modelDir: string, flag: number | undefined): Promise<number> {
  const { readFileSync } = await import('node:fs');
  const { join } = await import('node:path');
  const { parseModelConfig } = await import('../../checkpoint/config.ts');
  const { parseJsonBounded } = await import('../../util/json-bounded.ts');
  const modelLen = parseModelConfig(parseJsonBounded(readFileSync(join(modelDir, 'config.json'), 'utf8'), join(modelDir, 'config.json')), null).maxPositionEmbeddings;
  if (flag !== undefined && flag > modelLen) throw new SafekeepError(`--max-model-len ${flag} is above the model's max_position_embeddings ${modelLen}`);
  return flag ?? modelLen;
}

/** `serve --model DIR`: the local engine behind the same API, guarded by guardedRespond. */
async function serveLocal(args: ParsedArgs): Promise<number> {
  const { method, allowInterventions } = localMethod(args);
  const access = accessFlags(args);
  const defaultMaxTokens = positiveIntValue(args, 'max-tokens', 256);
  const judgeMaxTokens = positiveIntValue(args, 'judge-max-tokens', 8);
  const maxQueue = positiveIntValue(args, 'max-queue', 8);
  const requestTimeoutMs = positiveIntValue(args, 'request-timeout-ms', 600_000);
  const maxModelLenFlag = args.values.has('max-model-len') ? positiveIntValue(args, 'max-model-len', 1) : undefined;
  const { openEngine } = await import('../engine-flags.ts');
  const { loadPromptTokenizer } = await import('../../prompts/tokenizer.ts');
  const { resolveModel } = await import('../../hub/resolve.ts');
  const { localBackend } = await import('../backend.ts');
  const { createLocalServer } = await import('../../serve/local.ts');
  const { resolve } = await import('node:path');
  const modelDir = await resolveModel(requireValue(args, 'model'), hubEnv());
  const given = await skillProbe(args.values.get('probe'));
  const template = args.values.get('template');
  const tokenizer = await loadPromptTokenizer(modelDir, { template });
  // the SAEs before the engine: a --max-memory plan counts the process's resident bytes
  const saeFlag = args.values.get('sae');
  const saes = saeFlag === undefined ? undefined : await (await import('../serve-saes.ts')).openServerSaes(saeFlag);
  const engine = await openEngine(args);
  try {
    const { probe, label: probeLabel } = await serveProbe(given, method, engine, modelDir);
    const { resolveTemplateKwargs } = await import('../../prompts/thinking.ts');
    const th = thinkingOptions(args);
    // default: thinking off where the template has the switch (as guard eval)
    const backend = localBackend(args, engine, tokenizer, resolveTemplateKwargs(tokenizer.template, th.thinking, th.chatTemplateKwargs).kwargs);
    const { countTokensUpTo } = await import('../../serve/context-length.ts');
    const contextLength = await contextLengthOf(modelDir, maxModelLenFlag);
    const research = allowInterventions ? await researchOptions(args, engine, saes) : undefined;
    const server = createLocalServer({
      backend, method, modelName: basename(modelDir), passUnjudged: passUnjudgedFlag(args),
      ...(research ? { research } : {}),
      // /v1/completions where no guard runs (the server routes it for method base only)
      rawPrompts: { encode: (t) => tokenizer.encode(t), decode: (ids) => tokenizer.decode([...ids], { skipSpecial: false }), vocabSize: engine.vocabSize },
      ...(probe ? { probe } : {}),
      defaultMaxTokens,
      maxTokensLimit: defaultMaxTokens,
      judgeMaxTokens,
      onUnparseable: choiceValue(args, 'unparseable', ['unsafe', 'safe'] as const, 'unsafe'),
      contextLength,
      vocabSize: engine.vocabSize,
      // the ids the call will run with (client text plain); a rendering far past the context is counted in chunks
      countPromptTokens: (call, limit) => {
        const text = backend.renderCall(call);
        if (text.length <= Math.max(4096, limit * 8)) return { tokens: backend.promptIds(call).length, exact: true };
        return countTokensUpTo(text, (t) => tokenizer.encode(t).length, limit);
      },
      maxQueue,
      requestTimeoutMs,
      clientKey: access.clientKey,
      corsOrigins: access.corsOrigins,
      allowedHosts: access.allowedHosts,
      limits: access.limits,
      hidden: [modelDir, ...(template !== undefined ? [template, resolve(template)] : [])],
    });
    await listenUntilStopped(server, access.host, access.port, `${modelDir} (local engine, guard ${method}${probe ? `, ${probeLabel}` : ''}${research ? `, research fields allowed: per-request steering, interventions, capture${saes ? `, SAEs ${[...saes.keys()].join(', ')}` : ''}` : ''})`);
  } finally {
    await engine.dispose();
  }
  return 0;
}
