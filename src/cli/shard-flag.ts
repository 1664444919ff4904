/**
 * `--shard i/n`, shared by every shardable command's flag table (parsed by util/shard.ts's parseShard), and what a
 * shard records about its run so that merge joins only shards of the same run.
 */
import type { FlagDef } from './args.ts';
import { sha256Hex } from '../util/hash.ts';

export const SHARD_FLAG_DEF: FlagDef = {
  name: 'shard', value: 'i/n',
  help: 'run only shard i of n (0-based; token-balanced) into results/<model>/shards/…; then `safekeep merge RESULTS_DIR`',
};

/** A short hash of anything JSON can write (12 hex digits). */
export const shortHash = (x: unknown): string => sha256Hex(JSON.stringify(x)).slice(0, 12);

/** The command line without its --shard flag: the same in every shard of one run. */
export function argvWithoutShard(argv: readonly string[]): string[] {
  return argv.filter((x, i, xs) => x !== '--shard' && xs[i - 1] !== '--shard' && !x.startsWith('--shard='));
}
