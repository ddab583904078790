// A manual clock: time moves only in `advance`, which runs every timer that falls due, in due
// order (ties in scheduling order), with `now()` equal to each timer's due time while it runs.

import type { Clock } from "../../src/core/types.js";

interface Timer {
  due: number;
  seq: number;
  fn: () => void;
}

export class ManualClock implements Clock {
  private time: number;
  private seq = 0;
  private readonly timers = new Map<number, Timer>();

  constructor(startMs = 0) {
    this.time = startMs;
  }

  now(): number {
    return this.time;
  }

  setTimeout(fn: () => void, ms: number): unknown {
    const seq = ++this.seq;
    this.timers.set(seq, { due: this.time + Math.max(0, ms), seq, fn });
    return seq;
  }

  clearTimeout(handle: unknown): void {
    this.timers.delete(handle as number);
  }

  /** Moves time forward by `ms`, firing due timers (including ones they schedule). */
  advance(ms: number): void {
    const end = this.time + ms;
    for (;;) {
      let next: Timer | undefined;
      for (const timer of this.timers.values()) {
        if (timer.due <= end && (!next || timer.due < next.due || (timer.due === next.due && timer.seq < next.seq))) {
          next = timer;
        }
      }
      if (!next) break;
      this.timers.delete(next.seq);
      this.time = next.due;
      next.fn();
    }
    this.time = end;
  }

  /** Timers still scheduled. */
  get pendingTimers(): number {
    return this.timers.size;
  }
}
