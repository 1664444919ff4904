/** A long command's progress on stderr: at most a line a second (and the last), with the rate and the time left. */
export function progressLine(label: string): (done: number, total: number) => void {
  const t0 = performance.now();
  let last = 0;
  return (done, total) => {
    const now = performance.now();
    if (done !== total && now - last < 1000) return;
    last = now;
    const rate = done / ((now - t0) / 1000);
    const eta = rate > 0 ? (total - done) / rate : Infinity;
    process.stderr.write(`${label}: ${done}/${total} (${rate.toFixed(2)}/s, ETA ${Number.isFinite(eta) ? `${Math.ceil(eta)} s` : '?'})\n`);
  };
}
