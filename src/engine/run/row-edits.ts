/**
 * A row's edits: what a sequence changes in the forward pass at its prefill and at every decode step — its
 * interventions (steer rows, projections) and its edits at hook points — with the digests that let rows with equal
 * edits share one set in a step, and the key of the graph its hook selection runs on. `decodeSets` stacks the
 * edits of a decode batch's rows (one set when they all agree, else one per row: graph/intervene.ts,
 * graph/hook-edit.ts).
 */
import { createHash } from 'node:crypto';
import { HOOK_IO, hookSelectionKey } from '../graph/hooks.ts';
import type { InterventionInputs } from './batch.ts';
import type { StepHooks } from './step.ts';
import { identityKey, isEditFeed, saeEditFeeds, saeWeightsKey } from './sae-rows.ts';

/** the projection inputs of a step (one set, or one per row) */
export type Projection = Pick<InterventionInputs, 'dir' | 'value'>;

const digest = (parts: readonly Float32Array[]): string => {
  const h = createHash('sha256');
  for (const p of parts) h.update(new Uint8Array(p.buffer, p.byteOffset, p.byteLength));
  return h.digest('hex');
};

/** A hook selection and its inputs as a key part (names and each feed's key: values, an SAE's weights by identity). */
const hooksDigest = (h: StepHooks, keys: Record<string, string>): string => {
  const hash = createHash('sha256');
  hash.update(JSON.stringify(h.selection));
  for (const [name, f] of Object.entries(h.feeds).sort(([a], [b]) => (a < b ? -1 : 1))) hash.update(`${name}:${f.dims.join('x')}:${keys[name]}\n`);
  return `+hooks:${hash.digest('hex')}`;
};

export class RowEdits {
  /** digest of each hook feed by graph input name (rows with equal ones share the feed in a step) */
  readonly hookKeys: Record<string, string>;
  /** the decode group: '' without hook edits or SAEs, else the hook selection's key (and its SAEs' weights) */
  readonly groupKey: string;
  /** digests of the decode steer rows and of the projections: rows with equal ones share one set in a step */
  readonly steerKey: string;
  readonly projectKey: string;
  /** the prefill's edits as a prefix-cache salt (hook edits change every position's KV, like interventions) */
  readonly prefillSalt: string;

  /**
   * `prefillIv`: the interventions of the prompt's steps; `decodeIv`: of every decode step; `hooks`: edits at hook
   * points at every prefill and decode position (and the points captured: they are outputs of the same graph)
   */
  constructor(readonly prefillIv: InterventionInputs, readonly decodeIv: InterventionInputs, readonly hooks: StepHooks | undefined) {
    // an SAE's weights are named by identity (sae-rows.ts), edit values by their digest
    this.hookKeys = Object.fromEntries(Object.entries(hooks?.feeds ?? {}).map(([name, f]) => [name, isEditFeed(name) ? digest([f.data]) : identityKey(f.data)]));
    this.groupKey = hooks ? hookSelectionKey(hooks.selection) + saeWeightsKey(hooks) : '';
    this.steerKey = digest([decodeIv.steer]);
    this.projectKey = digest([decodeIv.dir, decodeIv.value]);
    this.prefillSalt = digest([prefillIv.steer, prefillIv.dir, prefillIv.value]) + (hooks ? hooksDigest(hooks, this.hookKeys) : '');
  }
}

/** The interventions and hook feeds of one decode step over its rows' edits. */
export interface DecodeSets {
  steer: Float32Array;
  project: Projection;
  hooks: StepHooks | undefined;
}

/**
 * The decode step's sets: the rows' one set when they all share it (steer and projections separately), else one set
 * per row, row b's at b (run/step.ts); hook feeds the same per graph input (`rowHooks`).
 */
export function decodeSets(rows: readonly RowEdits[], layers: number, d: number): DecodeSets {
  const first = rows[0]!;
  const L1 = layers + 1;
  const perRowSteer = rows.some((r) => r.steerKey !== first.steerKey);
  const perRowProject = rows.some((r) => r.projectKey !== first.projectKey);
  const stack = (part: (r: RowEdits) => Float32Array, per: number) => {
    const out = new Float32Array(rows.length * per);
    rows.forEach((r, b) => out.set(part(r), b * per));
    return out;
  };
  return {
    steer: perRowSteer ? stack((r) => r.decodeIv.steer, L1 * d) : first.decodeIv.steer,
    project: perRowProject ? { dir: stack((r) => r.decodeIv.dir, L1 * d), value: stack((r) => r.decodeIv.value, L1) } : first.decodeIv,
    hooks: first.hooks && rowHooks(rows, first.hooks),
  };
}

/**
 * The prefill sets of a packed step's rows: one set when their prefill edits agree, else one per row (the step
 * expands a row's set over its slots).
 */
export function prefillSets(rows: readonly RowEdits[]): { steer: Float32Array; project: Projection } {
  const first = rows[0]!;
  if (!rows.some((r) => r.prefillSalt !== first.prefillSalt)) return { steer: first.prefillIv.steer, project: first.prefillIv };
  const stack = (part: (r: RowEdits) => Float32Array) => {
    const per = part(first).length;
    const m = new Float32Array(rows.length * per);
    rows.forEach((r, b) => m.set(part(r), b * per));
    return m;
  };
  return { steer: stack((r) => r.prefillIv.steer), project: { dir: stack((r) => r.prefillIv.dir), value: stack((r) => r.prefillIv.value) } };
}

/**
 * The hook feeds of a decode step whose rows edit the same points: a feed shared by every row as it is ([1, w]), else
 * one row per sequence ([B, w]); a point's direction and value go per row together (one mask for both, hook-edit.ts).
 * An SAE's edit inputs the same (keep / set / add, sae-rows.ts); its weights are the group's, shared.
 */
function rowHooks(rows: readonly RowEdits[], first: StepHooks): StepHooks {
  const differs = (name: string) => rows.some((r) => r.hookKeys[name] !== rows[0]!.hookKeys[name]);
  const stacked = (name: string) => {
    const f = first.feeds[name]!;
    const per = f.data.length;
    const data = new Float32Array(rows.length * per);
    rows.forEach((r, b) => data.set(r.hooks!.feeds[name]!.data, b * per));
    return { data, dims: [rows.length, ...f.dims.slice(1)] };
  };
  const feeds: StepHooks['feeds'] = { ...first.feeds };
  for (const s of first.selection.sae ?? []) {
    for (const name of saeEditFeeds(s.hook)) if (first.feeds[name] && differs(name)) feeds[name] = stacked(name);
  }
  for (const point of first.selection.edit) {
    const projection = differs(HOOK_IO.dir(point)) || differs(HOOK_IO.value(point));
    for (const name of [HOOK_IO.keep(point), HOOK_IO.set(point), HOOK_IO.dir(point), HOOK_IO.value(point)]) {
      const perRow = name === HOOK_IO.dir(point) || name === HOOK_IO.value(point) ? projection : differs(name);
      feeds[name] = perRow ? stacked(name) : first.feeds[name]!;
    }
  }
  return { selection: first.selection, feeds };
}
