// Release security tests of the Node entry (SECURITY.md §8): in link trust mode a link without a valid
// pin is refused and no socket is opened (SEC-14); a bootstrap address that is not a private LAN
// address is refused while allowPrivateLanOnly is true, the default (SEC-15). The entry under
// test is `@appduct/sdk/node` itself (active under vitest: NODE_ENV is not "production").
// SEC-57 (no session code in a production web bundle) is package.test.ts.

import tls from "node:tls";

import { afterEach, describe, expect, it, vi } from "vitest";

import { encodeBootstrapPayload } from "../src/core/bootstrap.js";
import * as node from "../src/node/index.js";
import { startDaemon, type Cleanup } from "./support/fake-daemon.js";

const cleanups: Cleanup[] = [];

afterEach(async () => {
  vi.restoreAllMocks();
  node.disconnect();
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

function link(address: string, port: number, pin?: string): string {
  const payload = encodeBootstrapPayload({
    address,
    port,
    sessionId: "session-1",
    token: Uint8Array.from({ length: 32 }, (_, i) => i),
    expiresAt: Math.floor(Date.now() / 1000) + 300,
  });
  return `nodeapp:///?appduct=${payload}${pin === undefined ? "" : `&pin=${encodeURIComponent(pin)}`}`;
}

async function refusal(promise: Promise<unknown>): Promise<string> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(node.AppductConnectError);
  return (error as InstanceType<typeof node.AppductConnectError>).code;
}

describe("Node entry security", () => {
  it("SEC-14: link trust mode refuses a link without a valid pin and opens no socket", async () => {
    const daemon = await startDaemon(cleanups, "tls");
    const dials = vi.spyOn(tls, "connect");
    const states: unknown[] = [];
    const reg = node.addAppductListener("stateChange", (e) => states.push(e));
    try {
      // No pins configured (link trust mode): the link's pin is the only trust anchor.
      for (const pin of [undefined, "", "sha256/nope", "sha1/47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="]) {
        expect(await refusal(node.connect(link("127.0.0.1", daemon.port, pin)))).toBe("missing_pin");
      }
    } finally {
      reg.remove();
    }
    expect(dials).not.toHaveBeenCalled();
    expect(daemon.tcpConnections).toBe(0);
    expect(daemon.upgrades).toBe(0);
    expect(states).toEqual([]);
    expect(node.getAppductState()).toBe("idle");

    // The same link with the daemon's pin does connect: the refusals above were the pin's.
    await node.connect(link("127.0.0.1", daemon.port, daemon.pin));
    expect(node.getAppductState()).toBe("active");
    expect(daemon.upgrades).toBe(1);
  });

  it("SEC-15: a bootstrap address of 8.8.8.8 is refused while allowPrivateLanOnly is true", async () => {
    const dials = vi.spyOn(tls, "connect");
    const before = node.getAppductState();
    const states: unknown[] = [];
    const reg = node.addAppductListener("stateChange", (e) => states.push(e));
    const pin = "sha256/47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=";
    try {
      for (const address of ["8.8.8.8", "1.1.1.1", "172.32.0.1", "::ffff:8.8.8.8"]) {
        expect(await refusal(node.connect(link(address, 8443, pin)))).toBe("address_not_allowed");
      }
    } finally {
      reg.remove();
    }
    expect(dials).not.toHaveBeenCalled();
    expect(states).toEqual([]);
    expect(node.getAppductState()).toBe(before);
  });
});
