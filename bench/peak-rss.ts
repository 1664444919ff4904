import { readFileSync } from 'node:fs';

/**
 * Peak RSS of this process image: VmHWM from /proc/self/status (Linux). Not getrusage's maxRSS: Linux carries the
 * parent's high-water mark across fork+exec into ru_maxrss, so a child spawned by a big parent reports the parent's.
 */
export function peakRss(): number {
  try {
    const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync('/proc/self/status', 'utf8'));
    if (m) return Number(m[1]) * 1024;
  } catch { /* not Linux */ }
  return process.resourceUsage().maxRSS * 1024;
}

