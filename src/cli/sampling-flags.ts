/**
 * `--temperature --top-k --top-p --min-p --repetition-penalty --seed --samples` (generate, steer; guard eval and s3 eval
 * without --samples, for their agent's calls): flag-table rows and their parsing into the engine's SamplingSettings (engine/sample/settings.ts). Without
 * `--temperature` (or with 0) decoding is greedy as it always was; the filters then change nothing, so giving them
 * without a temperature is refused rather than silently ignored, as is `--samples` above 1 (greedy samples are
 * identical). Without `--seed` a sampled run draws one, which the caller reports.
 */
import { numberValue, positiveIntValue, type FlagDef, type ParsedArgs } from './args.ts';
import { SafekeepError } from '../util/errors.ts';
import { checkSampling, drawSeed, isGreedy, type SamplingNames, type SamplingSettings } from '../engine/sample/settings.ts';

/** the most samples per prompt a command takes (each is a full generation) */
export const MAX_SAMPLES = 1024;

export const SAMPLING_FLAG_DEFS: readonly FlagDef[] = [
  { name: 'temperature', value: 'T', default: '0 (greedy)', help: 'sample from softmax(logits / T); 0 = greedy' },
  { name: 'top-k', value: 'K', default: 'off', help: 'sample among the K most likely tokens (needs --temperature)' },
  { name: 'top-p', value: 'P', default: '1 (off)', help: 'sample among the most likely tokens holding probability P (needs --temperature)' },
  { name: 'min-p', value: 'P', default: '0 (off)', help: 'drop tokens less likely than P × the most likely one (needs --temperature)' },
  { name: 'repetition-penalty', value: 'R', default: '1 (off)', help: "HF's repetition penalty over the prompt's and generated ids (greedy too)" },
  { name: 'seed', value: 'S', default: 'drawn and reported', help: 'sampling seed (an integer); sample i of a prompt uses S + i' },
  { name: 'samples', value: 'K', default: '1', help: 'samples per prompt (needs --temperature); seeds S, S+1, …' },
];

/** guard eval / s3 eval: the agent's sampling (one answer per case; its judge stays greedy) */
export const AGENT_SAMPLING_FLAG_DEFS: readonly FlagDef[] = SAMPLING_FLAG_DEFS
  .filter((f) => f.name !== 'samples')
  .map((f) => ({ ...f, help: `agent: ${f.help.replace(/; sample i of a prompt uses S \+ i$/, '')}` }));

/**
 * The agent's sampling of an evaluation (every agent call with these settings and this seed), or none (greedy). A
 * sharded run must name its seed: every shard samples with the same one.
 */
export function agentSamplingFlags(a: ParsedArgs, draw: () => number = drawSeed): SamplingFlags {
  const f = samplingFlags(a, draw);
  if (f.seedDrawn && a.values.has('shard')) throw new SafekeepError('--shard with --temperature needs --seed: every shard must sample with the same seed');
  return f;
}

/** how errors name each setting: by its flag */
const FLAG_NAMES: SamplingNames = {
  temperature: '--temperature', topK: '--top-k', topP: '--top-p', minP: '--min-p', repetitionPenalty: '--repetition-penalty',
  frequencyPenalty: '--frequency-penalty', presencePenalty: '--presence-penalty', logitBias: '--logit-bias', seed: '--seed',
};

/** What the sampling flags resolve to: no settings = greedy, the default, exactly as before. */
export interface SamplingFlags {
  /** absent when no sampling flag was given */
  settings?: SamplingSettings;
  /** samples per prompt (1 unless --samples) */
  samples: number;
  /** whether the seed was drawn (not given): the caller reports it so the run can be replayed */
  seedDrawn: boolean;
}

/** `draw` supplies a seed when a sampled run names none (default: a fresh random one) */
export function samplingFlags(a: ParsedArgs, draw: () => number = drawSeed): SamplingFlags {
  const s: SamplingSettings = {};
  const num = (flag: string) => (a.values.has(flag) ? numberValue(a, flag) : undefined);
  const set = <K extends keyof SamplingSettings>(k: K, v: SamplingSettings[K] | undefined) => { if (v !== undefined) s[k] = v; };
  set('temperature', num('temperature'));
  set('topK', num('top-k'));
  set('topP', num('top-p'));
  set('minP', num('min-p'));
  set('repetitionPenalty', num('repetition-penalty'));
  set('seed', num('seed'));
  checkSampling(s, FLAG_NAMES);
  const samples = positiveIntValue(a, 'samples', 1);
  if (samples > MAX_SAMPLES) throw new SafekeepError(`--samples must be at most ${MAX_SAMPLES}, got ${samples}`);
  if (isGreedy(s)) {
    const filters = ['top-k', 'top-p', 'min-p', 'seed'].filter((f) => a.values.has(f));
    if (filters.length) throw new SafekeepError(`${filters.map((f) => `--${f}`).join(', ')} ${filters.length > 1 ? 'need' : 'needs'} --temperature above 0 (without it decoding is greedy)`);
    if (samples > 1) throw new SafekeepError('--samples above 1 needs --temperature above 0 (greedy samples are all the same answer)');
  }
  if (Object.keys(s).length === 0) return { samples, seedDrawn: false };
  const seedDrawn = !isGreedy(s) && s.seed === undefined;
  if (seedDrawn) s.seed = draw();
  if (s.seed !== undefined && !Number.isSafeInteger(s.seed + (samples - 1))) throw new SafekeepError(`--seed ${s.seed} + ${samples - 1} samples leaves the 53-bit integers`);
  return { settings: s, samples, seedDrawn };
}

/** one line for a run's stderr / summary: how it decoded (and the seed to replay it) */
export function samplingSummary(f: SamplingFlags): string {
  const s = f.settings;
  if (!s || isGreedy(s)) return s?.repetitionPenalty !== undefined ? `greedy, repetition penalty ${s.repetitionPenalty}` : 'greedy';
  const parts = [`temperature ${s.temperature}`];
  if (s.topK) parts.push(`top-k ${s.topK}`);
  if (s.topP !== undefined && s.topP < 1) parts.push(`top-p ${s.topP}`);
  if (s.minP) parts.push(`min-p ${s.minP}`);
  if (s.repetitionPenalty !== undefined && s.repetitionPenalty !== 1) parts.push(`repetition penalty ${s.repetitionPenalty}`);
  parts.push(`seed ${s.seed}${f.seedDrawn ? ' (drawn; --seed to replay)' : ''}`);
  if (f.samples > 1) parts.push(`${f.samples} samples per prompt`);
  return `sampled: ${parts.join(', ')}`;
}
