// The Node baseline of appduct-bench: the least any Node daemon would do on a call. Control
// clients speak JSON-RPC lines on a Unix socket (`net`); devices dial wss (`ws` over `https`).
// A `tools.call` is forwarded to the device its `selector` names as a `tool_call` frame and the
// device's answer is routed back by id. No validation, policy, audit, events or timers: this is
// a lower bound, not a daemon. Devices are acked with a fixed `session_ack` so the same SDK
// device serves both this relay and the real daemon.
//
// Usage: node relay.mjs <socket path> <cert.pem> <key.pem>
// Prints one ready line `{"port": <wss port>}` on stdout.

import { readFileSync } from 'node:fs';
import { createServer as createHttpsServer } from 'node:https';
import { createServer as createNetServer } from 'node:net';
import { WebSocketServer } from 'ws';

const [socketPath, certPath, keyPath] = process.argv.slice(2);

/** session id → device WebSocket */
const devices = new Map();
/** wire id → { conn, id } of the control request waiting for it */
const pending = new Map();
let nextWire = 0;

const https = createHttpsServer({ cert: readFileSync(certPath), key: readFileSync(keyPath) });
const wss = new WebSocketServer({ server: https, perMessageDeflate: false });

wss.on('connection', (ws) => {
  ws.on('message', (data, isBinary) => {
    if (isBinary) return;
    const frame = JSON.parse(data.toString());
    switch (frame.type) {
      case 'session_claim':
        devices.set(frame.session_id, ws);
        ws.send(JSON.stringify({
          type: 'session_ack', status: 'ok', session_id: frame.session_id,
          alias: `relay-${devices.size}`, resume_token: `r${devices.size}`,
          keepalive_interval_s: 15, grace_s: 600,
        }));
        break;
      case 'tool_result':
      case 'tool_error': {
        const waiting = pending.get(frame.id);
        if (!waiting) return;
        pending.delete(frame.id);
        const reply = frame.type === 'tool_result'
          ? { jsonrpc: '2.0', id: waiting.id, result: { result: frame.result } }
          : { jsonrpc: '2.0', id: waiting.id, error: { code: 1, message: frame.error.message } };
        waiting.conn.write(JSON.stringify(reply) + '\n');
        break;
      }
      default:
        break;
    }
  });
});

const control = createNetServer((conn) => {
  let buffered = '';
  conn.setEncoding('utf8');
  conn.on('data', (chunk) => {
    buffered += chunk;
    let newline;
    while ((newline = buffered.indexOf('\n')) >= 0) {
      const line = buffered.slice(0, newline);
      buffered = buffered.slice(newline + 1);
      const request = JSON.parse(line);
      const params = request.params ?? {};
      const ws = devices.get(params.selector) ?? devices.values().next().value;
      if (request.method !== 'tools.call' || !ws) {
        conn.write(JSON.stringify({ jsonrpc: '2.0', id: request.id,
          error: { code: -32601, message: 'not relayed' } }) + '\n');
        continue;
      }
      const wire = `w${nextWire++}`;
      pending.set(wire, { conn, id: request.id });
      ws.send(JSON.stringify({ type: 'tool_call', session_id: params.selector, id: wire,
        name: params.name, args: params.args ?? {} }));
    }
  });
  conn.on('error', () => {});
});

https.listen(0, '127.0.0.1', () => {
  control.listen(socketPath, () => {
    process.stdout.write(JSON.stringify({ port: https.address().port }) + '\n');
  });
});
