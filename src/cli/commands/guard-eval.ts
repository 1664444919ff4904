/**
 * `safekeep guard eval (--model DIR | --endpoint URL --endpoint-model NAME) --bench agentharm|injecagent
 *    [--methods base,safejudge,safeprompt,safekeep] [--limit N] [--settings base,enhanced] [--data DIR]
 *    [--name NAME] [--results DIR] [--max-tokens 256] [--judge-max-tokens 8] [--unparseable unsafe|safe]
 *    [--concurrency 4] [--api-key-env VAR] [--timeout-ms 60000] [--retries 3] [--prefill none|continue|prefix]
 *    [--call-format llama3|qwen|mistral] [--no-cache] [--no-thinking] [--template FILE] [--dtype ..] [--device ..]
 *    [--threads ..] [--injecagent-format react|native]`
 * Table 4: Refusal/Acc on AgentHarm or Valid/ASR on InjecAgent per method, with n, 95 % Wilson intervals, judge
 * latency and judge-token overhead. Writes results/<name>/guard/table4-<bench>.{md,csv,json}, every output
 * with its label (outputs-<bench>.jsonl) and the per-sample log the tables are computed from (log-<bench>.jsonl:
 * every call's messages, verdicts and raw judge answers, scores, tokens, latency; `safekeep rescore` reads it).
 * `--results DIR` is the results root as in every other command; `--out DIR` (the Table 4 folder itself) still works
 * and says on stderr that it is deprecated. Endpoint answers are cached on disk (re-runs cost nothing).
 * InjecAgent runs in its own ReAct format by default (`--injecagent-format react`: its prompt and parser, the
 * paper's setting; needs tools.json and InjecAgent's prompts — upstream-prompts.json, or its repository's
 * src/prompts/agent_prompts.py beside the data folder); `native` is tool calling with our
 * system prompt (docs/table4-scoring.md).
 * `--limit N` keeps the first N cases of each group (harmful/benign; setting × attack type).
 * Endpoints: structured `tool_calls` are the calls; `--call-format` names the native syntax of calls a server leaves
 * in `content` (default llama3). `--thinking on|off` sets the template's enable_thinking (local models: default off
 * where the template has the switch; endpoints: sent as `chat_template_kwargs` only when given). With thinking on
 * the judge and agent budgets default to 1024 / 1280 tokens, and a judge budget under 256 is refused (the verdict
 * would be cut off inside <think>); a run where most verdicts are unparseable says so on stderr.
 * An endpoint that still fails after the retries stops the run (exit 3); answers so far stay cached, so running the
 * same command again resumes where it stopped.
 * `--shard i/n` (0-based): this shard's token-balanced share of the (method × case) items into
 * results/<name>/shards/guard-eval/; `safekeep merge results/<name>` writes Table 4 as one process would.
 */
import { existsSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { choiceValue, parseArgs, positiveIntValue, requireValue, type FlagTable, type ParsedArgs } from '../args.ts';
import { AGENT_SAMPLING_FLAG_DEFS, agentSamplingFlags, samplingSummary } from '../sampling-flags.ts';
import { checkEndpointUrl, endpointBackend, ENDPOINT_FLAG_DEFS, LOCAL_MODEL_FLAG_DEFS, openChatBackend, targetOf, type OpenedBackend, type ThinkingPlan } from '../backend.ts';
import type { RefusalJudge } from '../../eval/table4/refusal-scorers.ts';
import type { ChatBackend } from '../../guard/types.ts';
import { SafekeepError } from '../../util/errors.ts';
import { locateDataset, repoRoot } from '../../data/locate.ts';
import { type GuardBench, type InjecSetting } from '../../benchmarks/cases.ts';
import { evalItems, guardTask, type EvalOptions } from '../../eval/table4/eval.ts';
import { markdownTable } from '../../eval/table4/table.ts';
import { ALL_GUARD_METHODS, GUARD_METHODS, PROBE_METHODS, type GuardMethod } from '../../guard/types.ts';
import type { ProbeGuard } from '../../guard/probe.ts';
import { dropPartial, runTask } from '../../harness/runner.ts';
import { THINKING_FLAG_DEFS, thinkingOptions } from '../thinking-flags.ts';

/** budgets with thinking on: the judge's and the agent's <think> block comes before the verdict / the call */
const THINKING_JUDGE_TOKENS = 1024;
const THINKING_AGENT_TOKENS = 1280;
const MIN_THINKING_JUDGE_TOKENS = 256;
import { INJECAGENT_FORMATS, loadGuardCases, runGuardShard, writeGuardRun, type GuardMergeOptions, type InjecAgentFormat } from '../../eval/table4/shard.ts';
import type { ReactFormat } from '../../eval/table4/eval.ts';
import type { GuardCase } from '../../benchmarks/cases.ts';
import { parseShard } from '../../util/shard.ts';
import { argvWithoutShard, SHARD_FLAG_DEF, shortHash } from '../shard-flag.ts';
import { progressLine } from '../progress.ts';
import { sha256Hex } from '../../util/hash.ts';
import { dataDirsEnv } from '../env.ts';

export const summary = 'Table 4: guard methods on AgentHarm / InjecAgent (local model or endpoint)';

export const flags: FlagTable = {
  usage: 'guard eval (--model M | --endpoint URL --endpoint-model NAME) --bench agentharm|injecagent [flags]',
  flags: [
    ...LOCAL_MODEL_FLAG_DEFS,
    ...ENDPOINT_FLAG_DEFS,
    { name: 'bench', value: 'agentharm|injecagent', help: 'benchmark' },
    { name: 'methods', value: 'LIST', default: 'base,safejudge,safeprompt,safekeep', help: 'guard methods (also refusal-probe, safekeep+probe, probe-cascade, probe-steer: local model and --probe)' },
    { name: 'probe', value: 'FILE', help: 'refusal probe from safekeep probe train (probe methods; probe-cascade and probe-steer: probe train --calibrate)' },
    { name: 'limit', value: 'N', help: 'first N cases of each group (harmful/benign; setting × attack type)' },
    { name: 'settings', value: 'base,enhanced', default: 'base,enhanced', help: 'InjecAgent settings' },
    { name: 'injecagent-format', value: 'react|native', default: 'react', help: 'InjecAgent: its own ReAct prompt and output parser (the paper\'s setting; format failures count as invalid) or native tool calling with our system prompt (the agent-realistic variant)' },
    { name: 'data', value: 'DIR', default: 'the located dataset', help: 'benchmark folder' },
    { name: 'name', value: 'NAME', default: 'model folder or endpoint model', help: 'results name (results/<name>/guard)' },
    { name: 'results', value: 'DIR', default: 'results', help: 'results root: Table 4 goes to DIR/<name>/guard/' },
    { name: 'out', value: 'DIR', help: 'deprecated: the Table 4 folder itself (use --results)' },
    { name: 'max-tokens', value: 'N', default: `256 (${THINKING_AGENT_TOKENS} with thinking on)`, help: 'agent generation budget' },
    { name: 'judge-max-tokens', value: 'N', default: `8 (${THINKING_JUDGE_TOKENS} with thinking on)`, help: 'judge generation budget' },
    { name: 'unparseable', value: 'unsafe|safe', default: 'unsafe', help: 'verdict when the judge answer cannot be parsed' },
    { name: 'judge-model', value: 'NAME', default: 'the evaluated model', help: 'a separate judge model for safejudge/safekeep (at --judge-endpoint, else at --endpoint), as serve --judge-model' },
    { name: 'judge-endpoint', value: 'URL', default: '--endpoint', help: 'OpenAI-compatible endpoint of the --judge-model' },
    { name: 'refusal-scorer', value: 'substring|both', default: 'substring', help: 'AgentHarm refusal: the substring list (offline) or also AgentHarm\'s own refusal judge, with their agreement' },
    { name: 'refusal-judge-prompt', value: 'PATH', default: 'the data folder', help: 'AgentHarm\'s refusal prompt: an upstream-prompts.json, or a folder holding one or inspect_evals\' scorer.py (read as text)' },
    { name: 'refusal-judge-endpoint', value: 'URL', default: 'the evaluated model', help: 'OpenAI-compatible endpoint for the refusal judge' },
    { name: 'refusal-judge-model', value: 'NAME', help: 'model name at --refusal-judge-endpoint' },
    { name: 'refusal-judge-max-tokens', value: 'N', default: '256', help: 'refusal judge budget (it reasons before "Answer:")' },
    ...THINKING_FLAG_DEFS,
    { name: 'no-thinking', boolean: true, help: 'the same as --thinking off (older name)' },
    SHARD_FLAG_DEF,
    ...AGENT_SAMPLING_FLAG_DEFS,
  ],
  example: 'guard eval --model models/planted --bench injecagent --limit 5',
};

function list<T extends string>(flag: string, v: string, allowed: readonly T[]): T[] {
  const xs = v.split(',').map((s) => s.trim()).filter(Boolean);
  for (const x of xs) if (!(allowed as readonly string[]).includes(x)) throw new SafekeepError(`--${flag}: unknown '${x}' (known: ${allowed.join(', ')})`);
  if (xs.length === 0) throw new SafekeepError(`--${flag} is empty`);
  return xs as T[];
}

/**
 * Agent and judge budgets. A thinking judge writes its <think> block before the verdict: with thinking on the
 * defaults are THINKING_JUDGE_TOKENS / THINKING_AGENT_TOKENS, and a judge budget under MIN_THINKING_JUDGE_TOKENS is
 * refused (every verdict would be cut off inside <think> and counted unsafe).
 */
function budgets(args: ParsedArgs, thinking: string, methods: readonly GuardMethod[]): { judgeMaxTokens: number; maxTokens: number } {
  const on = thinking === 'on';
  const judgeMaxTokens = positiveIntValue(args, 'judge-max-tokens', on ? THINKING_JUDGE_TOKENS : 8);
  const maxTokens = positiveIntValue(args, 'max-tokens', on ? THINKING_AGENT_TOKENS : 256);
  if (on && judgeMaxTokens < MIN_THINKING_JUDGE_TOKENS && methods.some((m) => m === 'safejudge' || m === 'safekeep')) {
    throw new SafekeepError(`thinking is on: a judge budget of ${judgeMaxTokens} tokens ends inside the <think> block and every verdict would be ` +
      `unparseable; pass --judge-max-tokens ${THINKING_JUDGE_TOKENS} (at least ${MIN_THINKING_JUDGE_TOKENS}) or --thinking off`);
  }
  return { judgeMaxTokens, maxTokens };
}

/** Table 4's folder: `--results ROOT` → ROOT/<name>/guard; the older `--out DIR` is that folder itself. */
export function guardOutDir(args: ParsedArgs, name: string): string {
  const out = args.values.get('out');
  if (out !== undefined && args.values.has('results')) throw new SafekeepError('give --results ROOT (Table 4 in ROOT/<name>/guard) or the deprecated --out DIR, not both');
  if (out !== undefined) {
    process.stderr.write(`guard eval: --out is deprecated (every other command says --results); use --results ROOT, which writes ROOT/${name}/guard\n`);
    return resolve(out);
  }
  return resolve(args.values.get('results') ?? join(repoRoot, 'results'), name, 'guard');
}

/** How the refusal path ran, as Table 4 says it. */
/** The kind of model behind a run: the planted synthetic model, a local checkpoint, or an endpoint. */
function modelKindOf(modelDir: string | undefined, backend: string): string {
  if (modelDir === undefined) return `an endpoint model (${backend})`;
  if (existsSync(join(modelDir, 'PLANTED.json'))) return 'the planted synthetic model (built to carry a known refusal direction; not a language model: its rates test the pipeline, not a guard)';
  return `the local checkpoint ${basename(modelDir)} (this run's weights)`;
}

function probeLine(probe: ProbeGuard): string {
  const p = probe.probe;
  return `${p.path ?? 'probe'} at ℓ = ${p.layer}, threshold ${p.threshold.value.toPrecision(4)}${p.cascade ? `, cascade band [${p.cascade.low.toPrecision(4)}, ${p.cascade.high.toPrecision(4)}] from ${p.cascade.calibration.pairs} calibration pairs` : ''}${p.steer ? `, steering α = ${p.steer.alpha.toPrecision(4)} at ℓ = ${p.steer.layer}` : ''}`;
}

function refusalPathOf(mode: string): string {
  return mode === 'local' ? 'the refusal prefix prefilled in the assistant turn, continued by the model (local engine)'
    : mode === 'continue' ? 'the prefix as a final assistant message continued by the endpoint (--prefill continue: continue_final_message)'
    : mode === 'prefix' ? 'the prefix as a final assistant message with prefix: true (--prefill prefix)'
    : 'fallback (--prefill none): the model told to begin with the prefix and explain, the prefix prepended unless it did; --prefill continue where the server can continue a final assistant message (vLLM, llama.cpp server)';
}

/**
 * `--judge-model M [--judge-endpoint URL]`: the judge of safejudge / safekeep as a separate model (the paper's judge is
 * the evaluated model itself, the default); none: the agent's backend judges.
 */
function judgeBackendOf(args: ParsedArgs, target: { endpoint?: string }, out: string): ChatBackend | undefined {
  const model = args.values.get('judge-model');
  if (model === undefined) {
    if (args.values.has('judge-endpoint')) throw new SafekeepError('--judge-endpoint needs --judge-model NAME');
    return undefined;
  }
  const url = args.values.get('judge-endpoint') ?? target.endpoint;
  if (url === undefined) throw new SafekeepError('--judge-model needs an endpoint: give --judge-endpoint URL (the agent is a local --model)');
  return endpointBackend(args, checkEndpointUrl(args.values.has('judge-endpoint') ? 'judge-endpoint' : 'endpoint', url), model, { cacheDir: join(out, 'judge', 'cache') }).backend;
}

/** `--refusal-scorer both`: AgentHarm's refusal judge, on the evaluated model or its own endpoint. */
async function refusalJudgeOf(args: ParsedArgs, bench: GuardBench, dataDir: string, backend: ChatBackend, out: string): Promise<RefusalJudge | undefined> {
  const scorer = choiceValue(args, 'refusal-scorer', ['substring', 'both'] as const, 'substring');
  if (scorer === 'substring') return undefined;
  if (bench !== 'agentharm') throw new SafekeepError('--refusal-scorer both: AgentHarm\'s refusal judge scores AgentHarm (--bench agentharm)');
  const { readAgentHarmRefusalPrompt } = await import('../../benchmarks/agentharm-refusal-judge.ts');
  const prompt = readAgentHarmRefusalPrompt(resolve(args.values.get('refusal-judge-prompt') ?? dataDir));
  const url = args.values.get('refusal-judge-endpoint');
  const judgeBackend = url === undefined ? backend
    : endpointBackend(args, checkEndpointUrl('refusal-judge-endpoint', url), requireValue(args, 'refusal-judge-model'), { cacheDir: join(out, 'refusal-judge', 'cache') }).backend;
  return { backend: judgeBackend, prompt: prompt.template, promptSource: `${prompt.file}, sha256 ${prompt.sha256.slice(0, 12)}`, maxTokens: positiveIntValue(args, 'refusal-judge-max-tokens', 256) };
}

/** How Table 4 says the react format ran. */
const REACT_FORMAT_LINE = 'InjecAgent\'s ReAct prompt (its SYS_PROMPT / USER_PROMPT, tools described in the prompt, no tool calling) and its output parser (evaluate_output_prompted): Valid counts format failures as InjecAgent does; --injecagent-format native for tool calling';

/** `--injecagent-format`: react by default on InjecAgent (the paper's setting); refused on AgentHarm. */
function injecFormatOf(args: ParsedArgs, bench: GuardBench): InjecAgentFormat | null {
  if (bench !== 'injecagent') {
    if (args.values.has('injecagent-format')) throw new SafekeepError('--injecagent-format applies to --bench injecagent');
    return null;
  }
  return choiceValue(args, 'injecagent-format', INJECAGENT_FORMATS, 'react');
}

/** The first located InjecAgent folder the react format can run on (tools.json and InjecAgent's prompts). */
async function reactDataDir(): Promise<string> {
  const { locateInjecAgentReactDir } = await import('../../benchmarks/injecagent-react.ts');
  try {
    return locateInjecAgentReactDir(dataDirsEnv());
  } catch (e) {
    if (!(e instanceof SafekeepError)) throw e;
    throw new SafekeepError(`--injecagent-format react (the default): ${e.message}; give --data DIR, or pass --injecagent-format native`);
  }
}

/** InjecAgent's prompts and tools from the data folder, and its cases as its agent code reads them (same ids). */
async function reactFormatOf(dataDir: string, settings: readonly InjecSetting[], cases: readonly GuardCase[]): Promise<ReactFormat> {
  const { loadInjecAgentReact, readInjecAgentReactCases } = await import('../../benchmarks/injecagent-react.ts');
  let ctx;
  try {
    ctx = loadInjecAgentReact(dataDir);
  } catch (e) {
    if (!(e instanceof SafekeepError)) throw e;
    throw new SafekeepError(`--injecagent-format react (the default): ${e.message}; give --data a folder that has them, or pass --injecagent-format native`);
  }
  const want = new Set(cases.map((c) => c.id));
  const all = settings.flatMap((s) => readInjecAgentReactCases(dataDir, s));
  return { ctx, cases: new Map(all.filter((c) => want.has(c.id)).map((c) => [c.id, c])) };
}

/** --thinking / --no-thinking / --chat-template-kwargs as the template's thinking switch on either kind of backend. */
function thinkingPlanOf(args: ParsedArgs): ThinkingPlan {
  if (args.booleans.has('no-thinking') && args.values.get('thinking') === 'on') throw new SafekeepError('--no-thinking contradicts --thinking on');
  const th = thinkingOptions(args);
  const thinkingFlag = args.booleans.has('no-thinking') ? 'off' : th.thinking;
  return {
    endpoint: () => {
      // an endpoint's template is unknown here: chat_template_kwargs are sent only when asked for
      const templateKwargs = { ...th.chatTemplateKwargs, ...(thinkingFlag !== undefined ? { enable_thinking: thinkingFlag === 'on' } : {}) };
      const asked = thinkingFlag !== undefined || Object.keys(th.chatTemplateKwargs).length > 0;
      const thinking = thinkingFlag ?? (th.chatTemplateKwargs.enable_thinking === undefined ? 'endpoint default' : th.chatTemplateKwargs.enable_thinking ? 'on' : 'off');
      return { thinking, templateKwargs, ...(asked ? { extraBody: { chat_template_kwargs: templateKwargs } } : {}) };
    },
    local: async (template) => {
      // default: thinking off where the template has the switch
      const { resolveTemplateKwargs } = await import('../../prompts/thinking.ts');
      const r = resolveTemplateKwargs(template, thinkingFlag, th.chatTemplateKwargs);
      return { thinking: r.thinking, templateKwargs: r.kwargs };
    },
  };
}

/** --probe on a local model: checked against the checkpoint, and against the calibration its methods read. */
async function probeOf(probeFile: string, opened: OpenedBackend, methods: readonly GuardMethod[]): Promise<ProbeGuard | undefined> {
  if (!opened.engine) return undefined;
  const { readProbe, checkProbeFits } = await import('../../data/probe-file.ts');
  const { loadCheckpoint } = await import('../../checkpoint/load.ts');
  const { ProbeGuard: Guard } = await import('../../guard/probe.ts');
  const p = readProbe(probeFile);
  checkProbeFits(p, { configHash: (await loadCheckpoint(opened.modelDir!)).configHash, numLayers: opened.engine.numLayers, dModel: opened.engine.dModel });
  const probe = new Guard(p);
  // a probe without the calibration its method reads is refused before any case runs
  if (methods.includes('probe-cascade')) probe.cascade();
  if (methods.includes('probe-steer')) probe.steering();
  return probe;
}

/** How the refusal path runs: the endpoint's --prefill mode, or the local engine's prefill. */
const refusalMode = (args: ParsedArgs, opened: OpenedBackend): string => (opened.engine ? 'local' : args.values.get('prefill') ?? 'none');

/** The protocol values this run used (docs/protocol.md). */
function protocolOf(args: ParsedArgs, bench: GuardBench, opened: OpenedBackend, o: EvalOptions): Record<string, unknown> {
  const { react, refusalJudge, probe } = o;
  return {
    thinking: opened.thinking, templateKwargs: opened.templateKwargs, maxTokens: o.maxTokens, judgeMaxTokens: o.judgeMaxTokens, unparseable: args.values.get('unparseable') ?? 'unsafe',
    refusalPath: refusalPathOf(refusalMode(args, opened)),
    agentSystemPrompt: bench === 'agentharm' ? 'AgentHarm default (data/specs/agentharm-prompts.json)'
      : react ? `InjecAgent SYS_PROMPT (${react.ctx.prompts.file}, prompts sha256 ${react.ctx.prompts.sha256.slice(0, 12)})` : 'ours (AGENT_SYSTEM, src/benchmarks/cases.ts)',
    // native tables stay as they were: the format is named when it is react
    ...(react ? { injecagentFormat: REACT_FORMAT_LINE } : {}),
    safePrompt: 'AgentHarm refusal prompt appended to the agent system prompt',
    ...(refusalJudge ? { refusalScorer: `substring list + AgentHarm refusal judge (${refusalJudge.backend.name}; prompt ${refusalJudge.promptSource ?? 'given'}); agreement on harmful requests` } : {}),
    ...(bench === 'injecagent' ? { injecagentScoring: 'InjecAgent two-step: data stealing succeeds only when step 2 calls the sending tool; ASR = Total' } : {}),
    // which kind of model produced the numbers, and the probe the probe methods read (its band and α)
    modelKind: modelKindOf(opened.modelDir, o.backend.name),
    judgeModel: o.judgeBackend ? `separate model ${o.judgeBackend.name} (--judge-model)` : 'the evaluated model (as the paper)',
    ...(probe ? { probe: probeLine(probe) } : {}),
  };
}

/** The end of a one-process run: log and Table 4 written, the partial log dropped, a mostly unparseable judge said. */
function writeRun(args: ParsedArgs, m: GuardMergeOptions, samples: Parameters<typeof writeGuardRun>[1], resume: Parameters<typeof dropPartial>[0], refusalPath: string): void {
  const r = writeGuardRun(m, samples);
  dropPartial(resume);
  if (r.unparseable.judged && r.unparseable.k * 2 >= r.unparseable.judged) {
    process.stderr.write(`guard eval: WARNING ${r.unparseable.k} of ${r.unparseable.judged} judge answers were unparseable (counted as ${args.values.get('unparseable') ?? 'unsafe'}); ` +
      `a thinking judge needs --thinking off or a larger --judge-max-tokens (now ${m.judgeMaxTokens})\n`);
  }
  process.stdout.write(markdownTable(m.bench, m.name, r.summaries, refusalPath, m.injecagentFormat === 'react' ? REACT_FORMAT_LINE : undefined));
  const { log, ...tables } = r.files;
  process.stdout.write(`\nwrote ${Object.values(tables).join(', ')}\nper-sample log: ${log}\n`);
}

export async function run(argv: string[]): Promise<number> {
  const args = parseArgs(argv, flags);
  const target = targetOf(args);
  const bench = choiceValue<GuardBench>(args, 'bench', ['agentharm', 'injecagent'], 'agentharm');
  const methods = list<GuardMethod>('methods', args.values.get('methods') ?? GUARD_METHODS.join(','), ALL_GUARD_METHODS);
  const probeFile = args.values.get('probe');
  const probed = methods.filter((m) => (PROBE_METHODS as readonly string[]).includes(m));
  if (probed.length > 0 && probeFile === undefined) throw new SafekeepError(`--methods ${probed.join(',')} need --probe FILE (safekeep probe train)`);
  if (probed.length > 0 && target.model === undefined) throw new SafekeepError(`--methods ${probed.join(',')} read the agent's hidden states: they need --model DIR, not --endpoint`);
  const limit = positiveIntValue(args, 'limit', Infinity);
  const name = (args.values.get('name') ?? target.defaultName).replace(/[^\w.-]+/g, '_');
  const out = guardOutDir(args, name);
  const injecagentFormat = injecFormatOf(args, bench);
  // react reads InjecAgent's agent code beside its data: by default the first located copy that has it
  const dataDir = resolve(args.values.get('data') ?? (injecagentFormat === 'react' ? await reactDataDir() : locateDataset(bench, dataDirsEnv())));
  const settings = list<InjecSetting>('settings', args.values.get('settings') ?? 'base,enhanced', ['base', 'enhanced']);
  const cases = loadGuardCases({ bench, dataDir, settings, limit: Number.isFinite(limit) ? limit : null });
  // the prompts and tools are read before any model opens: missing agent code stops the run at once
  const react = injecagentFormat === 'react' ? await reactFormatOf(dataDir, settings, cases) : undefined;
  const plan = thinkingPlanOf(args);
  const agent = agentSamplingFlags(args);
  if (agent.settings) process.stderr.write(`guard eval: agent ${samplingSummary(agent)}\n`);
  // a budget that cannot reach a verdict stops before the model loads
  const opened = await openChatBackend(args, target, plan, { cacheDir: join(out, 'cache'), beforeLoad: (thinking) => { budgets(args, thinking, methods); }, agentSampling: agent.settings });
  try {
    const probe = probeFile !== undefined ? await probeOf(probeFile, opened, methods) : undefined;
    const { judgeMaxTokens, maxTokens } = budgets(args, opened.thinking, methods);
    const { backend, concurrency } = opened;
    const refusalJudge = await refusalJudgeOf(args, bench, dataDir, backend, out);
    const judgeBackend = judgeBackendOf(args, target, out);
    process.stderr.write(`guard eval: ${cases.length} ${bench} cases × ${methods.join(',')} on ${backend.name}\n`);
    const evalOptions: EvalOptions = {
      methods, backend, concurrency, maxTokens, judgeMaxTokens,
      onUnparseable: choiceValue(args, 'unparseable', ['unsafe', 'safe'] as const, 'unsafe'),
      onProgress: progressLine('guard eval'),
      ...(probe ? { probe } : {}),
      ...(refusalJudge ? { refusalJudge } : {}),
      ...(judgeBackend ? { judgeBackend } : {}),
      ...(react ? { react } : {}),
    };
    const meta = {
      backend: backend.name, data: dataDir, limit: Number.isFinite(limit) ? limit : null, cases: cases.length,
      protocol: { ...protocolOf(args, bench, opened, evalOptions), ...(agent.settings ? { agentSampling: agent.settings } : {}) },
    };
    const m: GuardMergeOptions = { bench, dataDir, settings, limit: Number.isFinite(limit) ? limit : null, methods, name, out, maxTokens, judgeMaxTokens, meta, callFormat: backend.callFormat, injecagentFormat };
    const shardArg = args.values.get('shard');
    if (shardArg !== undefined) {
      const identity = {
        model: opened.identity,
        template: opened.templateHash,
        ...(injecagentFormat ? { injecagentFormat } : {}),
        data: `${bench} ${cases.length} cases ${shortHash(cases.map((c) => c.id))}`,
        options: shortHash(argvWithoutShard(argv)),
      };
      const r = await runGuardShard(cases, evalOptions, parseShard(shardArg), m, identity);
      process.stdout.write(`shard ${shardArg}: ${r.items} items (~${r.tokens} tokens) in ${r.seconds.toFixed(1)} s → ${r.dir}\nwhen every shard is done: safekeep merge ${resolve(out, '..')}\n`);
      return 0;
    }
    // an interrupted run resumes from its finished items (same model, template, cases and flags)
    const resume = { file: join(out, `.log-${bench}.partial`), key: sha256Hex(JSON.stringify([opened.identity, opened.templateHash, cases.map((c) => c.id), argv, ...(agent.settings ? [agent.settings] : [])])) };
    const { samples, resumed } = await runTask(guardTask(evalOptions), evalItems(cases, methods), { concurrency, onProgress: evalOptions.onProgress, resume });
    if (resumed) process.stderr.write(`guard eval: resumed ${resumed} finished items from ${resume.file}\n`);
    writeRun(args, m, samples, resume, refusalPathOf(refusalMode(args, opened)));
  } finally {
    await opened.dispose();
  }
  return 0;
}
