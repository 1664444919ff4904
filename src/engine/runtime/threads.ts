/**
 * The default intra-op thread count, chosen from the machine. onnxruntime's GEMMs are compute-bound: one thread per
 * PHYSICAL core (an SMT sibling shares the core's FMA units and only adds contention), never more than the CPU time
 * the cgroup grants (more threads than the quota get throttled in bursts), and only CPUs this process may run on.
 *
 *   threads = max(1, min(physical cores among the allowed CPUs, floor(cgroup quota)))      SAFEKEEP_THREADS overrides
 *
 * `chooseThreads` is the pure rule over parsed facts; `readCpuFacts` reads them from Linux (/proc/self/status
 * Cpus_allowed_list, /sys/devices/system/cpu/cpuN/topology/thread_siblings_list, /sys/fs/cgroup/cpu.max or cgroup v1
 * cpu.cfs_quota_us / cpu.cfs_period_us). Elsewhere (or when a file is unreadable) the facts degrade to
 * `os.availableParallelism()` logical CPUs, no topology, no quota.
 */
import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';

export interface CpuFacts {
  /** logical CPU ids this process may run on */
  allowed: number[];
  /** per logical CPU: the set of its SMT siblings (thread_siblings_list, e.g. "0,8" or "0-1"); absent = unknown */
  siblings: Map<number, string>;
  /** CPU quota in CPUs (quota / period), null = unlimited or unknown */
  quota: number | null;
  /** SAFEKEEP_THREADS as set (undefined = unset) */
  env?: string;
}

interface ThreadChoice {
  threads: number;
  /** one line: how it was chosen */
  why: string;
}

/** "0-3,8,10-11" → [0, 1, 2, 3, 8, 10, 11]; null when it does not parse */
export function parseCpuList(s: string): number[] | null {
  const out: number[] = [];
  const t = s.trim();
  if (t === '') return null;
  for (const part of t.split(',')) {
    const m = /^(\d+)(?:-(\d+))?$/.exec(part.trim());
    if (!m) return null;
    const a = Number(m[1]);
    const b = m[2] === undefined ? a : Number(m[2]);
    if (b < a) return null;
    for (let i = a; i <= b; i++) out.push(i);
  }
  return out;
}

/** cgroup v2 cpu.max ("max 100000" | "150000 100000") → CPUs (1.5), null = unlimited or unparsable */
export function parseCpuMax(s: string): number | null {
  const [q, p] = s.trim().split(/\s+/);
  if (q === undefined || q === 'max') return null;
  return cpuQuota(Number(q), Number(p ?? 100000));
}

/** quota and period in µs (cgroup v1 uses quota -1 for unlimited) → CPUs, null = unlimited or invalid */
export function cpuQuota(quotaUs: number, periodUs: number): number | null {
  if (!Number.isFinite(quotaUs) || !Number.isFinite(periodUs) || quotaUs <= 0 || periodUs <= 0) return null;
  return quotaUs / periodUs;
}

/** The rule (see the file comment). Pure. */
export function chooseThreads(f: CpuFacts): ThreadChoice {
  if (f.env !== undefined && f.env !== '') {
    const n = Number(f.env);
    if (Number.isInteger(n) && n > 0) return { threads: n, why: `SAFEKEEP_THREADS=${f.env}` };
  }
  const logical = Math.max(1, f.allowed.length);
  // a physical core = one distinct sibling set; a CPU without topology counts as its own core
  const cores = new Set(f.allowed.map((cpu) => f.siblings.get(cpu) ?? `cpu${cpu}`)).size || 1;
  let threads = cores;
  let why = cores < logical ? `${cores} physical cores of ${logical} allowed logical CPUs (SMT siblings not used)` : `${cores} allowed CPUs`;
  if (f.quota !== null) {
    const q = Math.max(1, Math.floor(f.quota));
    if (q < threads) {
      threads = q;
      why += `, cgroup CPU quota ${+f.quota.toFixed(2)}`;
    }
  }
  return { threads, why };
}

function readText(path: string): string | null {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return null;
  }
}

/** The facts of this process on this machine (Linux files; degrades to availableParallelism() elsewhere). */
export function readCpuFacts(env?: string): CpuFacts {
  const status = readText('/proc/self/status');
  const listLine = status ? /^Cpus_allowed_list:\s*(.+)$/m.exec(status)?.[1] : undefined;
  const allowed = (listLine ? parseCpuList(listLine) : null) ?? Array.from({ length: availableParallelism() }, (_, i) => i);
  const siblings = new Map<number, string>();
  for (const cpu of allowed) {
    const s = readText(`/sys/devices/system/cpu/cpu${cpu}/topology/thread_siblings_list`);
    if (s !== null && s.trim() !== '') siblings.set(cpu, s.trim());
  }
  let quota: number | null = null;
  const v2 = readText('/sys/fs/cgroup/cpu.max');
  if (v2 !== null) quota = parseCpuMax(v2);
  else {
    const q = readText('/sys/fs/cgroup/cpu/cpu.cfs_quota_us') ?? readText('/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us');
    const p = readText('/sys/fs/cgroup/cpu/cpu.cfs_period_us') ?? readText('/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us');
    if (q !== null && p !== null) quota = cpuQuota(Number(q.trim()), Number(p.trim()));
  }
  return { allowed, siblings, quota, ...(env !== undefined ? { env } : {}) };
}

let facts: CpuFacts | null = null;

/** chooseThreads over this machine's facts (read once per process) and an override (SAFEKEEP_THREADS, from the CLI). */
export function machineThreads(env?: string): ThreadChoice {
  facts ??= readCpuFacts(undefined);
  return chooseThreads(env === undefined ? facts : { ...facts, env });
}
