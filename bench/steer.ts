/**
 * `npm run bench:steer [-- --reps N --new N]`: decode tokens/s with steering on vs off, measured in one process on
 * the same engine, runs interleaved (off, on, off, on …), best of --reps. SmolLM2-135M-shaped random checkpoint.
 * Target: steering overhead ≤ 5 % (steering rides in an existing Gemm bias, so it should cost next to nothing).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { engineEnv } from '../src/cli/env.ts';
import { createEngine } from '../src/engine/engine.ts';
import { SMOLLM2_SHAPE } from './common.ts';

const flag = (name: string, def: number): number => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : def;
};

const reps = flag('reps', 3);
const newTokens = flag('new', 32);
const dir = mkdtempSync(join(tmpdir(), 'bench-steer-'));
const cacheDir = process.env.SAFEKEEP_CACHE ?? join(dir, '.graphs');
try {
  await writeRandomCheckpoint(join(dir, 'm'), 'llama', { ...SMOLLM2_SHAPE, seed: 3 });
  const eng = await createEngine(join(dir, 'm'), { ...engineEnv(), cacheDir });
  const prompt = Array.from({ length: 128 }, (_, i) => 3 + ((i * 7919) % 49000));
  const vector = Float32Array.from({ length: SMOLLM2_SHAPE.hiddenSize }, (_, i) => Math.sin(i));
  const steer = { layer: 15, vector, alpha: 4 };
  /** decode-only seconds: t(new) − t(1 new) removes the prefill */
  const decodeTps = async (on: boolean): Promise<number> => {
    const opts = { stopIds: [] as number[], ...(on ? { steer } : {}) };
    let t = performance.now();
    await eng.generate([prompt], { ...opts, maxNewTokens: 1 });
    const prefill = performance.now() - t;
    t = performance.now();
    await eng.generate([prompt], { ...opts, maxNewTokens: newTokens });
    const total = performance.now() - t;
    return (newTokens - 1) / ((total - prefill) / 1000);
  };
  await decodeTps(false); // warm-up
  await decodeTps(true);
  const off: number[] = [];
  const on: number[] = [];
  for (let r = 0; r < reps; r++) {
    off.push(await decodeTps(false));
    on.push(await decodeTps(true));
  }
  await eng.dispose();
  const best = (x: number[]): number => Math.max(...x);
  const overhead = (1 - best(on) / best(off)) * 100;
  console.log(`decode tokens/s (prompt 128, ${newTokens} new, best of ${reps}): steering off ${best(off).toFixed(1)}, on ${best(on).toFixed(1)}`);
  console.log(`steering overhead: ${overhead.toFixed(1)} % (target ≤ 5 %)   runs off=[${off.map((x) => x.toFixed(1)).join(', ')}] on=[${on.map((x) => x.toFixed(1)).join(', ')}]`);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
