/**
 * `node --import tsx bench/prefill-probe.ts [--len 1000 --threads 2 --rounds 3 --burst 8 --burst-len 48]`: one prompt's prefill rate on the
 * Table-4 shape (SmolLM2-135M with Llama-3.1's vocabulary, f32, random weights), four ways, in one process, best of
 * --rounds: (a) alone, one submit; (b) inside the scheduler while 8 sequences decode (stepTokens 512: chunks
 * interleaved with decode steps; only its prefill steps timed); (c) after a prefix hit (the last --suffix tokens
 * computed over the cached blocks); (d) --burst prompts of --burst-len tokens submitted together, packed prefill
 * against one step per prompt (`packTokens` 0); plus raw steps by width T and past length P. Prints tokens/s and the 1-min load.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { createEngine } from '../src/engine/engine.ts';
import { flag, loadavg } from './common.ts';
import { T4_SHAPE } from './generate-table4.ts';
import { emptyTimes, timeSteps } from './step-timer.ts';

const len = Number(flag('len') ?? 1000);
const suffix = Number(flag('suffix') ?? 200);
const rounds = Number(flag('rounds') ?? 3);
const dir = mkdtempSync(join(tmpdir(), 'safekeep-prefill-probe-'));
try {
  await writeRandomCheckpoint(join(dir, 'm'), 'llama', T4_SHAPE);
  const engine = await createEngine(join(dir, 'm'), { threads: Number(flag('threads') ?? 2), cacheDir: join(dir, 'c'), quiet: true });
  const times = timeSteps(engine);
  let salt = 0;
  const prompt = (n: number) => { salt++; return Array.from({ length: n }, (_, i) => 1000 + ((i * 7919 + salt * 104729) % 120000)); };
  const sch = engine.scheduler;
  const rate = () => times.prefillTokens / times.prefillS;
  const bestOf = async (f: () => Promise<void>) => {
    let b = 0;
    for (let r = 0; r < rounds; r++) { Object.assign(times, emptyTimes()); const t = performance.now(); await f(); const wall = (performance.now() - t) / 1000; b = Math.max(b, rate()); void wall; }
    return b;
  };
  await sch.submit(prompt(32), { maxNewTokens: 2, stopIds: [] });
  const a = await bestOf(async () => { await sch.submit(prompt(len), { maxNewTokens: 1, stopIds: [] }); });
  const b = await bestOf(async () => {
    const dec = Array.from({ length: 8 }, () => sch.submit(prompt(40), { maxNewTokens: 48, stopIds: [] }));
    await new Promise((r) => setTimeout(r, 0));
    // wait until the 8 decode, then time only the long prompt's prefill steps
    while (sch.stats.decodeSteps === 0) await new Promise((r) => setTimeout(r, 5));
    const before = { ...times };
    Object.assign(times, emptyTimes());
    await sch.submit(prompt(len), { maxNewTokens: 1, stopIds: [] });
    const got = { t: times.prefillTokens, s: times.prefillS };
    await Promise.all(dec);
    Object.assign(times, emptyTimes(), { prefillTokens: got.t, prefillS: got.s });
    void before;
  });
  const c = await bestOf(async () => {
    const p = prompt(len);
    await sch.submit(p.slice(0, len - suffix + 1).concat([5]), { maxNewTokens: 1, stopIds: [] });
    Object.assign(times, emptyTimes());
    await sch.submit(p, { maxNewTokens: 1, stopIds: [] });
  });
  const out = [`prefill probe: ${len}-token prompt, Table-4 shape, best of ${rounds}, load ${loadavg()}`,
    `(a) alone, one submit: ${a.toFixed(0)} tok/s`,
    `(b) in the scheduler beside 8 decoding rows (chunks of stepTokens − rows): ${b.toFixed(0)} tok/s`,
    `(c) after a prefix hit, ${suffix} tokens over ${len - suffix} cached: ${c.toFixed(0)} tok/s`];
  // (d) a burst of short prompts submitted together (concurrent clients' requests): packed prefill (run/prefill-pack.ts)
  // against one step per prompt, interleaved, best of rounds, wall time from submit to the last first token
  const burst = Number(flag('burst') ?? 8);
  const burstLen = Number(flag('burst-len') ?? 48);
  const packDefault = sch.packTokens;
  const burstWall = { packed: Infinity, alone: Infinity };
  for (let r = 0; r < rounds; r++) {
    for (const mode of r % 2 ? (['alone', 'packed'] as const) : (['packed', 'alone'] as const)) {
      sch.packTokens = mode === 'packed' ? packDefault : 0;
      const ps = Array.from({ length: burst }, () => prompt(burstLen));
      const t = performance.now();
      await Promise.all(ps.map((p) => sch.submit(p, { maxNewTokens: 1, stopIds: [] })));
      burstWall[mode] = Math.min(burstWall[mode], (performance.now() - t) / 1000);
    }
  }
  sch.packTokens = packDefault;
  const burstTps = (s: number) => ((burst * burstLen) / s).toFixed(0);
  out.push(`(d) ${burst} prompts of ${burstLen} tokens submitted together: packed ${burstTps(burstWall.packed)} tok/s, one step each ${burstTps(burstWall.alone)} tok/s `
    + `(${(burstWall.alone / burstWall.packed).toFixed(2)}×; wall to the last first token, interleaved)`);
  // raw steps: T new tokens on a past of P (batch 1), best of rounds
  const ids = (T: number) => BigInt64Array.from(prompt(T), (x) => BigInt(x));
  const L = engine.numLayers; const d = engine.dModel;
  const iv = { steer: new Float32Array((L + 1) * d), dir: new Float32Array((L + 1) * d), value: new Float32Array(L + 1) };
  for (const [T, P] of [[512, 0], [256, 0], [256, 256], [256, 768], [128, 896], [16, 1000]] as const) {
    let past = null;
    if (P > 0) past = (await engine.step({ ids: ids(P), batch: 1, width: P, starts: [0], past: null, steer: iv.steer, project: iv, hiddenIndex: [], logitsIndex: [], reserve: T })).present;
    let bt = Infinity;
    for (let r = 0; r < rounds; r++) {
      const t = performance.now();
      await engine.step({ ids: ids(T), batch: 1, width: T, starts: [0], past, steer: iv.steer, project: iv, hiddenIndex: [], logitsIndex: [T - 1], reserve: 0 });
      bt = Math.min(bt, (performance.now() - t) / 1000);
    }
    out.push(`step T=${T} P=${P}: ${(bt * 1000).toFixed(0)} ms, ${(T / bt).toFixed(0)} tok/s`);
  }
  out.push(`load ${loadavg()}`);
  process.stdout.write(out.join('\n') + '\n');
  await engine.dispose();
} finally {
  rmSync(dir, { recursive: true, force: true });
}
