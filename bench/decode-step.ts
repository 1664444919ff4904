/**
 * `npm run bench:decode-step [-- --threads 1,2 --dtypes f32,q4 --rounds 4 --prompt 128 --new 34 --model DIR
 *   --base REV|DIR --spin]`: the unprofiled decode step of each dtype and q4 over f32 (the "q4 ≥ 3× f32 decode" target),
 * optionally against another version of this repo (`--base REV`: a git revision, checked out once under the work
 * folder as bench:generate's base is; or a folder holding a checkout): fresh child processes, this tree and the base alternating, one child per (side, threads)
 * holding an engine per dtype. A step = (best N-token − best 2-token greedy generate) / (N − 2), so the prefill cancels;
 * best of 3 in a child and of `--rounds` children. Without --model the SmolLM2-135M-shaped random checkpoint (written
 * once under --keep, default a temp dir); pass a 30-layer d-64 checkpoint for the per-step fixed cost (arithmetic ≈ 0).
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { SMOLLM2_SHAPE, flag, loadavg, runChild } from './common.ts';
import { archiveTree } from './generate-rounds.ts';

interface ChildResult { ms: Record<string, number>; load: number }

/** child: time the decode step of each dtype with the engine under `root` */
async function child(root: string): Promise<void> {
  const imp = (p: string) => import(pathToFileURL(join(root, p)).href);
  const { loadCheckpoint } = await imp('src/checkpoint/load.ts');
  const { createEngineFromCheckpoint } = await imp('src/engine/engine.ts');
  const ck = await loadCheckpoint(flag('model')!);
  const V = ck.config.vocabSize as number;
  const P = Number(flag('prompt') ?? 128);
  const N = Number(flag('new') ?? 34);
  const prompt = [Array.from({ length: P }, (_, i) => 3 + ((i * 7919) % (V - 3)))];
  const engines: [string, { generate: Function; dispose: () => Promise<void> }][] = [];
  for (const dtype of flag('dtypes')!.split(',')) {
    const e = await createEngineFromCheckpoint(ck, { dtype, threads: Number(flag('threads')), spin: process.argv.includes('--spin'), cacheDir: flag('cache')!, quiet: true });
    await e.generate(prompt, { maxNewTokens: 4, stopIds: [] });
    engines.push([dtype, e]);
  }
  const short = new Map<string, number>();
  const long = new Map<string, number>();
  for (let r = 0; r < 3; r++) {
    for (const [k, e] of engines) {
      const t0 = performance.now();
      await e.generate(prompt, { maxNewTokens: 2, stopIds: [] });
      const t1 = performance.now();
      await e.generate(prompt, { maxNewTokens: N, stopIds: [] });
      short.set(k, Math.min(short.get(k) ?? Infinity, t1 - t0));
      long.set(k, Math.min(long.get(k) ?? Infinity, performance.now() - t1));
    }
  }
  const ms = Object.fromEntries(engines.map(([k]) => [k, (long.get(k)! - short.get(k)!) / (N - 2)]));
  for (const [, e] of engines) await e.dispose();
  process.stdout.write(JSON.stringify({ ms, load: loadavg() } satisfies ChildResult) + '\n');
}

async function main(): Promise<void> {
  const keep = flag('keep');
  const work = keep ?? mkdtempSync(join(tmpdir(), 'safekeep-decode-step-'));
  const model = flag('model') ?? join(work, 'model');
  if (!flag('model') && !existsSync(join(model, 'config.json'))) {
    const { writeRandomCheckpoint } = await import('../src/checkpoint/random.ts');
    process.stderr.write(`writing a SmolLM2-135M-shaped random checkpoint to ${model} ...\n`);
    await writeRandomCheckpoint(model, 'llama', SMOLLM2_SHAPE);
  }
  const dtypes = flag('dtypes') ?? 'f32,q4';
  const rounds = Number(flag('rounds') ?? 4);
  const base = flag('base');
  let baseRoot: string | null = null;
  if (base) {
    const tree = existsSync(join(base, 'src')) ? { root: resolve(base) } : archiveTree(work, base);
    if (!('root' in tree)) throw new Error(`--base ${base}: ${tree.skip}`);
    baseRoot = tree.root;
  }
  const sides: [string, string][] = [['this tree', resolve('.')], ...(baseRoot ? [['base', baseRoot] as [string, string]] : [])];
  const spin = process.argv.includes('--spin') ? ['--spin'] : [];
  const out: string[] = [`decode step, prompt ${flag('prompt') ?? 128}, model ${model}, best of 3 in a child × ${rounds} children${spin.length ? ', spinning workers' : ''}`,
    '', `| side | threads | ${dtypes.split(',').map((d) => `${d} ms/step`).join(' | ')} | q4 / f32 | load |`, `| --- | --- | ${dtypes.split(',').map(() => '---').join(' | ')} | --- | --- |`];
  for (const threads of (flag('threads') ?? '1,2').split(',')) {
    const best = new Map<string, Record<string, number>>();
    const loads = new Map<string, number[]>();
    for (let r = 0; r < rounds; r++) {
      for (const [name, root] of sides) {
        const args = ['--import', 'tsx', resolve('bench/decode-step.ts'), '--child', root, '--model', model, '--dtypes', dtypes, '--threads', threads,
          '--prompt', flag('prompt') ?? '128', '--new', flag('new') ?? '34', '--cache', join(work, `cache-${name === 'base' ? 'base' : 'tree'}`), ...spin];
        const { json } = runChild(process.execPath, args, `${name} child`);
        const res = json as unknown as ChildResult;
        const b = best.get(name) ?? {};
        for (const [k, v] of Object.entries(res.ms)) b[k] = Math.min(b[k] ?? Infinity, v);
        best.set(name, b);
        loads.set(name, [...(loads.get(name) ?? []), res.load]);
      }
    }
    for (const [name] of sides) {
      const b = best.get(name)!;
      const l = loads.get(name)!;
      const ratio = b.f32 !== undefined && b.q4 !== undefined ? `${(b.f32 / b.q4).toFixed(2)}×` : '—';
      out.push(`| ${name} | ${threads} | ${dtypes.split(',').map((d) => b[d]!.toFixed(3)).join(' | ')} | ${ratio} | ${Math.min(...l)}–${Math.max(...l)} |`);
    }
  }
  process.stdout.write(out.join('\n') + '\n');
  if (!keep) rmSync(work, { recursive: true, force: true });
}

const root = flag('child');
if (root !== undefined) await child(root);
else await main();
