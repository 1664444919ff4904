/**
 * `safekeep probe train --model M [--config agent --repr schema] [--kind mean-diff,logistic] [--layer auto|N]
 *    [--target 0.05] [--l2 1] [--out DIR] [--data pairs|agentharm|PATH] [--limit N] [--split-seed N] [--results DIR]
 *    [--dtype ..] [--device ..] [--threads N] [--template FILE]
 *    [--calibrate [--calibration-share 0.25] [--max-benign-flag 0.05] [--max-harmful-pass 0.05] [--steer-max-tokens 32]]`
 * Refusal probes from the activation cache (extracted when missing), fit on the extraction split only: the
 * difference-of-means direction (the paper's) and/or an L2 logistic probe on hidden[ℓ] at the last prompt token;
 * threshold = at most --target of benign extraction requests flagged. Writes results/<model>/probe/
 * <condition>.<kind>.{safetensors,json} (weights + provenance) and the `refusal-probe` S³ skill folder for the
 * mean-diff probe (or the one kind trained) under results/<model>/probe/skill/refusal-probe/.
 * --calibrate holds a calibration split out of the extraction pairs (the probe is fit on the rest) and stores in each
 * probe file the probe→judge cascade's band (guard method probe-cascade) and probe-steer's α, with their provenance
 * (src/experiments/probe/calibrate.ts).
 */
import { numberValue, parseArgs, type FlagTable } from '../args.ts';
import { RUN_FLAG_DEFS, runContextOptions } from '../run-flags.ts';
import { parseCondition } from '../../experiments/extract.ts';
import { PROBE_KINDS, type ProbeKind } from '../../data/probe-file.ts';
import { trainProbes } from '../../experiments/probe/train.ts';
import { SafekeepError } from '../../util/errors.ts';
import type { CalibrateOptions } from '../../experiments/probe/calibrate.ts';

export const summary = 'train refusal probes (mean-diff, L2 logistic) on cached activations, extraction split only';

export const flags: FlagTable = {
  usage: 'probe train --model M [--config agent --repr schema] [--kind mean-diff,logistic] [--layer auto|N] [flags]',
  flags: [
    ...RUN_FLAG_DEFS,
    { name: 'config', value: 'chatbot|+role|+instructions|agent|chatbot-long', default: 'agent', help: 'prompt configuration the probe reads' },
    { name: 'repr', value: 'schema|flattened|pseudoword', default: 'schema', help: 'tool representation (agent only)' },
    { name: 'kind', value: 'mean-diff,logistic', default: 'mean-diff,logistic', help: 'difference of means (the paper\'s) and/or L2 logistic regression' },
    { name: 'layer', value: 'auto|N', default: 'auto', help: 'hidden index ℓ; auto = 5-fold CV of the mean difference on the extraction split' },
    { name: 'target', value: 'P', default: '0.05', help: 'threshold: at most this share of benign extraction requests flagged' },
    { name: 'l2', value: 'λ', default: '1', help: 'logistic: L2 strength 1/C on standardised features' },
    { name: 'out', value: 'DIR', default: 'results/<model>/probe', help: 'output folder (probe files + skill/refusal-probe)' },
    { name: 'calibrate', boolean: true, help: 'hold out a calibration split: cascade band (probe-cascade) and steering α (probe-steer) stored in the probe file' },
    { name: 'calibration-share', value: 'P', default: '0.25', help: '--calibrate: share of the extraction pairs held out for calibration' },
    { name: 'max-benign-flag', value: 'P', default: '0.05', help: '--calibrate: share of benign calibration requests the cascade\'s probe may refuse alone (the band\'s top)' },
    { name: 'max-harmful-pass', value: 'P', default: '0.05', help: '--calibrate: share of harmful calibration requests that may run unjudged (the band\'s bottom)' },
    { name: 'steer-max-tokens', value: 'N', default: '32', help: '--calibrate: new tokens of each steered calibration answer' },
  ],
  example: 'probe train --model models/planted --limit 40',
};

export async function run(argv: string[]): Promise<number> {
  const a = parseArgs(argv, flags);
  const config = a.values.get('config') ?? 'agent';
  const repr = a.values.get('repr');
  if (repr !== undefined && config !== 'agent') throw new SafekeepError('--repr only applies to --config agent');
  const condition = parseCondition(config === 'agent' ? `agent.${repr ?? 'schema'}` : config);
  const kinds = (a.values.get('kind') ?? 'mean-diff,logistic').split(',').map((s) => s.trim()).filter(Boolean);
  for (const k of kinds) if (!(PROBE_KINDS as readonly string[]).includes(k)) throw new SafekeepError(`--kind: unknown '${k}' (known: ${PROBE_KINDS.join(', ')})`);
  if (kinds.length === 0) throw new SafekeepError('--kind is empty');
  const layerArg = a.values.get('layer') ?? 'auto';
  const layer = layerArg === 'auto' ? 'auto' : Number(layerArg);
  if (layer !== 'auto' && !Number.isInteger(layer)) throw new SafekeepError(`--layer must be auto or an integer, got '${layerArg}'`);
  const target = numberValue(a, 'target', 0.05);
  if (!(target >= 0 && target < 1)) throw new SafekeepError(`--target must be in [0, 1), got ${target}`);
  const l2 = numberValue(a, 'l2', 1);
  if (!(l2 > 0)) throw new SafekeepError(`--l2 must be > 0, got ${l2}`);
  const out = a.values.get('out');
  const calibrateFlags = ['calibration-share', 'max-benign-flag', 'max-harmful-pass', 'steer-max-tokens'].filter((f) => a.values.has(f));
  if (!a.booleans.has('calibrate') && calibrateFlags.length) throw new SafekeepError(`--${calibrateFlags[0]} needs --calibrate`);
  let calibrate: CalibrateOptions | undefined;
  if (a.booleans.has('calibrate')) {
    const share = numberValue(a, 'calibration-share', 0.25);
    if (!(share > 0 && share < 1)) throw new SafekeepError(`--calibration-share must be in (0, 1), got ${share}`);
    const maxBenignFlag = numberValue(a, 'max-benign-flag', 0.05);
    if (!(maxBenignFlag >= 0 && maxBenignFlag < 1)) throw new SafekeepError(`--max-benign-flag must be in [0, 1), got ${maxBenignFlag}`);
    const maxHarmfulPass = numberValue(a, 'max-harmful-pass', 0.05);
    if (!(maxHarmfulPass >= 0 && maxHarmfulPass < 1)) throw new SafekeepError(`--max-harmful-pass must be in [0, 1), got ${maxHarmfulPass}`);
    const steerMaxTokens = numberValue(a, 'steer-max-tokens', 32);
    if (!(Number.isInteger(steerMaxTokens) && steerMaxTokens >= 1)) throw new SafekeepError(`--steer-max-tokens must be a positive integer, got ${steerMaxTokens}`);
    calibrate = { share, maxBenignFlag, maxHarmfulPass, steerMaxTokens };
  }
  const trained = await trainProbes({ ...(await runContextOptions(a)), condition, kinds: kinds as ProbeKind[], layer, target, l2, ...(out ? { out } : {}), ...(calibrate ? { calibrate } : {}) });
  for (const { path, probe: p, skill } of trained) {
    const t = p.threshold;
    process.stdout.write(`${p.kind} probe on ${p.provenance.condition} at ℓ = ${p.layer}: threshold ${t.value.toPrecision(4)} flags ${(100 * t.benignFlagged).toFixed(1)} % benign / ${(100 * t.harmfulFlagged).toFixed(1)} % harmful extraction requests (n = ${t.nBenign} + ${t.nHarmful}) → ${path}\n`);
    if (p.cascade) {
      const c = p.cascade;
      process.stdout.write(`  cascade band [${c.low.toPrecision(4)}, ${c.high.toPrecision(4)}] on ${c.calibration.pairs} calibration pairs: probe refuses ${(100 * c.benignFlagged).toFixed(1)} % benign (max ${(100 * c.maxBenignFlag).toFixed(1)} %), passes ${(100 * c.harmfulPassed).toFixed(1)} % harmful unjudged (max ${(100 * c.maxHarmfulPass).toFixed(1)} %), judge on ${(100 * c.band).toFixed(1)} % of requests\n`);
    }
    if (p.steer) {
      const st = p.steer;
      process.stdout.write(`  probe-steer α = ${st.alpha.toPrecision(4)} at ℓ = ${st.layer}: ${st.refused}/${st.flagged} ${st.targets === 'flagged' ? 'flagged' : 'harmful (the probe flagged none)'} calibration requests refuse${st.refused < st.flagged ? ' — no α tried refused them all' : ''}\n`);
    }
    if (skill) process.stdout.write(`  S³ skill (stage input, check probe): ${skill}\n`);
  }
  return 0;
}
