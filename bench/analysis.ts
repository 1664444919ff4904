/**
 * `npm run bench:analysis [-- --pairs 205 --layers 25 --d 896 --reps 1000]`
 * Wall time of the paper's analyses (analyze(): refusal direction, 5-fold CV ℓ*, per-layer paired-bootstrap AUROC
 * for 8 configurations × 2 directions, Schema Direction with 1,000 random + 1,000 permutation baselines,
 * first-token projections, norms) and of writeReport, on planted activations of a real model's size
 * (defaults: Qwen2.5-0.5B, 25 hidden states × 896, the 205 bundled pairs).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { numberValue, parseArgs } from '../src/cli/args.ts';
import { analyze } from '../src/analysis/analyze.ts';
import { writeReport } from '../src/report/write-report.ts';
import { scenarioInput } from '../test/helpers/analysis-scenario.ts';

const args = parseArgs(process.argv.slice(2), { values: ['pairs', 'layers', 'd', 'reps'] });
const pairs = numberValue(args, 'pairs', 205);
const layers = numberValue(args, 'layers', 25);
const d = numberValue(args, 'd', 896);
const reps = numberValue(args, 'reps', 1000);

let t = performance.now();
const input = scenarioInput({ pairs, layers, d, reps });
input.options = { ...input.options, reps, randomReps: 1000, permutationReps: 1000 };
const tGen = performance.now() - t;
t = performance.now();
const res = analyze(input);
const tAnalyze = performance.now() - t;
const dir = mkdtempSync(join(tmpdir(), 'safekeep-bench-'));
t = performance.now();
await writeReport(dir, res);
const tReport = performance.now() - t;
rmSync(dir, { recursive: true, force: true });
const aurocs = 2 * (input.table1.length + input.table2.length + 2) * layers * (reps + 1); // (cross + own) × configurations (chatbot in both tables) × layers × (reps + 1)
console.log(`pairs ${pairs}, hidden states ${layers}, d ${d}, bootstrap reps ${reps}, ℓ* = ${res.lStar.layer}`);
console.log(`generate planted activations  ${(tGen / 1000).toFixed(1)} s`);
console.log(`analyze()                     ${(tAnalyze / 1000).toFixed(1)} s  (~${Math.round(aurocs / (tAnalyze / 1000))} AUROCs/s incl. everything)`);
console.log(`writeReport()                 ${(tReport / 1000).toFixed(1)} s`);
