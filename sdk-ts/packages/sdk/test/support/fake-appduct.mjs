// A stand-in for the `appduct` binary in the client's unit tests. FAKE_APPDUCT_MODE picks what
// it does:
// - echo: a success envelope whose data reports argv, cwd and FAKE_MARKER;
// - fail: a usage_error failure envelope, exit 64;
// - garbage: text that is not an envelope;
// - record: appends argv to FAKE_RECORD, then fails;
// - gate: sends argv to the Unix socket FAKE_GATE and waits for a line back before printing a
//   `daemon start` success envelope (the test starts its fake daemon in between).

import { appendFileSync } from "node:fs";
import net from "node:net";

const argv = process.argv.slice(2);
const print = (envelope) => process.stdout.write(`${JSON.stringify(envelope)}\n`);

switch (process.env.FAKE_APPDUCT_MODE) {
  case "echo":
    print({ ok: true, data: { sessionId: "echo-session", argv, cwd: process.cwd(), marker: process.env.FAKE_MARKER ?? null } });
    break;
  case "fail":
    print({ ok: false, error: { type: "usage_error", message: "--url requires --open web", details: { flag: "--url" } } });
    process.exitCode = 64;
    break;
  case "garbage":
    process.stdout.write("Link created\n  Session: x\n");
    break;
  case "record":
    appendFileSync(process.env.FAKE_RECORD, `${JSON.stringify(argv)}\n`);
    print({ ok: false, error: { type: "connection_error", message: "spawn refused by the fake" } });
    process.exitCode = 70;
    break;
  case "gate": {
    const socket = net.createConnection(process.env.FAKE_GATE);
    socket.write(`${JSON.stringify(argv)}\n`);
    socket.once("data", () => {
      socket.end();
      print({ ok: true, data: { daemon: { pid: 1, version: "0.1.0", wssPort: 1, webPort: 2, startedAt: "2026-01-01T00:00:00.000Z", spawned: true } } });
    });
    break;
  }
  default:
    process.stderr.write(`unknown FAKE_APPDUCT_MODE ${process.env.FAKE_APPDUCT_MODE}\n`);
    process.exitCode = 2;
}
