/**
 * ActivationCache: the activations of one run at named hook points (graph/hooks.ts), as typed arrays with shapes —
 * TransformerLens's ActivationCache for Node. Look up by name (`cache.get('blocks.2.attn_out')`), read one
 * position, stack a glob over layers (`cache.stack('blocks.*.resid_post')` → [n, T, d]), save to / load from
 * safetensors (F32, names as keys, readable by Python's `safetensors`).
 */
import { readSafetensorsHeader, writeSafetensors } from '../../checkpoint/safetensors.ts';
import { readTensorF32 } from '../../checkpoint/read.ts';
import { SafekeepError } from '../../util/errors.ts';

/** One activation: row-major data of `shape` ([T, d], [T, H, hd] for z, [H, T, S] for pattern). */
export interface Activation {
  data: Float32Array;
  shape: number[];
}

const globRe = (p: string) => new RegExp(`^${p.split('*').map((s) => s.replace(/[.+?^${}()|[\]\\]/g, '\\$&')).join('[^.]*')}$`);

export class ActivationCache {
  private readonly entries: Map<string, Activation>;

  /** `entries` in graph order (the order `names` and `stack` keep) */
  constructor(entries: Iterable<[string, Activation]>) {
    this.entries = new Map(entries);
    for (const [name, a] of this.entries) {
      if (a.data.length !== a.shape.reduce((x, y) => x * y, 1)) throw new Error(`activation cache: ${name} has ${a.data.length} values for shape [${a.shape}]`);
    }
  }

  /** the cached hook names, in graph order */
  get names(): string[] {
    return [...this.entries.keys()];
  }

  has(name: string): boolean {
    return this.entries.has(name);
  }

  /** the activation at `name`, or a SafekeepError listing what is cached */
  get(name: string): Activation {
    const a = this.entries.get(name);
    if (!a) throw new SafekeepError(`activation cache: no '${name}' (cached: ${this.names.join(', ') || 'nothing'})`);
    return a;
  }

  /**
   * Row `position` of an activation whose first axis is the token ([T, ...] → [...]; negative counts from the end).
   * Not for pattern ([H, T, S]), whose first axis is the head.
   */
  at(name: string, position: number): Float32Array {
    if (name.endsWith('.pattern')) throw new SafekeepError(`activation cache: ${name} is [H, T, S]; index it through get()`);
    const { data, shape } = this.get(name);
    const T = shape[0]!;
    const p = position < 0 ? T + position : position;
    if (!Number.isInteger(p) || p < 0 || p >= T) throw new SafekeepError(`activation cache: position ${position} is outside ${name}'s ${T} tokens`);
    const w = data.length / T;
    return data.slice(p * w, (p + 1) * w);
  }

  /** The activations whose names match `pattern` (`*` within one part), stacked: [n, ...shape] and their names. */
  stack(pattern: string): Activation & { names: string[] } {
    const re = globRe(pattern);
    const names = this.names.filter((n) => re.test(n));
    if (names.length === 0) throw new SafekeepError(`activation cache: '${pattern}' matches nothing cached (cached: ${this.names.join(', ') || 'nothing'})`);
    const first = this.get(names[0]!);
    for (const n of names) {
      if (this.get(n).shape.join() !== first.shape.join()) throw new SafekeepError(`activation cache: cannot stack ${names[0]} [${first.shape}] with ${n} [${this.get(n).shape}]`);
    }
    const data = new Float32Array(names.length * first.data.length);
    names.forEach((n, i) => data.set(this.get(n).data, i * first.data.length));
    return { data, shape: [names.length, ...first.shape], names };
  }

  /** Write every activation to a .safetensors file (F32, one tensor per hook name; `metadata` strings in the header). */
  save(path: string, metadata: Record<string, string> = {}): void {
    writeSafetensors(path, Object.fromEntries([...this.entries].map(([n, a]) => [n, { dtype: 'F32' as const, shape: a.shape, data: a.data }])), metadata);
  }

  /** A cache written by `save` (or any safetensors file of F32/BF16/F16 tensors; names kept as they are). */
  static load(path: string): ActivationCache {
    const header = readSafetensorsHeader(path);
    return new ActivationCache(header.entries.map((e) => {
      if (e.dtype !== 'F32' && e.dtype !== 'BF16' && e.dtype !== 'F16') throw new SafekeepError(`${path}: tensor ${e.name} is ${e.dtype}; an activation cache holds floats`);
      return [e.name, { data: readTensorF32({ ...e, dtype: e.dtype }), shape: e.shape }];
    }));
  }
}
