/** Reading an `AnalysisResults` JSON file with one clear error per problem (file, field, what is wrong). */
import { readFileSync } from 'node:fs';
import type { AnalysisResults } from '../analysis/results.ts';
import { SafekeepError } from '../util/errors.ts';

type Json = Record<string, unknown>;

function isObj(x: unknown): x is Json {
  return typeof x === 'object' && x !== null && !Array.isArray(x);
}

function isNumArray(x: unknown, len: number): boolean {
  return Array.isArray(x) && x.length === len && x.every((v) => typeof v === 'number' && Number.isFinite(v));
}

function checkCI(file: string, where: string, x: unknown): void {
  if (!isObj(x) || !['auroc', 'lo', 'hi', 'n'].every((k) => typeof x[k] === 'number')) {
    throw new SafekeepError(`${file}: ${where} must be {auroc, lo, hi, n} numbers`);
  }
}

/** Structural validation of parsed JSON as AnalysisResults (layer arrays must have `layers` entries). */
export function validateResults(x: unknown, file = 'results'): AnalysisResults {
  if (!isObj(x)) throw new SafekeepError(`${file}: expected a JSON object`);
  if (x.version !== 1) throw new SafekeepError(`${file}: version must be 1, got ${JSON.stringify(x.version)}`);
  if (typeof x.model !== 'string' || !x.model) throw new SafekeepError(`${file}: 'model' must be a non-empty string`);
  const L = x.layers;
  if (typeof L !== 'number' || !Number.isInteger(L) || L < 1) throw new SafekeepError(`${file}: 'layers' must be a positive integer`);
  if (typeof x.dModel !== 'number') throw new SafekeepError(`${file}: 'dModel' must be a number`);
  if (!isObj(x.lStar) || typeof x.lStar.layer !== 'number' || typeof x.lStar.method !== 'string') {
    throw new SafekeepError(`${file}: 'lStar' must be {layer, method, cvAuroc}`);
  }
  if (!isObj(x.bootstrap) || !['reps', 'seed', 'level'].every((k) => typeof (x.bootstrap as Json)[k] === 'number')) {
    throw new SafekeepError(`${file}: 'bootstrap' must be {reps, seed, level}`);
  }
  if (!Array.isArray(x.curves)) throw new SafekeepError(`${file}: 'curves' must be an array`);
  x.curves.forEach((c: unknown, i: number) => {
    if (!isObj(c) || typeof c.config !== 'string' || typeof c.label !== 'string' || (c.direction !== 'chatbot' && c.direction !== 'own')) {
      throw new SafekeepError(`${file}: curves[${i}] must be {config, label, direction: 'chatbot'|'own', perLayer}`);
    }
    if (!Array.isArray(c.perLayer) || c.perLayer.length !== L) throw new SafekeepError(`${file}: curves[${i}].perLayer must have ${L} entries`);
    c.perLayer.forEach((e: unknown, l: number) => checkCI(file, `curves[${i}].perLayer[${l}]`, e));
  });
  for (const t of ['table1', 'table2'] as const) {
    const rows = x[t];
    if (!Array.isArray(rows)) throw new SafekeepError(`${file}: '${t}' must be an array`);
    rows.forEach((r: unknown, i: number) => {
      if (!isObj(r) || typeof r.config !== 'string' || typeof r.label !== 'string') throw new SafekeepError(`${file}: ${t}[${i}] needs config and label`);
      checkCI(file, `${t}[${i}].cross`, r.cross);
      checkCI(file, `${t}[${i}].within`, r.within);
      if (!isObj(r.crossDiff) || !['diff', 'lo', 'hi'].every((k) => typeof (r.crossDiff as Json)[k] === 'number')) {
        throw new SafekeepError(`${file}: ${t}[${i}].crossDiff must be {diff, lo, hi}`);
      }
    });
  }
  if (x.schemaCosines !== undefined) {
    const s = x.schemaCosines;
    if (!isObj(s) || !isNumArray(s.harmful, L) || !isNumArray(s.benign, L) || !isObj(s.randomBand) || !isNumArray(s.randomBand.lo, L) || !isNumArray(s.randomBand.hi, L)) {
      throw new SafekeepError(`${file}: schemaCosines needs harmful, benign, randomBand.lo/hi arrays of ${L} numbers`);
    }
  }
  if (x.firstToken !== undefined) {
    if (!Array.isArray(x.firstToken)) throw new SafekeepError(`${file}: 'firstToken' must be an array`);
    x.firstToken.forEach((f: unknown, i: number) => {
      if (!isObj(f) || !isNumArray(f.mean, L) || !isNumArray(f.sd, L)) throw new SafekeepError(`${file}: firstToken[${i}] needs mean and sd arrays of ${L} numbers`);
    });
  }
  if (!isObj(x.norms) || !Array.isArray(x.norms.directions) || !Array.isArray(x.norms.meanHidden)) {
    throw new SafekeepError(`${file}: 'norms' must be {directions: [], meanHidden: []}`);
  }
  if (x.steering !== undefined) {
    if (!Array.isArray(x.steering)) throw new SafekeepError(`${file}: 'steering' must be an array`);
    x.steering.forEach((s: unknown, i: number) => {
      if (!isObj(s) || !Array.isArray(s.rows)) throw new SafekeepError(`${file}: steering[${i}] needs rows`);
      s.rows.forEach((r: unknown, j: number) => {
        if (!isObj(r) || typeof r.alpha !== 'number' || typeof r.n !== 'number' || !isObj(r.counts)) {
          throw new SafekeepError(`${file}: steering[${i}].rows[${j}] must be {alpha, n, counts: {refusal, valid, invalid}}`);
        }
        const c = r.counts;
        const sum = [c.refusal, c.valid, c.invalid].reduce((a: number, v) => (typeof v === 'number' ? a + v : NaN), 0);
        if (sum !== r.n) throw new SafekeepError(`${file}: steering[${i}].rows[${j}] counts add up to ${sum}, n is ${r.n}`);
      });
    });
  }
  if (x.s3 !== undefined) {
    if (!isObj(x.s3) || !Array.isArray(x.s3.runs)) throw new SafekeepError(`${file}: 's3' must be {runs: [...]}`);
    x.s3.runs.forEach((r: unknown, i: number) => {
      if (!isObj(r) || typeof r.bench !== 'string' || !Array.isArray(r.configs)) throw new SafekeepError(`${file}: s3.runs[${i}] needs bench and configs`);
      r.configs.forEach((c: unknown, j: number) => {
        const rate = (v: unknown) => isObj(v) && typeof v.k === 'number' && typeof v.n === 'number';
        if (!isObj(c) || typeof c.config !== 'string' || !rate(c.asr) || !rate(c.benign) || !isObj(c.groups)) {
          throw new SafekeepError(`${file}: s3.runs[${i}].configs[${j}] must be {config, n, asr: {k, n, …}, benign: {k, n, …}, gic, rsc, extraTokens, latencyMs, groups}`);
        }
      });
    });
  }
  if (!isObj(x.manifest)) throw new SafekeepError(`${file}: 'manifest' must be an object`);
  return x as unknown as AnalysisResults;
}

export function readResults(file: string): AnalysisResults {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    throw new SafekeepError(`${file}: cannot read (${(e as NodeJS.ErrnoException).code ?? String(e)})`);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    throw new SafekeepError(`${file}: not valid JSON (${(e as Error).message})`);
  }
  return validateResults(json, file);
}
