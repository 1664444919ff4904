/**
 * One error type for everything a user can get wrong (bad checkpoint, bad data row, missing template...).
 * The CLI prints `safekeep: <message>` and exits with `exitCode` (2 = bad input), never a stack dump.
 */
/** Longest message kept: an error line quoting input from outside must stay a line, not megabytes. */
export const MAX_ERROR_CHARS = 2000;

export class SafekeepError extends Error {
  readonly exitCode: number;
  constructor(message: string, exitCode = 2) {
    super(message.length <= MAX_ERROR_CHARS ? message : `${message.slice(0, MAX_ERROR_CHARS)}… (${message.length} characters)`);
    this.name = 'SafekeepError';
    this.exitCode = exitCode;
  }
}

export function isSafekeepError(e: unknown): e is SafekeepError {
  return e instanceof SafekeepError;
}
