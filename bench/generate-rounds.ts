/**
 * What bench:generate's workloads share: the base tree (the code before the scheduler, checked out into the bench's
 * folder), the interleaved rounds of fresh child processes, and the table cells.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, symlinkSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { flag, loadavg } from './common.ts';

const repo = resolve(fileURLToPath(import.meta.url), '..', '..');

/** the commit before the scheduler landed: "today's" code for the base rows once main has the scheduler */
export const PRE_SCHEDULER_REV = 'fccaa3b^';

/** a copy of `rev`'s src/ (and package.json) to run the code before continuous batching, or null with the reason */
export function baseTree(dir: string, rev: string): { root: string } | { skip: string } {
  if (spawnSync('git', ['-C', repo, 'cat-file', '-e', `${rev}:src/engine/run/scheduler.ts`]).status === 0) {
    return { skip: `base '${rev}' already has the scheduler; pass --base REV (a commit before it, e.g. ${PRE_SCHEDULER_REV})` };
  }
  return archiveTree(dir, rev);
}

/** The code of `rev` (src/ and package.json, node_modules linked) in DIR/base, made once: the other side of an A/B. */
export function archiveTree(dir: string, rev: string): { root: string } | { skip: string } {
  try {
    const root = join(dir, 'base');
    if (existsSync(join(root, 'src'))) return { root };
    mkdirSync(root, { recursive: true });
    const tar = execFileSync('git', ['-C', repo, 'archive', rev, 'src', 'package.json'], { maxBuffer: 1 << 30 });
    execFileSync('tar', ['-x', '-C', root], { input: tar });
    symlinkSync(join(repo, 'node_modules'), join(root, 'node_modules'));
    return { root };
  } catch (e) {
    return { skip: `cannot check out '${rev}': ${(e as Error).message.split('\n')[0]}` };
  }
}

/** --base, else fccaa3b^ once main has the scheduler, else main */
export function baseRev(): string {
  const given = flag('base');
  if (given) return given;
  return spawnSync('git', ['-C', repo, 'cat-file', '-e', 'main:src/engine/run/scheduler.ts']).status === 0 ? PRE_SCHEDULER_REV : 'main';
}

export interface Mode { name: string; run: () => Record<string, unknown>; optional?: boolean }

/**
 * Every mode once per round, fresh processes, order reversed every other round; the best (highest `tps`) kept per
 * mode. An optional mode that fails is dropped with its reason (the others go on); a required one stops the bench.
 */
export function interleave(modes: Mode[], rounds: number, loads: number[]): { best: Map<string, Record<string, unknown>>; skipped: string[] } {
  const best = new Map<string, Record<string, unknown>>();
  const skipped: string[] = [];
  const peaks = new Map<string, number[]>();
  const t0 = performance.now();
  let done = 0;
  const total = modes.length * rounds;
  for (let r = 0; r < rounds; r++) {
    for (const m of r % 2 === 0 ? modes : [...modes].reverse()) {
      if (skipped.some((x) => x.startsWith(`${m.name}:`))) { done++; continue; }
      const el = (performance.now() - t0) / 1000;
      const eta = done ? `, ETA ${Math.ceil((el / done) * (total - done))} s` : '';
      process.stderr.write(`round ${r + 1}/${rounds}: ${m.name} (${done}/${total} runs, ${el.toFixed(0)} s${eta}, load ${loadavg()})…\n`);
      let json: Record<string, unknown>;
      try {
        json = m.run();
      } catch (e) {
        if (!m.optional) throw e;
        const lines = (e as Error).message.split('\n');
        const why = lines.filter((l) => /error|exception/i.test(l)).at(-1) ?? '';
        skipped.push(`${m.name}: ${lines[0]!.replace(/:.*$/, '')}${why ? ` — ${why.slice(0, 200)}` : ''}`);
        done++;
        continue;
      }
      done++;
      loads.push(json.load as number);
      const rss = (typeof json.decodeTps === 'number' ? `, decode ${json.decodeTps.toFixed(1)} tok/s` : '')
        + (typeof json.peakRss === 'number' ? `, peak RSS ${(json.peakRss / 1e9).toFixed(3)} GB` : '');
      process.stderr.write(`  ${(json.tps as number).toFixed(2)} tok/s, ${(json.wallS as number).toFixed(1)} s${rss}, load ${json.load}\n`);
      if (typeof json.peakRss === 'number') peaks.set(m.name, [...peaks.get(m.name) ?? [], json.peakRss]);
      const prev = best.get(m.name);
      if (!prev || (json.tps as number) > (prev.tps as number)) best.set(m.name, json);
    }
  }
  // every round's peak RSS beside the best round's figures: memory is compared round by round, not by the fastest run
  for (const [name, list] of peaks) { const b = best.get(name); if (b) b.peakRssRounds = list; }
  return { best, skipped };
}

export const fmt = (x: unknown, d = 1): string => (typeof x === 'number' && Number.isFinite(x) ? x.toFixed(d) : '—');
export const pct = (x: unknown): string => (typeof x === 'number' && Number.isFinite(x) ? `${(100 * x).toFixed(1)} %` : '—');
/** the masked-attention cells of a row: left of start / all masked (of slots), left share of decode multiply-adds */
export function maskedCells(j: Record<string, unknown> | undefined): string {
  const s = j?.slots as { computed: number; leftMasked: number; rightUnused: number } | undefined;
  const f = j?.maskedFlops as { left: number } | undefined;
  if (!s || !s.computed) return '— | —';
  return `${pct(s.leftMasked / s.computed)} / ${pct((s.leftMasked + s.rightUnused) / s.computed)} | ${pct(f?.left)}`;
}

