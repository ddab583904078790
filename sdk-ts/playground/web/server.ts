// `npm run playground:web -- --port <p>`: serves the playground page on 127.0.0.1, with the
// page script bundled by esbuild at start-up (§T14.3).

import { readFileSync } from "node:fs";
import http from "node:http";
import path from "node:path";
import { fileURLToPath } from "node:url";

import { build } from "esbuild";

const HERE = path.dirname(fileURLToPath(import.meta.url));
/** playground/web (the page's sources), whether this runs from there or from dist/web. */
const WEB_DIR = path.basename(path.dirname(HERE)) === "dist" ? path.resolve(HERE, "../../web") : HERE;

export async function startPlaygroundServer(port: number): Promise<http.Server> {
  const bundle = await build({ entryPoints: [path.join(WEB_DIR, "page.ts")], bundle: true, format: "esm", platform: "browser", write: false, logLevel: "silent" });
  const script = bundle.outputFiles.map((f) => f.text).join("\n");
  const html = readFileSync(path.join(WEB_DIR, "index.html"), "utf8");
  const server = http.createServer((req, res) => {
    const url = new URL(req.url ?? "/", "http://127.0.0.1");
    if (url.pathname === "/page.js") {
      res.writeHead(200, { "content-type": "text/javascript; charset=utf-8", "cache-control": "no-store" });
      res.end(script);
    } else if (req.method === "GET") {
      // Any page path serves the page, so links may carry a path before #appduct=.
      res.writeHead(200, { "content-type": "text/html; charset=utf-8", "cache-control": "no-store" });
      res.end(html);
    } else {
      res.writeHead(405).end();
    }
  });
  await new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve));
  return server;
}

function portFromArgs(argv: string[]): number {
  const at = argv.indexOf("--port");
  const value = at >= 0 ? Number(argv[at + 1]) : 5173;
  if (!Number.isInteger(value) || value < 0 || value > 65535) {
    process.stderr.write("usage: playground:web -- --port <port>\n");
    process.exit(64);
  }
  return value;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === path.resolve(process.argv[1])) {
  const server = await startPlaygroundServer(portFromArgs(process.argv.slice(2)));
  const address = server.address();
  const port = typeof address === "object" && address ? address.port : 0;
  process.stdout.write(`${JSON.stringify({ url: `http://127.0.0.1:${port}/` })}\n`);
}
