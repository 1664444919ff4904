/**
 * Running a benchmark's own Python next to our TypeScript port, so that a test's expectations come from the
 * benchmark's code rather than from the port. `runPython` returns null when python3 is not installed (the caller
 * skips visibly); any other failure of the script fails the test with its stderr.
 */
import { spawnSync } from 'node:child_process';

/** Runs `script` with python3, JSON `input` on stdin; returns the JSON the script prints, or null when python3 is absent. */
export function runPython(script: string, input: unknown): unknown {
  const r = spawnSync('python3', ['-c', script], { input: JSON.stringify(input), encoding: 'utf8', maxBuffer: 64 << 20 });
  if (r.error && (r.error as NodeJS.ErrnoException).code === 'ENOENT') return null;
  if (r.error) throw r.error;
  if (r.status !== 0) throw new Error(`python3 exited ${r.status}: ${r.stderr}`);
  return JSON.parse(r.stdout) as unknown;
}

/** Python source that makes `import nltk` work for code that only needs `nltk.ngrams`, when nltk is not installed. */
export const NLTK_NGRAMS_SHIM = `
import sys, types
try:
    import nltk  # noqa: F401
except ImportError:
    _m = types.ModuleType('nltk')
    # nltk.ngrams without padding: the successive n-tuples of the sequence
    def _ngrams(seq, n):
        seq = list(seq)
        return [tuple(seq[i:i + n]) for i in range(len(seq) - n + 1)]
    _m.ngrams = _ngrams
    sys.modules['nltk'] = _m
`;
