// A fake transport: sockets open (or fail) on the next microtask, record what the app sends and
// how it closes them, and let a test play the daemon.

import type { TransportCloseEvent, TransportFactory, TransportSocket, TransportTarget } from "../../src/core/types.js";

export class FakeSocket implements TransportSocket {
  onopen: (() => void) | null = null;
  onmessage: ((text: string) => void) | null = null;
  onclose: ((event: TransportCloseEvent) => void) | null = null;
  readonly sent: string[] = [];
  closedByApp: { code: number; reason: string } | null = null;
  opened = false;

  constructor(
    readonly target: TransportTarget,
    private readonly hooks: FakeTransportHooks,
  ) {}

  send(text: string): void {
    this.sent.push(text);
    this.hooks.onSend?.(this, text, this.sent.length === 1);
  }

  close(code: number, reason: string): void {
    if (this.closedByApp) return;
    this.closedByApp = { code, reason };
    this.hooks.onAppClose?.(this, code, reason);
  }

  /** The daemon sends a text frame. */
  receive(frame: unknown): void {
    this.onmessage?.(typeof frame === "string" ? frame : JSON.stringify(frame));
  }

  /** The daemon closes the connection, or it dies (no code). */
  serverClose(event: TransportCloseEvent = {}): void {
    this.onclose?.(event);
  }

  /** Frames sent so far, parsed. */
  get frames(): Record<string, unknown>[] {
    return this.sent.map((text) => JSON.parse(text) as Record<string, unknown>);
  }
}

export interface FakeTransportHooks {
  onSend?: (socket: FakeSocket, text: string, first: boolean) => void;
  onAppClose?: (socket: FakeSocket, code: number, reason: string) => void;
}

export class FakeTransport {
  readonly sockets: FakeSocket[] = [];
  private failures: TransportCloseEvent[] = [];

  constructor(private readonly hooks: FakeTransportHooks = {}) {}

  readonly factory: TransportFactory = (target) => {
    const socket = new FakeSocket(target, this.hooks);
    this.sockets.push(socket);
    const failure = this.failures.shift();
    queueMicrotask(() => {
      if (socket.closedByApp) return;
      if (failure) {
        socket.onclose?.(failure);
      } else {
        socket.opened = true;
        socket.onopen?.();
      }
    });
    return socket;
  };

  /** The next connection attempt fails before its socket opens. */
  failNextConnect(event: TransportCloseEvent = { error: "connect_failed" }): void {
    this.failures.push(event);
  }

  get newest(): FakeSocket {
    const socket = this.sockets[this.sockets.length - 1];
    if (!socket) throw new Error("no connection was opened");
    return socket;
  }
}

/** Lets every queued microtask (and promise chain) run. */
export async function flush(rounds = 2): Promise<void> {
  for (let i = 0; i < rounds; i++) {
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
}
