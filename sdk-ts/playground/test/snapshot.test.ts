// The playground's committed tool-surface snapshot (`playground/tools.snapshot.json`, §T17):
// the static snapshot of its declarations (`appduct-sdk snapshot`, no daemon) equals it, and so
// does `appduct tools snapshot` of the live Node playground session. After an intended change
// to the contract, rewrite it with:
//   node packages/sdk/dist/cli/main.js snapshot playground/dist/src/playground.js \
//     --export registerPlayground --out playground/tools.snapshot.json

import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

import { afterAll, describe, expect, it } from "vitest";

import { link, waitForSession, type DeviceLinkResult } from "../../packages/sdk/src/client/index.js";
import { createSandbox, type Sandbox } from "../../packages/sdk/test/support/appduct-sandbox.js";

const SDK_TS = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");
const BIN = path.join(SDK_TS, "packages", "sdk", "dist", "cli", "main.js");
const MODULE = path.join(SDK_TS, "playground", "dist", "src", "playground.js");
const COMMITTED = path.join(SDK_TS, "playground", "tools.snapshot.json");
const WAIT = 20_000;

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

function run(file: string, args: readonly string[], env: NodeJS.ProcessEnv = process.env): Promise<Run> {
  return new Promise((resolve) => {
    execFile(file, args, { env, timeout: WAIT }, (error, stdout, stderr) => {
      resolve({ code: error ? (typeof error.code === "number" ? error.code : -1) : 0, stdout, stderr });
    });
  });
}

let sb: Sandbox | undefined;
afterAll(async () => {
  await sb?.stop();
});

describe("the playground's tools snapshot", { timeout: 60_000 }, () => {
  it("the static snapshot of its declarations is the committed file", async () => {
    const committed = readFileSync(COMMITTED, "utf8");
    const printed = await run(process.execPath, [BIN, "snapshot", MODULE, "--export", "registerPlayground"]);
    expect(printed.code, printed.stderr).toBe(0);
    expect(printed.stdout).toBe(committed);
    const checked = await run(process.execPath, [BIN, "snapshot", MODULE, "--export", "registerPlayground", "--check", COMMITTED]);
    expect(checked.code, checked.stderr).toBe(0);
    expect(checked.stdout).toBe(`Tools snapshot matches ${COMMITTED} (5 tools, 1 event).\n`);
  });

  it("`appduct tools snapshot` of the live Node playground is the committed file", async () => {
    sb = createSandbox({ wssPort: 0, advertisedIp: "127.0.0.1" });
    const minted = (await link({ stateDir: sb.stateDir, bin: sb.bin, scheme: "playground", cwd: sb.stateDir })) as DeviceLinkResult;
    const waiting = waitForSession(minted.sessionId, { stateDir: sb.stateDir, bin: sb.bin, timeoutMs: WAIT });
    const device = sb.playground(minted.deepLink, ["--pins", minted.pin as string]);
    const app = await waiting;
    try {
      await device.waitForLine({ listener: "sessionChange", type: "claimed" }, WAIT);
      // The wait ends once the registry arrived (issue #23), so the surface is complete.
      expect(app.registry).toBe("received");
      const checked = await sb.cli(["tools", "snapshot", "--check", COMMITTED]);
      expect(checked).toMatchObject({ ok: true, data: { matches: true, tools: 5, events: 1 } });
      const env = Object.fromEntries(Object.entries(process.env).filter(([key]) => !key.startsWith("APPDUCT_")));
      const live = await run(sb.bin, ["--state-dir", sb.stateDir, "tools", "snapshot", "--write", "-"], env);
      expect(live.code, live.stderr).toBe(0);
      expect(live.stdout).toBe(readFileSync(COMMITTED, "utf8"));
    } finally {
      await app.close();
    }
  });
});
