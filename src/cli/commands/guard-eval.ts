/**
 * `safekeep guard eval (--model DIR | --endpoint URL --endpoint-model NAME) --bench agentharm|injecagent
 *    [--methods base,safejudge,safeprompt,safekeep] [--limit N] [--settings base,enhanced] [--data DIR]
 *    [--name NAME] [--out DIR] [--max-tokens 256] [--judge-max-tokens 8] [--unparseable unsafe|safe]
 *    [--concurrency 4] [--api-key-env VAR] [--timeout-ms 60000] [--retries 3] [--prefill none|continue|prefix]
 *    [--call-format llama3|qwen|mistral] [--no-cache] [--no-thinking] [--template FILE] [--dtype ..] [--device ..]
 *    [--threads ..] [--probe FILE]`
 * `--methods` may also name refusal-probe and safekeep+probe (local model and --probe FILE only; src/guard/README.md).
 * Table 4: Refusal/Acc on AgentHarm or Valid/ASR on InjecAgent per method, with n, 95 % Wilson intervals, judge
 * latency and judge-token overhead. Writes results/<name>/guard/table4-<bench>.{md,csv,json} and every output
 * with its label (outputs-<bench>.jsonl). Endpoint answers are cached on disk (re-runs cost nothing).
 * `--limit N` keeps the first N cases of each group (harmful/benign; setting × attack type).
 * Endpoints: structured `tool_calls` are the calls; `--call-format` names the native syntax of calls a server leaves
 * in `content` (default llama3). `--no-thinking` disables Qwen3 thinking (template kwarg / `chat_template_kwargs`);
 * a thinking judge needs a larger `--judge-max-tokens`, else its verdict is unparseable (→ unsafe by default).
 * An endpoint that still fails after the retries stops the run (exit 3); answers so far stay cached, so running the
 * same command again resumes where it stopped.
 */
import { basename, join, resolve } from 'node:path';
import { numberValue, parseArgs, requireValue, type ParsedArgs } from '../args.ts';
import { SafekeepError } from '../../util/errors.ts';
import { locateDataset, repoRoot } from '../../data/locate.ts';
import { agentHarmCases, injecAgentCases, type GuardBench, type GuardCase, type InjecSetting } from '../../guard/bench/cases.ts';
import { OpenAIBackend, type PrefillMode } from '../../guard/backends/openai.ts';
import { LocalBackend } from '../../guard/backends/local.ts';
import { runGuardEval, summarizeEval } from '../../guard/eval.ts';
import { markdownTable, writeGuardTables } from '../../guard/table.ts';
import { ALL_GUARD_METHODS, GUARD_METHODS, type ChatBackend, type GuardMethod } from '../../guard/types.ts';
import type { ProbeGuard } from '../../guard/probe.ts';
import type { CallFormat } from '../../experiments/outcome/types.ts';

export const summary = 'Table 4: guard methods on AgentHarm / InjecAgent (local model or endpoint)';

function list<T extends string>(flag: string, v: string, allowed: readonly T[]): T[] {
  const xs = v.split(',').map((s) => s.trim()).filter(Boolean);
  for (const x of xs) if (!(allowed as readonly string[]).includes(x)) throw new SafekeepError(`--${flag}: unknown '${x}' (known: ${allowed.join(', ')})`);
  if (xs.length === 0) throw new SafekeepError(`--${flag} is empty`);
  return xs as T[];
}

function oneOf<T extends string>(flag: string, v: string | undefined, allowed: readonly T[], fallback: T): T {
  return v === undefined ? fallback : list(flag, v, allowed)[0]!;
}

function positiveInt(args: ParsedArgs, flag: string, fallback: number): number {
  const n = numberValue(args, flag, fallback);
  if (!(Number.isInteger(n) && n >= 1) && n !== Infinity) throw new SafekeepError(`--${flag} must be a positive integer, got ${n}`);
  return n;
}

function progress(label: string): (done: number, total: number) => void {
  const t0 = performance.now();
  let last = 0;
  return (done, total) => {
    const now = performance.now();
    if (done !== total && now - last < 1000) return;
    last = now;
    const rate = done / ((now - t0) / 1000);
    const eta = rate > 0 ? (total - done) / rate : Infinity;
    process.stderr.write(`${label}: ${done}/${total} (${rate.toFixed(2)}/s, ETA ${Number.isFinite(eta) ? `${Math.ceil(eta)} s` : '?'})\n`);
  };
}

export async function run(argv: string[]): Promise<number> {
  const args = parseArgs(argv, {
    values: ['model', 'dtype', 'device', 'threads', 'template', 'endpoint', 'endpoint-model', 'bench', 'methods', 'limit', 'settings', 'data',
      'name', 'out', 'max-tokens', 'judge-max-tokens', 'unparseable', 'concurrency', 'api-key-env', 'timeout-ms', 'retries', 'prefill',
      'call-format', 'probe'],
    booleans: ['no-cache', 'no-thinking'],
  });
  const model = args.values.get('model');
  const endpoint = args.values.get('endpoint');
  if ((model === undefined) === (endpoint === undefined)) throw new SafekeepError('give exactly one of --model DIR or --endpoint URL');
  if (endpoint !== undefined && !/^https?:\/\/[^/]+/.test(endpoint)) throw new SafekeepError(`--endpoint must be an http(s) URL, got '${endpoint}'`);
  const bench = oneOf<GuardBench>('bench', requireValue(args, 'bench'), ['agentharm', 'injecagent'], 'agentharm');
  const methods = list<GuardMethod>('methods', args.values.get('methods') ?? GUARD_METHODS.join(','), ALL_GUARD_METHODS);
  const probeFile = args.values.get('probe');
  const probed = methods.filter((m) => m === 'refusal-probe' || m === 'safekeep+probe');
  if (probed.length > 0 && probeFile === undefined) throw new SafekeepError(`--methods ${probed.join(',')} need --probe FILE (safekeep probe train)`);
  if (probed.length > 0 && model === undefined) throw new SafekeepError(`--methods ${probed.join(',')} read the agent's hidden states: they need --model DIR, not --endpoint`);
  const limit = positiveInt(args, 'limit', Infinity);
  const endpointModel = endpoint !== undefined ? requireValue(args, 'endpoint-model') : '';
  const name = (args.values.get('name') ?? (model !== undefined ? basename(resolve(model)) : endpointModel)).replace(/[^\w.-]+/g, '_');
  const out = resolve(args.values.get('out') ?? join(repoRoot, 'results', name, 'guard'));
  const dataDir = resolve(args.values.get('data') ?? locateDataset(bench));
  const cases: GuardCase[] = bench === 'agentharm'
    ? agentHarmCases(dataDir, limit)
    : injecAgentCases(dataDir, list<InjecSetting>('settings', args.values.get('settings') ?? 'base,enhanced', ['base', 'enhanced']), limit);
  const noThinking = args.booleans.has('no-thinking');

  let backend: ChatBackend;
  let dispose = async () => {};
  let concurrency = 1;
  let probe: ProbeGuard | undefined;
  if (endpoint !== undefined) {
    concurrency = positiveInt(args, 'concurrency', 4);
    backend = new OpenAIBackend({
      baseUrl: endpoint,
      model: endpointModel,
      apiKeyEnv: args.values.get('api-key-env'),
      timeoutMs: numberValue(args, 'timeout-ms', 60_000),
      retries: numberValue(args, 'retries', 3),
      concurrency,
      cacheDir: args.booleans.has('no-cache') ? undefined : join(out, 'cache'),
      prefill: oneOf<PrefillMode>('prefill', args.values.get('prefill'), ['none', 'continue', 'prefix'], 'none'),
      callFormat: oneOf<CallFormat>('call-format', args.values.get('call-format'), ['llama3', 'qwen', 'mistral'], 'llama3'),
      ...(noThinking ? { extraBody: { chat_template_kwargs: { enable_thinking: false } } } : {}),
    });
  } else {
    const { openEngine } = await import('../../engine/cli-common.ts');
    const { loadPromptTokenizer } = await import('../../prompts/tokenizer.ts');
    const tokenizer = await loadPromptTokenizer(model!, { template: args.values.get('template') });
    const engine = await openEngine(args);
    dispose = () => engine.dispose();
    backend = new LocalBackend(engine, tokenizer, noThinking ? { templateKwargs: { enable_thinking: false } } : {});
    if (probeFile !== undefined) {
      const { readProbe, checkProbeFits } = await import('../../experiments/probe/file.ts');
      const { loadCheckpoint } = await import('../../checkpoint/load.ts');
      const { ProbeGuard: Guard } = await import('../../guard/probe.ts');
      const p = readProbe(probeFile);
      checkProbeFits(p, { configHash: (await loadCheckpoint(resolve(model!))).configHash, numLayers: engine.numLayers, dModel: engine.dModel });
      probe = new Guard(p);
    }
  }
  try {
    process.stderr.write(`guard eval: ${cases.length} ${bench} cases × ${methods.join(',')} on ${backend.name}\n`);
    const rows = await runGuardEval(cases, {
      methods,
      backend,
      concurrency,
      maxTokens: positiveInt(args, 'max-tokens', 256),
      judgeMaxTokens: positiveInt(args, 'judge-max-tokens', 8),
      onUnparseable: oneOf('unparseable', args.values.get('unparseable'), ['unsafe', 'safe'] as const, 'unsafe'),
      onProgress: progress('guard eval'),
      ...(probe ? { probe } : {}),
    });
    const summaries = summarizeEval(bench, cases, rows, methods);
    const files = writeGuardTables(out, bench, name, summaries, rows, { backend: backend.name, data: dataDir, limit: Number.isFinite(limit) ? limit : null, cases: cases.length });
    process.stdout.write(markdownTable(bench, name, summaries));
    process.stdout.write(`\nwrote ${Object.values(files).join(', ')}\n`);
  } finally {
    await dispose();
  }
  return 0;
}
